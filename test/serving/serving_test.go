package serving

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

func TestDeploysToEveryClusterThroughOneApplicationEach(t *testing.T) {
	f := newFixture(t)
	for _, c := range []string{"a1", "b1", "c1"} {
		f.cluster(c, true)
	}
	prep := f.preparation("podinfo-edge-3f2a1c", "podinfo", false)
	f.order("edge", prep.Name)

	f.ready(v1.ReasonProgressing, "waiting for a1, b1, c1")
	// A cluster whose Application is not written yet is Progressing too ("creating
	// Application"), and under API faults a create may fail and be retried: so wait for the three.
	f.eventually("3 Applications", func() error {
		if n := len(f.apps()); n != 3 {
			return fmt.Errorf("want 3 Applications, got %d", n)
		}
		return nil
	})
	app, err := f.app("b1")
	must(t, err)
	want := map[string]string{
		"spec.project":                       f.project,
		"spec.source.repoURL":                "oci://" + registry.Addr + "/" + f.ns + "/podinfo-edge",
		"spec.source.targetRevision":         prep.Spec.Artifact.Digest,
		"spec.source.path":                   ".",
		"spec.destination.server":            "https://b1.example:6443",
		"spec.destination.namespace":         "podinfo",
		"spec.syncPolicy.automated.prune":    "true",
		"spec.syncPolicy.automated.selfHeal": "true",
		// Argo CD does not retry a failed automated sync of the same revision unless told to.
		"spec.syncPolicy.retry.limit":               "5",
		"spec.syncPolicy.retry.backoff.duration":    "5s",
		"spec.syncPolicy.retry.backoff.factor":      "2",
		"spec.syncPolicy.retry.backoff.maxDuration": "3m0s",
	}
	for path, w := range want {
		v, _, _ := unstructured.NestedFieldNoCopy(app.Object, strings.Split(path, ".")...)
		if fmt.Sprint(v) != w {
			t.Errorf("%s = %v, want %s", path, v, w)
		}
	}
	opts, _, _ := unstructured.NestedStringSlice(app.Object, "spec", "syncOptions")
	if so, _, _ := unstructured.NestedStringSlice(app.Object, "spec", "syncPolicy", "syncOptions"); len(so) != 1 || so[0] != "CreateNamespace=true" {
		t.Errorf("syncOptions %v %v", so, opts)
	}
	if len(app.GetFinalizers()) != 0 {
		t.Errorf("Application has finalizers %v; deleting it must leave what runs", app.GetFinalizers())
	}
	if l := app.GetLabels(); l[argocd.LabelCluster] != "b1" || l[argocd.LabelServing] != "podinfo-edge" || l[argocd.LabelServingNamespace] != f.ns {
		t.Errorf("labels %v", l)
	}
	// One Event for the clusters that joined together, not one each.
	f.expectJoined("a1", "b1", "c1")

	// Argo CD syncs two; the third is still on its way.
	f.healthy(prep.Spec.Artifact.Digest, "a1", "b1")
	s := f.ready(v1.ReasonProgressing, "healthy on 2 of 3 Ready clusters; waiting for c1")
	if s.Status.Clusters != (v1.ClusterCounts{Selected: 3, Healthy: 2, Progressing: 1}) || len(s.Status.Targets) != 1 || s.Status.Targets[0].Cluster != "c1" {
		t.Errorf("status %+v", s.Status)
	}
	f.healthy(prep.Spec.Artifact.Digest, "c1")
	s = f.ready(v1.ReasonDeployed, "Deployed Preparation podinfo-edge-3f2a1c to a1, b1, c1")
	if s.Status.Clusters != (v1.ClusterCounts{Selected: 3, Healthy: 3}) || len(s.Status.Targets) != 0 {
		t.Errorf("status %+v", s.Status)
	}

	// The spec's commands.
	out, err := env.Kubectl(f.ctx, "get", "serving", "podinfo-edge", "-n", f.ns, "-o", "wide", "--no-headers")
	must(t, err)
	if fields := strings.Fields(out); len(fields) < 7 || strings.Join(fields[:7], " ") != "podinfo-edge podinfo-edge podinfo-edge-3f2a1c 3 3 True Deployed" {
		t.Errorf("kubectl get serving -o wide: %q", out)
	}
	out, err = env.Kubectl(f.ctx, "-n", "argocd", "get", "applications", "-o", "name",
		"-l", "delivery.kokumi.dev/serving=podinfo-edge,delivery.kokumi.dev/serving-namespace="+f.ns)
	must(t, err)
	if n := len(strings.Fields(out)); n != 3 {
		t.Errorf("kubectl get applications -l …: %d, %q", n, out)
	}
	f.expectEvents(v1.ReasonDeployed, "Deployed Preparation podinfo-edge-3f2a1c to a1, b1, c1")
}

func TestAClusterNotReadyIsHeldWithoutHoldingTheServingBack(t *testing.T) {
	f := newFixture(t)
	f.cluster("a2", true)
	f.cluster("b2", true)
	c := f.cluster("c2", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a2", "b2", "c2")
	f.ready(v1.ReasonDeployed, "to a2, b2, c2")

	f.setReady(c, false)
	s := f.ready(v1.ReasonDeployed, "Deployed Preparation podinfo-edge-1 to a2, b2; not ready: c2")
	tgt := f.target(s, "c2")
	if tgt == nil || tgt.Conditions[0].Reason != v1.ReasonClusterNotReady || !strings.Contains(tgt.Conditions[0].Message, "Cluster c2 is not Ready: Unreachable") || tgt.Revision != prep.Spec.Artifact.Digest {
		t.Fatalf("target c2 = %+v", tgt)
	}
	// The probe's error stays on the Cluster: tenants read Servings, not Clusters.
	ready := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
	if msg := tgt.Conditions[0].Message + ready.Message; strings.Contains(msg, "connection refused") || strings.Contains(msg, "example:6443") {
		t.Errorf("the Serving shows the Cluster's probe error: %q", msg)
	}
	if s.Status.Clusters.Held != 1 || s.Status.Clusters.Healthy != 2 {
		t.Errorf("counts %+v", s.Status.Clusters)
	}
	held, err := f.app("c2")
	must(t, err)

	// A new Preparation goes to the Ready clusters; the held one's Application stays as it is.
	next := f.preparation("podinfo-edge-2", "podinfo", false)
	f.promote(next.Name)
	f.eventually("a2 and b2 move to the new Preparation", func() error {
		for _, c := range []string{"a2", "b2"} {
			app, err := f.app(c)
			if err != nil {
				return err
			}
			if rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision"); rev != next.Spec.Artifact.Digest {
				return fmt.Errorf("%s at %s", c, rev)
			}
		}
		return nil
	})
	f.healthy(next.Spec.Artifact.Digest, "a2", "b2")
	f.ready(v1.ReasonDeployed, "Deployed Preparation podinfo-edge-2 to a2, b2; not ready: c2")
	after, err := f.app("c2")
	must(t, err)
	if after.GetResourceVersion() != held.GetResourceVersion() {
		t.Errorf("the held cluster's Application changed while its Cluster was not Ready")
	}

	// When no Cluster is Ready, the deployment fails.
	for _, n := range []string{"a2", "b2"} {
		var cl v1.Cluster
		must(t, env.Client.Get(f.ctx, client.ObjectKey{Name: n}, &cl))
		f.setReady(&cl, false)
	}
	f.ready(v1.ReasonDeploymentFailed, "No Cluster of Environment edge is Ready: a2, b2, c2")

	// Ready again: the held Application catches up.
	f.setReady(c, true)
	f.eventually("c2 moves to the new Preparation", func() error {
		app, err := f.app("c2")
		if err != nil {
			return err
		}
		if rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision"); rev != next.Spec.Artifact.Digest {
			return fmt.Errorf("c2 at %s", rev)
		}
		return nil
	})
}

func TestADegradedClusterFailsTheDeployment(t *testing.T) {
	f := newFixture(t)
	f.cluster("a3", true)
	f.cluster("b3", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a3")
	f.playArgoCD("b3", "Synced", "Degraded", prep.Spec.Artifact.Digest)
	s := f.ready(v1.ReasonDeploymentFailed, "Preparation podinfo-edge-1 failed on b3 (Degraded); healthy on a3")
	if s.Status.Clusters.Degraded != 1 || f.target(s, "b3") == nil {
		t.Errorf("status %+v", s.Status)
	}
	// A stale green (healthy at another digest) is not healthy.
	f.playArgoCD("b3", "Synced", "Healthy", digestOf("older"))
	s = f.ready(v1.ReasonProgressing, "waiting for b3")
	if tg := f.target(s, "b3"); tg == nil || tg.Revision != digestOf("older") {
		t.Errorf("target %+v", tg)
	}
}

func TestClustersKokumiCannotDeployToAreHeldWithTheirReason(t *testing.T) {
	f := newFixture(t)
	f.cluster("a4", true)
	f.clusterAt("b4", "https://a4.example:6443", true) // same server as a4
	f.cluster("c4", true)
	f.cluster("d4", true)
	// An Application of d4's name that is not Kokumi's.
	foreign := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"project": "default", "source": map[string]any{"repoURL": "https://example.com/git", "path": "x"},
		"destination": map[string]any{"server": "https://d4.example:6443", "namespace": "x"},
	}}}
	foreign.SetGroupVersionKind(argocd.ApplicationGVK)
	foreign.SetNamespace(cfg.ArgoCDNamespace)
	foreign.SetName(f.appName("d4"))
	must(t, env.Client.Create(f.ctx, foreign))

	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a4")
	f.playArgoCD("c4", "Unknown", "Unknown", "", map[string]any{
		"type": "InvalidSpecError", "message": "application destination server 'https://c4.example:6443' and namespace 'podinfo' do not match any of the allowed destinations in project '" + f.project + "'",
	})
	want := map[string]string{"b4": v1.ReasonClusterConflict, "c4": v1.ReasonRejected, "d4": v1.ReasonOptInRequired}
	var s *v1.Serving
	f.eventually("three held targets and a healthy one", func() error {
		s = f.ready(v1.ReasonDeploymentFailed, "failed on")
		for c, reason := range want {
			if tg := f.target(s, c); tg == nil || tg.Conditions[0].Reason != reason {
				return fmt.Errorf("target %s = %+v, want %s", c, tg, reason)
			}
		}
		if s.Status.Clusters.Healthy != 1 {
			return fmt.Errorf("counts %+v", s.Status.Clusters)
		}
		return nil
	})
	if tg := f.target(s, "c4"); tg != nil && !strings.Contains(tg.Conditions[0].Message, "do not match any of the allowed destinations") {
		t.Errorf("Rejected carries Argo CD's message, got %q", tg.Conditions[0].Message)
	}
	if s.Status.Clusters != (v1.ClusterCounts{Selected: 4, Healthy: 1, Held: 3}) {
		t.Errorf("counts %+v", s.Status.Clusters)
	}
	if _, err := f.app("b4"); !apierrors.IsNotFound(err) {
		t.Errorf("the conflicting cluster has an Application: %v", err)
	}
	got, err := f.app("d4")
	must(t, err)
	if got.GetResourceVersion() != foreign.GetResourceVersion() || got.GetLabels()[argocd.LabelServing] != "" {
		t.Errorf("the Application that is not Kokumi's was changed")
	}
	// Held targets come first, by name.
	if s.Status.Targets[0].Cluster != "b4" || s.Status.Targets[1].Cluster != "c4" || s.Status.Targets[2].Cluster != "d4" {
		t.Errorf("order %v", s.Status.Targets)
	}
}

func TestADestinationTheProjectForbidsIsRejectedBeforeArgoCDSeesIt(t *testing.T) {
	f := newFixture(t)
	f.cluster("a5", true)
	// The project admits only team namespaces on the clusters.
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(argocd.AppProjectGVK)
	must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: f.project}, p))
	must(t, unstructured.SetNestedSlice(p.Object, []any{map[string]any{"server": "*", "namespace": "team-*"}}, "spec", "destinations"))
	must(t, env.Client.Update(f.ctx, p))

	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	s := f.ready(v1.ReasonDeploymentFailed, "failed on a5 (Rejected)")
	if tg := f.target(s, "a5"); tg == nil || tg.Conditions[0].Message != "application destination server 'https://a5.example:6443' and namespace 'podinfo' do not match any of the allowed destinations in project '"+f.project+"'" {
		t.Errorf("target %+v", tg)
	}
	if len(f.apps()) != 0 {
		t.Errorf("an Application was created for a forbidden destination")
	}
}

func TestVendoredImagesDeployToNoOtherCluster(t *testing.T) {
	f := newFixture(t)
	f.cluster("a6", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", true)
	f.order("edge", prep.Name)
	s := f.ready(v1.ReasonDeploymentFailed, "a6 (RegistryUnreachable)")
	if tg := f.target(s, "a6"); tg == nil || !strings.Contains(tg.Conditions[0].Message, "bundled registry") {
		t.Errorf("target %+v", tg)
	}
	if len(f.apps()) != 0 {
		t.Errorf("an Application was created for a cluster that cannot pull the images")
	}
}

func TestClustersJoinAndLeave(t *testing.T) {
	f := newFixture(t)
	f.cluster("a7", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a7")
	f.ready(v1.ReasonDeployed, "to a7")

	// A Cluster joins by label.
	joining := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "b7", Labels: map[string]string{"tier": "elsewhere"}},
		Spec:       v1.ClusterSpec{Server: "https://b7.example:6443", CredentialsRef: v1.LocalObjectReference{Name: "b7"}},
	}
	must(t, f.createCluster(joining))
	f.setReady(joining, true)
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(joining), joining))
	joining.Labels["tier"] = f.tier
	must(t, env.Client.Update(f.ctx, joining))
	f.eventually("b7 gets an Application", func() error { _, err := f.app("b7"); return err })
	f.healthy(prep.Spec.Artifact.Digest, "b7")
	f.ready(v1.ReasonDeployed, "to a7, b7")

	// It leaves: its Application is deleted and an Event names it.
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(joining), joining))
	joining.Labels["tier"] = "elsewhere"
	must(t, env.Client.Update(f.ctx, joining))
	f.eventually("b7 loses its Application", func() error {
		if _, err := f.app("b7"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %w", err)
		}
		return nil
	})
	f.expectEvents("ClusterLeft", "Cluster b7 left Environment edge")
	s := f.ready(v1.ReasonDeployed, "Deployed Preparation podinfo-edge-1 to a7")
	f.eventually("the status counts one cluster", func() error {
		if s = f.serving(); s.Status.Clusters.Selected != 1 {
			return fmt.Errorf("counts %+v", s.Status.Clusters)
		}
		return nil
	})
}

func TestATargetNamespaceChangeMovesEveryApplication(t *testing.T) {
	f := newFixture(t)
	f.cluster("a8", true)
	f.cluster("b8", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.eventually("two Applications", func() error {
		if n := len(f.apps()); n != 2 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	moved := f.preparation("podinfo-edge-2", "podinfo-next", false)
	f.promote(moved.Name)
	f.eventually("every Application deploys into podinfo-next", func() error {
		for _, app := range f.apps() {
			if ns, _, _ := unstructured.NestedString(app.Object, "spec", "destination", "namespace"); ns != "podinfo-next" {
				return fmt.Errorf("%s into %s", app.GetName(), ns)
			}
		}
		return nil
	})
}

func TestGatesDeleteTheApplicationsAndSayWhy(t *testing.T) {
	f := newFixture(t)
	f.cluster("a9", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	gone := func() error {
		if n := len(f.apps()); n != 0 {
			return fmt.Errorf("%d Applications left", n)
		}
		return nil
	}
	deployed := func() {
		f.eventually("the Application is back", func() error { _, err := f.app("a9"); return err })
	}
	deployed()

	// The project no longer admits the namespace.
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(argocd.AppProjectGVK)
	must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: f.project}, p))
	must(t, unstructured.SetNestedStringSlice(p.Object, []string{"someone-else"}, "spec", "sourceNamespaces"))
	must(t, env.Client.Update(f.ctx, p))
	f.ready(v1.ReasonProjectNotPermitted, "does not admit namespace "+f.ns)
	f.eventually("Applications deleted", gone)
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(p), p))
	must(t, unstructured.SetNestedStringSlice(p.Object, []string{"team-*"}, "spec", "sourceNamespaces"))
	must(t, env.Client.Update(f.ctx, p))
	deployed()

	// The project is deleted.
	must(t, env.Client.Delete(f.ctx, p))
	f.ready(v1.ReasonProjectNotFound, "AppProject argocd/"+f.project+" of Environment edge does not exist")
	f.eventually("Applications deleted", gone)
	f.createProject(f.project, []any{f.ns}, []any{map[string]any{"server": "*", "namespace": "*"}})
	deployed()

	// The selector is invalid.
	var e v1.Environment
	must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e))
	e.Spec.ClusterSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}
	must(t, env.Client.Update(f.ctx, &e))
	f.ready(v1.ReasonInvalidSelector, "invalid spec.clusterSelector")
	f.eventually("Applications deleted", gone)

	// The selector selects nothing.
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(&e), &e))
	e.Spec.ClusterSelector = metav1.LabelSelector{MatchLabels: map[string]string{"tier": "nowhere"}}
	must(t, env.Client.Update(f.ctx, &e))
	f.ready(v1.ReasonNoClusters, "selects no Cluster")
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(&e), &e))
	e.Spec.ClusterSelector = metav1.LabelSelector{MatchLabels: map[string]string{"tier": f.tier}}
	must(t, env.Client.Update(f.ctx, &e))
	deployed()

	// The Environment is deleted.
	must(t, env.Client.Delete(f.ctx, &e))
	f.ready(v1.ReasonEnvironmentNotFound, "Environment edge does not exist in namespace "+f.ns)
	f.eventually("Applications deleted", gone)
}

func TestDeletingTheServingDeletesItsApplications(t *testing.T) {
	f := newFixture(t)
	f.cluster("a10", true)
	f.cluster("b10", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	s := f.order("edge", prep.Name)
	f.eventually("two Applications", func() error {
		if n := len(f.apps()); n != 2 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	must(t, env.Client.Delete(f.ctx, s))
	f.eventually("Applications and Serving gone", func() error {
		if n := len(f.apps()); n != 0 {
			return fmt.Errorf("%d Applications", n)
		}
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(s), s); !apierrors.IsNotFound(err) {
			return fmt.Errorf("serving still there: %w", err)
		}
		return nil
	})
}

func TestTheEnvironmentLocalDeploysToTheClusterKokumiRunsIn(t *testing.T) {
	f := newFixture(t)
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: cfg.LocalProject}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject"}}); apierrors.IsNotFound(err) {
		f.createProject(cfg.LocalProject, []any{"*"}, []any{map[string]any{"server": "*", "namespace": "*"}})
	}
	prep := f.preparation("podinfo-edge-1", "podinfo", true) // vendored images may run here
	f.order(v1.LocalEnvironmentName, prep.Name)
	f.eventually("the in-cluster Application", func() error {
		app, err := f.app("in-cluster")
		if err != nil {
			return err
		}
		if server, _, _ := unstructured.NestedString(app.Object, "spec", "destination", "server"); server != v1.InClusterServer {
			return fmt.Errorf("server %s", server)
		}
		if project, _, _ := unstructured.NestedString(app.Object, "spec", "project"); project != cfg.LocalProject {
			return fmt.Errorf("project %s", project)
		}
		return nil
	})
	f.healthy(prep.Spec.Artifact.Digest, "in-cluster")
	f.ready(v1.ReasonDeployed, "to in-cluster")
}
