package cluster

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// IsReady reports whether the Cluster's Ready condition is True.
func IsReady(c *v1.Cluster) bool {
	return meta.IsStatusConditionTrue(c.Status.Conditions, v1.ConditionReady)
}

// Selector parses an Environment's clusterSelector. Its error names the field and the fix.
func Selector(ls *metav1.LabelSelector) (labels.Selector, error) {
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("spec.clusterSelector does not parse: %v; fix it: matchLabels, or matchExpressions "+
			"with operator In or NotIn and at least one value, or Exists or DoesNotExist without values", err)
	}
	return s, nil
}

// Count returns how many of the Clusters the selector picks, and how many of those are Ready.
// A Cluster being deleted has left every Environment.
func Count(sel labels.Selector, clusters []v1.Cluster) (selected, ready int32) {
	for i := range clusters {
		if !clusters[i].DeletionTimestamp.IsZero() || !sel.Matches(labels.Set(clusters[i].Labels)) {
			continue
		}
		selected++
		if IsReady(&clusters[i]) {
			ready++
		}
	}
	return selected, ready
}

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
}

// EnvironmentReady decides the Environment's Ready condition: the first of InvalidSelector,
// NoClusters, ArgoCDNotInstalled and ProjectNotFound that holds, else Ready.
func EnvironmentReady(f EnvironmentFacts) (status metav1.ConditionStatus, reason, message string) {
	switch {
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
