package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/record"
)

const soak = 30 * time.Minute

// deployStaging renders app-staging (Automatic), plays Argo CD healthy on its cluster and waits
// for its deployment record.
func (f *fixture) deployStaging() *v1.Preparation {
	f.t.Helper()
	f.order("staging", v1.PromotionAutomatic)
	prep := f.latest("app-staging")
	f.eventually("staging promoted", func() error {
		if p := f.serving("app-staging").Spec.PreparationName; p != prep.Name {
			return fmt.Errorf("staging runs %q", p)
		}
		return nil
	})
	f.playArgoCD("app-staging", []string{"staging-1"}, "Healthy")
	f.servingReady("app-staging", v1.ReasonDeployed)
	f.records(prep.Name, 1)
	return prep
}

func TestAReleaseFlowsThroughStagingAfterItsSoak(t *testing.T) {
	f := newFixture(t, soak)
	f.order("prod", v1.PromotionAutomatic)
	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging has not deployed this release")

	staging := f.deployStaging()
	recs := f.records(staging.Name, 1)
	if recs[0].Environment != "staging" || recs[0].Clusters != 1 || recs[0].KeyID == "" || !strings.HasPrefix(recs[0].Digest, "sha256:") {
		t.Errorf("record in the status: %+v", recs[0])
	}
	attached := f.attached(staging)
	if len(attached) != 1 || !attached[0].Verified {
		t.Fatalf("attached records: %+v", attached)
	}
	p := attached[0].Predicate
	if attached[0].Digest != recs[0].Digest || p.Order != "app-staging" || p.Namespace != f.ns || p.Environment != "staging" ||
		p.TargetNamespace != "podinfo" || p.Preparation != staging.Name || strings.Join(p.Clusters, ",") != f.clusterName("staging-1") {
		t.Errorf("the record says %+v (digest %s), want the staging run of %s", p, attached[0].Digest, staging.Name)
	}

	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging soaking", "of 30m", "the Serving keeps running what it runs")
	if got := f.serving("app-prod").Spec.PreparationName; got != "" {
		t.Fatalf("prod was promoted to %s during the soak", got)
	}
	clock.Advance(soak + time.Minute)
	prod := f.latest("app-prod")
	f.eventually("prod promoted once the soak ends", func() error {
		if got := f.serving("app-prod").Spec.PreparationName; got != prod.Name {
			return fmt.Errorf("prod runs %q", got)
		}
		return nil
	})
	f.orderReady("app-prod", v1.ReasonRendered)
	f.playArgoCD("app-prod", []string{"prod-1", "prod-2"}, "Healthy")
	f.servingReady("app-prod", v1.ReasonDeployed)
	if recs := f.records(prod.Name, 1); recs[0].Clusters != 2 || recs[0].Environment != "prod" {
		t.Errorf("prod's record: %+v", recs[0])
	}

	// The key was made on first use, never shown, and its public half is published.
	var secret corev1.Secret
	must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: record.SecretName}, &secret))
	var cm corev1.ConfigMap
	must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: record.ConfigMapName}, &cm))
	if !strings.Contains(cm.Data[record.CurrentKeyEntry], "PUBLIC KEY") || cm.Data[recs[0].KeyID+".pub"] != cm.Data[record.CurrentKeyEntry] {
		t.Errorf("the public keys ConfigMap lists %v", keysOf(cm.Data))
	}
	for _, s := range []*v1.Serving{f.serving("app-staging"), f.serving("app-prod")} {
		for _, c := range s.Status.Conditions {
			if strings.Contains(c.Message, "PRIVATE KEY") {
				t.Errorf("Serving %s shows the private key", s.Name)
			}
		}
	}
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestASoakStartsAgainWhenTheStageDegrades(t *testing.T) {
	f := newFixture(t, soak)
	staging := f.deployStaging()
	f.order("prod", v1.PromotionAutomatic)
	clock.Advance(20 * time.Minute)
	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging soaking 20m of 30m")

	f.playArgoCD("app-staging", []string{"staging-1"}, "Degraded")
	f.servingReady("app-staging", v1.ReasonDeploymentFailed)
	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging has not deployed this release yet (Order app-staging: DeploymentFailed)")

	f.playArgoCD("app-staging", []string{"staging-1"}, "Healthy")
	f.servingReady("app-staging", v1.ReasonDeployed)
	// Deployed again: a new record, and the soak starts from zero.
	f.records(staging.Name, 2)
	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging soaking", "s of 30m") // seconds, not 20m
	clock.Advance(25 * time.Minute)
	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging soaking 25m of 30m")
	if got := f.serving("app-prod").Spec.PreparationName; got != "" {
		t.Fatalf("prod was promoted to %s before the restarted soak ended", got)
	}
	clock.Advance(6 * time.Minute)
	f.orderReady("app-prod", v1.ReasonRendered)
	if got := f.serving("app-prod").Spec.PreparationName; got == "" {
		t.Fatal("prod was not promoted after the soak")
	}
}

func TestAManualPromotionMustPassTheStagesAndTheStageMustStillRunTheRelease(t *testing.T) {
	f := newFixture(t, soak)
	f.order("prod", v1.PromotionManual)
	prod := f.latest("app-prod")

	// Promoted by hand before staging ran it: the Serving does not deploy it and says why.
	f.promote("app-prod", prod.Name)
	f.servingReady("app-prod", v1.ReasonAwaitingStage, "Preparation "+prod.Name+" waits for the stages of Environment prod", "staging has not deployed this release")
	if n := f.applications("app-prod"); n != 0 {
		t.Fatalf("prod has %d Applications for a Preparation that did not pass staging", n)
	}

	first := f.deployStaging()
	clock.Advance(soak + time.Minute)
	f.poke("app-prod")
	f.servingReady("app-prod", v1.ReasonProgressing)
	if n := f.applications("app-prod"); n != 2 {
		t.Fatalf("prod has %d Applications, want 2", n)
	}

	// staging moves on to another release (another image): prod's next promotion of the old
	// release is refused, as the release no longer runs there; prod keeps running what it runs.
	f.playArgoCD("app-prod", []string{"prod-1", "prod-2"}, "Healthy")
	f.servingReady("app-prod", v1.ReasonDeployed)
	f.product("podinfo-staging", "6.15.0")
	f.eventually("staging renders and deploys the new release", func() error {
		var o v1.Order
		f.get("app-staging", &o)
		if s := f.serving("app-staging"); s.Spec.PreparationName == first.Name || s.Spec.PreparationName != o.Status.LatestPreparation {
			return fmt.Errorf("staging runs %s, latest is %s", s.Spec.PreparationName, o.Status.LatestPreparation)
		}
		return nil
	})
	f.playArgoCD("app-staging", []string{"staging-1"}, "Healthy")
	f.eventually("staging Deployed with the new release", func() error {
		s := f.serving("app-staging")
		if s.Status.Revision == first.Spec.Artifact.Digest {
			return fmt.Errorf("staging still at %s", s.Status.Revision)
		}
		return hasCondition(s.Status.Conditions, v1.ReasonDeployed, nil)
	})
	verdict, err := pipeline.Check(f.ctx, f.ns, "prod", prod)
	must(t, err)
	if verdict.Allowed || !strings.Contains(verdict.Message, "staging has not deployed this release (it runs another one)") {
		t.Errorf("verdict once staging moved on: %+v", verdict)
	}
}

func TestAnotherNamespacesStageDoesNotCount(t *testing.T) {
	f := newFixture(t, 0)
	f.deployStaging()
	// A second team with the same Environments and the same release, but no staging run of its own.
	g := newFixture(t, 0)
	g.order("prod", v1.PromotionAutomatic)
	g.orderReady("app-prod", v1.ReasonAwaitingStage, "staging has not deployed this release")
	if got := g.serving("app-prod").Spec.PreparationName; got != "" {
		t.Fatalf("another namespace's staging let prod promote %s", got)
	}
	// The first team's prod, with no soak, promotes at once.
	f.order("prod", v1.PromotionAutomatic)
	f.orderReady("app-prod", v1.ReasonRendered)
}

func TestARecordSignedByAKeyNoLongerListedIsIgnored(t *testing.T) {
	f := newFixture(t, 0)
	staging := f.deployStaging()
	keyID := f.records(staging.Name, 1)[0].KeyID

	// An admin removes the key that signed it from the list: its records no longer count.
	var cm corev1.ConfigMap
	must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: record.ConfigMapName}, &cm))
	saved := cm.DeepCopy().Data
	t.Cleanup(func() {
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(&cm), &cm))
			cm.Data = saved
			return env.Client.Update(f.ctx, &cm)
		}))
	})
	delete(cm.Data, keyID+".pub")
	delete(cm.Data, record.CurrentKeyEntry)
	must(t, env.Client.Update(f.ctx, &cm))

	f.order("prod", v1.PromotionAutomatic)
	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging runs this release but its deployment record does not verify", "Kokumi ignores it")
	if got := f.serving("app-prod").Spec.PreparationName; got != "" {
		t.Fatalf("prod promoted %s on a record no listed key verifies", got)
	}
}

func TestCyclesAndMissingStagesAreConditionsNotHangs(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 0)
	env1 := func(name string, requires ...string) {
		var reqs []v1.StageRequirement
		for _, r := range requires {
			reqs = append(reqs, v1.StageRequirement{Environment: r})
		}
		f.environment(name, reqs)
	}
	env1("blue", "green")
	env1("green", "blue")
	env1("lonely", "nowhere")
	envReady := func(name, reason, msg string) {
		f.eventually("Environment "+name+" "+reason, func() error {
			var e v1.Environment
			f.get(name, &e)
			c := apimeta.FindStatusCondition(e.Status.Conditions, v1.ConditionReady)
			if c == nil || c.Reason != reason || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, msg) {
				return fmt.Errorf("Ready is %+v", c)
			}
			return nil
		})
	}
	envReady("blue", v1.ReasonRequirementCycle, "spec.requires forms a cycle (blue → green → blue)")
	envReady("lonely", v1.ReasonRequiredEnvironmentNotFound, "spec.requires names nowhere, which does not exist")

	f.product("podinfo-blue", "6.14.1")
	f.order("blue", v1.PromotionAutomatic)
	f.orderReady("app-blue", v1.ReasonAwaitingStage, "cycle (blue → green → blue)")

	// Creating nowhere mends lonely.
	env1("nowhere")
	f.eventually("Environment lonely no longer misses nowhere", func() error {
		var e v1.Environment
		f.get("lonely", &e)
		if c := apimeta.FindStatusCondition(e.Status.Conditions, v1.ConditionReady); c == nil || c.Reason == v1.ReasonRequiredEnvironmentNotFound {
			return fmt.Errorf("Ready is %+v", c)
		}
		return nil
	})

	// An Environment cannot require itself.
	err := env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "selfish", Namespace: f.ns},
		Spec: v1.EnvironmentSpec{Project: "p", Requires: []v1.StageRequirement{{Environment: "selfish"}}}})
	if err == nil || !strings.Contains(err.Error(), "spec.requires cannot name the Environment itself") {
		t.Errorf("an Environment requiring itself: %v", err)
	}
}

// The Environment local is off unless an admin names a dedicated AppProject for it: a tenant's
// Order to local deploys nothing, even where Argo CD's default project admits every namespace
// (the project that permits every destination and cluster-scoped kind on the cluster that holds
// every member's credentials). And Kokumi refuses to run local in that project.
func TestTheEnvironmentLocalIsOffUnlessAnAdminTurnsItOn(t *testing.T) {
	f := newFixture(t, 0)
	project := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"sourceNamespaces": []any{"*"}, "destinations": []any{map[string]any{"server": "*", "namespace": "*"}}, "sourceRepos": []any{"*"},
		"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
	}}}
	project.SetGroupVersionKind(argocd.AppProjectGVK)
	project.SetName("default")
	project.SetNamespace(cfg.ArgoCDNamespace)
	if err := env.Client.Create(f.ctx, project); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	f.product("podinfo-local", "6.14.1")
	f.order("local", v1.PromotionAutomatic)
	f.servingReady("app-local", v1.ReasonEnvironmentNotFound, "Environment local is not enabled here", "--local-project naming a dedicated AppProject")
	if n := f.applications("app-local"); n != 0 {
		t.Fatalf("an Order to the Environment local that is off has %d Applications", n)
	}

	off := cfg
	off.LocalProject = "default"
	if _, err := controller.NewManager(env.Config, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: off}); err == nil ||
		!strings.Contains(err.Error(), "--local-project=default is refused") {
		t.Errorf("Kokumi started with the Environment local in Argo CD's default project: %v", err)
	}
}

// A cluster that stays Progressing past the progress deadline fails the deployment with a reason
// saying so (like a Deployment's progressDeadlineSeconds), and recovers when Argo CD does.
func TestAClusterProgressingPastTheDeadlineFailsTheDeployment(t *testing.T) {
	f := newFixture(t, 0)
	f.order("staging", v1.PromotionAutomatic)
	f.servingReady("app-staging", v1.ReasonProgressing)
	deadline := config.Default().ProgressDeadline
	clock.Advance(deadline + time.Minute)
	f.poke("app-staging") // stands in for the requeue at the deadline, which the fake clock does not reach
	s := f.servingReady("app-staging", v1.ReasonDeploymentFailed, f.clusterName("staging-1")+" ("+v1.ReasonProgressDeadlineExceeded+")")
	if len(s.Status.Targets) != 1 || !strings.Contains(s.Status.Targets[0].Conditions[0].Message, "after the progress deadline of "+deadline.String()) {
		t.Errorf("targets %+v", s.Status.Targets)
	}
	f.playArgoCD("app-staging", []string{"staging-1"}, "Healthy")
	f.servingReady("app-staging", v1.ReasonDeployed)
}

// A release's soak starts when that release is Deployed, never earlier: a controller that wrote
// the new release's Applications and then crashed (or lost its status write to a conflict)
// before writing Progressing finds the clusters healthy on the new release when it comes back,
// and goes from Deployed(A) to Deployed(B) in one reconcile. B's soak still starts then, not at
// A's.
func TestASoakStartsWithItsReleaseAfterACrashBetweenTheWritesAndTheStatus(t *testing.T) {
	f := newFixture(t, soak)
	a := f.deployStaging()
	clock.Advance(soak + time.Minute)
	if v, err := pipeline.Check(f.ctx, f.ns, "prod", a); err != nil || !v.Allowed {
		t.Fatalf("release A after its soak: %+v, %v", v, err)
	}

	// The controller writes B's Application, and its status write fails, again and again.
	blocker.block(f.ns, "app-staging")
	defer blocker.unblock(f.ns, "app-staging")
	f.product("podinfo-staging", "6.15.0")
	b := f.promoted("app-staging", a.Name)
	name := fleet.ApplicationName(f.ns, "app-staging", f.clusterName("staging-1"))
	f.eventually("B's Application written", func() error {
		app := &unstructured.Unstructured{}
		app.SetGroupVersionKind(argocd.ApplicationGVK)
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: name}, app); err != nil {
			return err
		}
		if revision, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision"); revision != b.Spec.Artifact.Digest {
			return fmt.Errorf("the Application asks for %s", revision)
		}
		return nil
	})
	if s := f.serving("app-staging"); s.Status.Revision != a.Spec.Artifact.Digest {
		t.Fatalf("the status was written (revision %s): the test did not land in the window", s.Status.Revision)
	}
	// Argo CD syncs B, healthy, before the controller writes any status.
	f.playArgoCD("app-staging", []string{"staging-1"}, "Healthy")
	blocker.unblock(f.ns, "app-staging")
	f.poke("app-staging")
	f.eventually("staging Deployed with B", func() error {
		s := f.serving("app-staging")
		c := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
		if s.Status.Revision != b.Spec.Artifact.Digest || c == nil || c.Reason != v1.ReasonDeployed {
			return fmt.Errorf("revision %s, Ready %+v", s.Status.Revision, c)
		}
		return nil
	})
	f.records(b.Name, 1)
	v, err := pipeline.Check(f.ctx, f.ns, "prod", b)
	must(t, err)
	if v.Allowed || !strings.Contains(v.Message, "staging soaking") {
		t.Fatalf("B passed staging at once, on A's soak: %+v", v)
	}
	s := f.serving("app-staging")
	if s.Status.DeployedRevision != b.Spec.Artifact.Digest || s.Status.DeployedSince == nil || clock.Now().Sub(s.Status.DeployedSince.Time) > time.Minute {
		t.Errorf("the soak clock says %s since %v", s.Status.DeployedRevision, s.Status.DeployedSince)
	}
	clock.Advance(soak + time.Minute)
	if v, err := pipeline.Check(f.ctx, f.ns, "prod", b); err != nil || !v.Allowed {
		t.Fatalf("release B after its own soak: %+v, %v", v, err)
	}
}
