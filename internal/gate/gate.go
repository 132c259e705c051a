// Package gate decides what holds a deployment back, in one place: the Environment's Ready
// condition (what an admin reads: its verifications, its pipeline of requirements, its
// selector, Argo CD and its AppProject) and the Serving's gate (what a tenant reads), from facts
// the reconcilers read. Reasons, their order and their messages live here and nowhere else.
package gate

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// EnvironmentFacts is what the Environment's Ready condition is decided from.
type EnvironmentFacts struct {
	// SelectorError is the parse error of spec.clusterSelector, if any.
	SelectorError error
	// Selector is the parsed selector, printed in messages.
	Selector labels.Selector
	// Selected and Ready count the Clusters the selector picks, and the Ready ones among them.
	Selected, Ready int32
	// Project is spec.project; ArgoCDNamespace is where its AppProject must live.
	Project, ArgoCDNamespace string
	// ArgoCDInstalled is false when the AppProject kind is not served.
	ArgoCDInstalled bool
	// ProjectFound reports whether the AppProject exists.
	ProjectFound bool
	// Namespace is the Environment's namespace. MissingRequired are the Environments its
	// spec.requires names that do not exist there; RequirementCycle, when not empty, is the cycle
	// its requirements form (it first and last): a pipeline that can never pass.
	Namespace        string
	MissingRequired  []string
	RequirementCycle []string
	// VerificationProblem says what is wrong with the Environment's verifications
	// (verify.Problem; empty when nothing is).
	VerificationProblem string
}

// EnvironmentReady decides the Environment's Ready condition: the first of InvalidVerification,
// the pipeline's problem (the admin's to fix first, whatever else holds), InvalidSelector,
// NoClusters, ArgoCDNotInstalled and ProjectNotFound that holds, else Ready.
func EnvironmentReady(f EnvironmentFacts) (status metav1.ConditionStatus, reason, message string) {
	switch {
	case f.VerificationProblem != "":
		return metav1.ConditionFalse, v1.ReasonInvalidVerification, f.VerificationProblem
	case len(f.MissingRequired) > 0:
		return metav1.ConditionFalse, v1.ReasonRequiredEnvironmentNotFound, fmt.Sprintf(
			"spec.requires names %s, which does not exist in namespace %s: create it or remove it from spec.requires; until then no release is promoted here",
			strings.Join(f.MissingRequired, ", "), f.Namespace)
	case len(f.RequirementCycle) > 0:
		return metav1.ConditionFalse, v1.ReasonRequirementCycle, fmt.Sprintf(
			"spec.requires forms a cycle (%s): no release could ever pass it; remove one of the requirements", strings.Join(f.RequirementCycle, " → "))
	case f.SelectorError != nil:
		return metav1.ConditionFalse, v1.ReasonInvalidSelector, f.SelectorError.Error()
	case f.Selected == 0:
		return metav1.ConditionFalse, v1.ReasonNoClusters, fmt.Sprintf(
			"spec.clusterSelector %s selects no Cluster: label the Clusters to deploy to, or change the selector", describe(f.Selector))
	case !f.ArgoCDInstalled:
		return metav1.ConditionFalse, v1.ReasonArgoCDNotInstalled, fmt.Sprintf(
			"Argo CD's AppProject kind (argoproj.io/v1alpha1) is not served: install Argo CD, whose namespace Kokumi reads is %q", f.ArgoCDNamespace)
	case !f.ProjectFound:
		return metav1.ConditionFalse, v1.ReasonProjectNotFound, fmt.Sprintf(
			"spec.project: AppProject %q not found in namespace %q: create it, or name an existing one", f.Project, f.ArgoCDNamespace)
	default:
		return metav1.ConditionTrue, v1.ReasonEnvironmentReady, fmt.Sprintf(
			"%d of %d selected Clusters Ready; AppProject %q", f.Ready, f.Selected, f.Project)
	}
}

func describe(s labels.Selector) string {
	if s == nil || s.Empty() {
		return "(everything)"
	}
	return fmt.Sprintf("%q", s.String())
}

// ServingFacts is what a Serving's gate is decided from, as the Serving reconciler reads it, in
// the order it reads it: a fact behind one that fails is not read, and not looked at.
type ServingFacts struct {
	// ArgoCDInstalled is false while Argo CD's Application kind is not served.
	ArgoCDInstalled bool
	// ArgoCDNamespace is Kokumi's --argocd-namespace; ArgoCDNamespaceFound whether it exists.
	ArgoCDNamespace      string
	ArgoCDNamespaceFound bool
	// Namespace is the Serving's.
	Namespace string
	// Order is spec.orderRef; OrderFound whether it exists.
	Order      string
	OrderFound bool
	// Environment is the Order's Environment; EnvironmentFound whether it exists. LocalEnabled
	// is true when Kokumi provides the Environment local (--local-project set), which stands in
	// for a namespace that has no Environment of that name.
	Environment      string
	EnvironmentFound bool
	LocalEnabled     bool
	// SelectorError is the parse error of the Environment's spec.clusterSelector.
	SelectorError error
	// Clusters counts the Clusters it selects (those being deleted have left).
	Clusters int
	// Project is the Environment's AppProject; ProjectFound whether it exists;
	// ProjectAdmitsNamespace whether its spec.sourceNamespaces admit Namespace.
	Project                string
	ProjectFound           bool
	ProjectAdmitsNamespace bool
	// Preparation is spec.preparationName; PreparationFound whether it exists;
	// PreparationOrder the Order it was rendered for.
	Preparation      string
	PreparationFound bool
	PreparationOrder string
	// GateProblem says why a verification of the Environment cannot run as written
	// (verify.Problem); empty when it can.
	GateProblem string
}

// Verdict is what holds a Serving back, if anything.
type Verdict struct {
	// Reason and Message are the Serving's Ready reason and message; Reason is "" when nothing
	// holds it.
	Reason, Message string
	// Stop is true when the Serving may not deploy at all: Kokumi deletes its Applications, and
	// what runs on the clusters keeps running. False leaves them as they are while it waits.
	Stop bool
	// TargetKnown is true once the Environment's clusters are known: the Applications of
	// clusters that left it go, whatever holds the Serving after that.
	TargetKnown bool
	// RecheckAfter is when to look again without any event; 0 waits for one.
	RecheckAfter time.Duration
}

// RecheckArgoCD is how often a Serving waiting for Argo CD's namespace, or held by an
// Application of its name that is not Kokumi's, looks again.
const RecheckArgoCD = time.Minute

// Serving decides the first of ArgoCDNotInstalled, OrderNotFound, EnvironmentNotFound,
// InvalidSelector, NoClusters, ProjectNotFound, ProjectNotPermitted, NoPreparation and
// PreparationNotFound that holds a Serving back. The messages are the tenant's: the probe's
// errors and the admin's details stay on the Cluster and the Environment.
func Serving(f ServingFacts) Verdict {
	wait := func(reason, message string) Verdict { return Verdict{Reason: reason, Message: message} }
	stop := func(reason, message string) Verdict { return Verdict{Reason: reason, Message: message, Stop: true} }
	switch {
	case !f.ArgoCDInstalled:
		// Kokumi begins watching when Argo CD's CRDs appear, and every Serving looks again then.
		return wait(v1.ReasonArgoCDNotInstalled, "Argo CD's Application CRD is not installed: install Argo CD (its CRDs and controller) in namespace "+f.ArgoCDNamespace)
	case !f.ArgoCDNamespaceFound:
		v := wait(v1.ReasonArgoCDNotInstalled, fmt.Sprintf("Argo CD's namespace %q does not exist: install Argo CD there, or start Kokumi with --argocd-namespace naming where it runs", f.ArgoCDNamespace))
		v.RecheckAfter = RecheckArgoCD
		return v
	case !f.OrderFound:
		return stop(v1.ReasonOrderNotFound, fmt.Sprintf("Order %s does not exist in namespace %s: spec.orderRef must name the Order this Serving deploys", f.Order, f.Namespace))
	case !f.EnvironmentFound && f.Environment == v1.LocalEnvironmentName && !f.LocalEnabled:
		return stop(v1.ReasonEnvironmentNotFound, fmt.Sprintf("Environment local is not enabled here and namespace %s has no Environment named local: an admin enables it by starting Kokumi with --local-project naming a dedicated AppProject (see docs/the-environment-local.md), or creates an Environment local; to deploy elsewhere, create another Order", f.Namespace))
	case !f.EnvironmentFound && f.Environment != v1.LocalEnvironmentName:
		return stop(v1.ReasonEnvironmentNotFound, fmt.Sprintf("Environment %s does not exist in namespace %s: ask an admin to create it; to deploy to another Environment, create another Order", f.Environment, f.Namespace))
	case f.SelectorError != nil:
		return stop(v1.ReasonInvalidSelector, fmt.Sprintf("Environment %s has an invalid spec.clusterSelector: %v", f.Environment, f.SelectorError))
	case f.Clusters == 0:
		return stop(v1.ReasonNoClusters, fmt.Sprintf("Environment %s selects no Cluster: an admin registers Clusters with labels that match its spec.clusterSelector", f.Environment))
	}
	v := servingAfterTarget(f)
	v.TargetKnown = true
	return v
}

// servingAfterTarget decides what holds a Serving whose Environment's clusters are known.
func servingAfterTarget(f ServingFacts) Verdict {
	switch {
	case !f.ProjectFound:
		return Verdict{Stop: true, Reason: v1.ReasonProjectNotFound, Message: fmt.Sprintf("Argo CD AppProject %s/%s of Environment %s does not exist: ask an admin to create it, or to set the Environment's spec.project", f.ArgoCDNamespace, f.Project, f.Environment)}
	case !f.ProjectAdmitsNamespace:
		return Verdict{Stop: true, Reason: v1.ReasonProjectNotPermitted, Message: fmt.Sprintf("AppProject %s does not admit namespace %s: an admin adds it to the project's spec.sourceNamespaces", f.Project, f.Namespace)}
	case f.Preparation == "":
		return Verdict{Reason: v1.ReasonNoPreparation, Message: "no Preparation is promoted yet: set spec.preparationName (Manual promotion), or wait for the Order to render one (Automatic)"}
	case !f.PreparationFound:
		return Verdict{Reason: v1.ReasonPreparationNotFound, Message: fmt.Sprintf("Preparation %s does not exist in namespace %s: spec.preparationName must name a Preparation of Order %s", f.Preparation, f.Namespace, f.Order)}
	case f.PreparationOrder != f.Order:
		return Verdict{Reason: v1.ReasonPreparationNotFound, Message: fmt.Sprintf("Preparation %s was rendered for Order %s, not %s: promote a Preparation of this Order", f.Preparation, f.PreparationOrder, f.Order)}
	case f.GateProblem != "":
		return Verdict{Reason: v1.ReasonInvalidVerification, Message: fmt.Sprintf("Environment %s cannot verify a release: %s; an admin fixes it, and until then the clusters keep running what they run", f.Environment, f.GateProblem)}
	}
	return Verdict{}
}

// AwaitingStage is the Serving's verdict while its Preparation waits for the stages of its
// Environment (the promotion gate's message says which); what runs keeps running.
func AwaitingStage(preparation, environment, why string, recheck time.Duration) Verdict {
	v := Verdict{Reason: v1.ReasonAwaitingStage, Message: fmt.Sprintf("Preparation %s waits for the stages of Environment %s: %s; the clusters keep running what they run",
		preparation, environment, why), TargetKnown: true}
	if recheck > 0 {
		v.RecheckAfter = recheck + time.Second
	}
	return v
}
