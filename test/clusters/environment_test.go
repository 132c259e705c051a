package clusters

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// createProject creates an Argo CD AppProject in Argo CD's namespace that admits namespaces.
func createProject(t *testing.T, name string, namespaces ...string) *unstructured.Unstructured {
	t.Helper()
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "AppProject",
		"metadata":   map[string]any{"name": name, "namespace": config.ArgoCDNamespace},
		"spec": map[string]any{
			"sourceNamespaces": toAny(namespaces),
			"sourceRepos":      []any{"*"},
			"destinations":     []any{map[string]any{"server": "*", "namespace": "*"}},
		},
	}}
	must(t, env.Client.Create(context.Background(), p))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
	return p
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func createEnvironment(t *testing.T, namespace, name, project string, selector metav1.LabelSelector) {
	t.Helper()
	must(t, env.CreateNamespace(context.Background(), namespace))
	e := &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       v1.EnvironmentSpec{ClusterSelector: selector, Project: project},
	}
	must(t, env.Client.Create(context.Background(), e))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), e) })
}

// waitEnvironment waits until the Environment reports the counts and the Ready reason.
func waitEnvironment(t *testing.T, namespace, name string, clusters, ready int32, reason string) *v1.Environment {
	t.Helper()
	var e v1.Environment
	eventually(t, fmt.Sprintf("environment %s/%s with %d clusters, %d ready, %s", namespace, name, clusters, ready, reason), func() (bool, string) {
		must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &e))
		cond := meta.FindStatusCondition(e.Status.Conditions, v1.ConditionReady)
		if cond == nil {
			return false, "no Ready condition"
		}
		return e.Status.Clusters == clusters && e.Status.ReadyClusters == ready && cond.Reason == reason &&
				e.Status.ObservedGeneration == e.Generation,
			fmt.Sprintf("%d clusters, %d ready, %s/%s: %s", e.Status.Clusters, e.Status.ReadyClusters, cond.Status, cond.Reason, cond.Message)
	})
	return &e
}

func relabel(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	c := getCluster(t, name)
	patch := client.MergeFrom(c.DeepCopy())
	c.Labels = labels
	must(t, env.Client.Patch(context.Background(), c, patch))
}

func tier(t string) map[string]string { return map[string]string{"tier": t} }

func TestEnvironmentCountsFollowClustersAndTheirLabels(t *testing.T) {
	createProject(t, "edge-counts", "team-counts")
	// Clusters without credentials: selected, never Ready.
	createCluster(t, "counts-a", "https://counts-a.example.com:6443", "nowhere", tier("edge"))
	createCluster(t, "counts-b", "https://counts-b.example.com:6443", "nowhere", tier("core"))
	edge := metav1.LabelSelector{MatchLabels: tier("edge")}
	createEnvironment(t, "team-counts", "edge", "edge-counts", edge)

	e := waitEnvironment(t, "team-counts", "edge", 1, 0, v1.ReasonEnvironmentReady)
	if cond := meta.FindStatusCondition(e.Status.Conditions, v1.ConditionReady); cond.Status != metav1.ConditionTrue {
		t.Errorf("Ready %s, want True: no Ready Cluster holds the Serving, not the Environment", cond.Status)
	}

	relabel(t, "counts-b", tier("edge"))
	waitEnvironment(t, "team-counts", "edge", 2, 0, v1.ReasonEnvironmentReady)

	relabel(t, "counts-a", tier("core"))
	waitEnvironment(t, "team-counts", "edge", 1, 0, v1.ReasonEnvironmentReady)

	// A Cluster that connects raises the Ready count.
	putCredentials(t, "counts-member", tokenCredentials(member.token(t)))
	createCluster(t, "counts-member", member.Server, "counts-member", tier("edge"))
	waitEnvironment(t, "team-counts", "edge", 2, 1, v1.ReasonEnvironmentReady)

	// Clusters that leave, by label or by deletion.
	relabel(t, "counts-member", tier("gpu"))
	waitEnvironment(t, "team-counts", "edge", 1, 0, v1.ReasonEnvironmentReady)
	must(t, env.Client.Delete(context.Background(), &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "counts-b"}}))
	e = waitEnvironment(t, "team-counts", "edge", 0, 0, v1.ReasonNoClusters)
	if msg := meta.FindStatusCondition(e.Status.Conditions, v1.ConditionReady).Message; !strings.Contains(msg, "tier=edge") {
		t.Errorf("NoClusters message %q does not show the selector", msg)
	}
}

func TestEnvironmentFollowsItsAppProject(t *testing.T) {
	createCluster(t, "project-a", "https://project-a.example.com:6443", "nowhere", tier("project"))
	createEnvironment(t, "team-project", "staging", "staging-later", metav1.LabelSelector{MatchLabels: tier("project")})

	e := waitEnvironment(t, "team-project", "staging", 1, 0, v1.ReasonProjectNotFound)
	msg := meta.FindStatusCondition(e.Status.Conditions, v1.ConditionReady).Message
	if !strings.Contains(msg, `"staging-later"`) || !strings.Contains(msg, `"argocd"`) || !strings.Contains(msg, "spec.project") {
		t.Errorf("ProjectNotFound message %q does not name the AppProject, its namespace and the field", msg)
	}

	p := createProject(t, "staging-later", "team-project")
	waitEnvironment(t, "team-project", "staging", 1, 0, v1.ReasonEnvironmentReady)

	must(t, env.Client.Delete(context.Background(), p))
	waitEnvironment(t, "team-project", "staging", 1, 0, v1.ReasonProjectNotFound)
}

func TestAnInvalidSelectorNamesTheFieldAndTheFix(t *testing.T) {
	createProject(t, "invalid-selector", "team-invalid")
	bad := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}}}
	createEnvironment(t, "team-invalid", "edge", "invalid-selector", bad)

	e := waitEnvironment(t, "team-invalid", "edge", 0, 0, v1.ReasonInvalidSelector)
	cond := meta.FindStatusCondition(e.Status.Conditions, v1.ConditionReady)
	if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "spec.clusterSelector") || !strings.Contains(cond.Message, "at least one value") {
		t.Errorf("InvalidSelector condition %s: %q does not name the field and the fix", cond.Status, cond.Message)
	}

	// The fix is picked up as a new generation.
	var fixed v1.Environment
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: "team-invalid", Name: "edge"}, &fixed))
	fixed.Spec.ClusterSelector.MatchExpressions[0].Values = []string{"nowhere"}
	must(t, env.Client.Update(context.Background(), &fixed))
	waitEnvironment(t, "team-invalid", "edge", 0, 0, v1.ReasonNoClusters)
}

func TestAnEnvironmentNamedLocalIsReconciledLikeAnyOther(t *testing.T) {
	// The Environment local exists without an object; an object of that name replaces it in
	// its namespace and reports like any Environment.
	createProject(t, "local-override", "team-local")
	createCluster(t, "local-override-a", "https://local-override-a.example.com:6443", "nowhere", tier("local-override"))
	createEnvironment(t, "team-local", v1.LocalEnvironmentName, "local-override", metav1.LabelSelector{MatchLabels: tier("local-override")})
	waitEnvironment(t, "team-local", v1.LocalEnvironmentName, 1, 0, v1.ReasonEnvironmentReady)
}
