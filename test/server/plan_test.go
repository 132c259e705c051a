package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/server"
)

// planCluster registers a Cluster of the Environment env (label env=<env>) in ring, Ready or
// not.
func planCluster(t *testing.T, name, envName, ring string, isReady bool) {
	t.Helper()
	c := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": envName, "ring": ring}},
		Spec:       v1.ClusterSpec{Server: "https://" + name + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: name}},
	}
	must(t, env.Client.Create(context.Background(), c))
	status, reason := metav1.ConditionTrue, "Reachable"
	if !isReady {
		status, reason = metav1.ConditionFalse, v1.ReasonUnreachable
	}
	setClusterReady(t, c, status, reason)
}

func summaryHas(p server.Plan, want string) error {
	for _, s := range p.Summary {
		if strings.Contains(s, want) {
			return nil
		}
	}
	return fmt.Errorf("summary %q lacks %q", p.Summary, want)
}

func TestThePlanOfAServingShowsItsEnvironmentsWavesToWhoeverReadsIt(t *testing.T) {
	ctx := context.Background()
	ns := "team-plan"
	must(t, env.CreateNamespace(ctx, ns))
	pct := intstr.FromString("50%")
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "plan-fleet"}}, Project: "fleet",
		Rollout: &v1.RolloutPolicy{
			Waves: []v1.RolloutWave{
				{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}, Soak: soak(10 * time.Minute)},
				{Name: "rest", MaxUnavailable: &pct},
			},
			OnFailure: v1.RolloutRollback,
		},
	}}))
	environment(t, ns, "plain")
	planCluster(t, "plan-canary-1", "plan-fleet", "canary", true)
	for i := range 4 {
		planCluster(t, fmt.Sprintf("plan-rest-%d", i), "plan-fleet", "main", i != 3)
	}
	planCluster(t, "plan-plain-1", "plain", "", true)
	planCluster(t, "plan-elsewhere", "other", "canary", true) // in no Environment of ns
	orderAndServing(t, ns, "podinfo-fleet", "fleet", "")
	orderAndServing(t, ns, "podinfo-plain", "plain", "")

	p := get(t, servingPath(ns, "podinfo-fleet")+"/plan", func(p server.Plan) error {
		if p.Clusters != 5 || len(p.Waves) != 2 {
			return fmt.Errorf("plan %+v, want 5 clusters in 2 waves", p)
		}
		return nil
	})
	canary, rest := p.Waves[0], p.Waves[1]
	if p.Environment != "fleet" || !p.Found || p.AllAtOnce || p.OnFailure != "Rollback" {
		t.Errorf("plan %+v", p)
	}
	if canary.Name != "canary" || !slices.Equal(canary.Names, []string{"plan-canary-1"}) || canary.Soak != "10m0s" {
		t.Errorf("wave canary %+v", canary)
	}
	// 50% of the 3 Ready clusters of rest, rounded up; the one not Ready is held.
	if rest.Name != "rest" || rest.Clusters != 4 || rest.NotReady != 1 || rest.MaxUnavailable != 2 || rest.Names[0] != "plan-rest-0" {
		t.Errorf("wave rest %+v", rest)
	}
	for _, want := range []string{
		"wave canary: 1 cluster, then soak 10m0s",
		"at most 2 of 3 clusters of wave rest update at once",
		"the first failure halts the roll-out and rolls back",
	} {
		if err := summaryHas(p, want); err != nil {
			t.Error(err)
		}
	}

	plain := get(t, servingPath(ns, "podinfo-plain")+"/plan", func(p server.Plan) error {
		if !p.AllAtOnce || p.Clusters != 1 {
			return fmt.Errorf("plan %+v, want one cluster at once", p)
		}
		return nil
	})
	if err := summaryHas(plain, "every cluster at once, as without a policy: 1 cluster"); err != nil {
		t.Error(err)
	}

	// A tenant who reads the namespace, and may not read Clusters, sees the plan, with the
	// Cluster names its Serving's status shows and nothing more of them.
	viewer := serviceAccountToken(t, ns, "viewer")
	bindClusterRole(t, ns, "view", ns, "viewer")
	var raw map[string]any
	getAs(t, call{server: k8sBase, path: servingPath(ns, "podinfo-fleet") + "/plan", bearer: viewer}, func(m map[string]any) error {
		raw = m
		return nil
	})
	body := fmt.Sprint(raw)
	if !strings.Contains(body, "plan-canary-1") || strings.Contains(body, "example") || strings.Contains(body, "ring:canary") {
		t.Errorf("the viewer's plan %s: want the cluster names, never their servers or labels", body)
	}
	if code := do(t, call{server: k8sBase, path: "/api/v1/clusters", bearer: viewer}, nil).StatusCode; code != http.StatusForbidden {
		t.Errorf("the viewer lists Clusters: %d, want 403 (the plan must not be the only thing keeping them out)", code)
	}

	// Someone who may not read the Serving does not see its plan.
	nobody := serviceAccountToken(t, "team-plan-other", "nobody")
	if code := do(t, call{server: k8sBase, path: servingPath(ns, "podinfo-fleet") + "/plan", bearer: nobody}, nil).StatusCode; code != http.StatusForbidden {
		t.Errorf("a stranger's plan: %d, want 403", code)
	}
}
