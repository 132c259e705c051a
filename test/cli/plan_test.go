package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// planFleet creates, in ns, the Environment edge of two waves (canary: ring=canary, soak 10m;
// rest: at most 2 at once; rollback on the first failure) and the Environment plain without a
// policy, their Clusters (one of rest not Ready), and the Servings web-edge and web-plain.
func planFleet(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	two := intstr.FromInt32(2)
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"plan": ns + "-edge"}}, Project: "edge",
		Rollout: &v1.RolloutPolicy{
			Waves: []v1.RolloutWave{
				{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}, Soak: &metav1.Duration{Duration: 10 * time.Minute}},
				{Name: "rest", MaxUnavailable: &two},
			},
			OnFailure: v1.RolloutRollback,
		},
	}}))
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"plan": ns + "-plain"}}, Project: "plain",
	}}))
	cluster := func(name, envName, ring string, ready bool) {
		c := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"plan": ns + "-" + envName, "ring": ring}},
			Spec: v1.ClusterSpec{Server: "https://" + name + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: name}}}
		must(t, env.Client.Create(ctx, c))
		status := metav1.ConditionTrue
		if !ready {
			status = metav1.ConditionFalse
		}
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: status, Reason: "Probed", Message: "probed"})
		must(t, env.Client.Status().Update(ctx, c))
	}
	cluster(ns+"-canary", "edge", "canary", true)
	for i := range 5 {
		cluster(fmt.Sprintf("%s-rest-%d", ns, i), "edge", "main", i != 4)
	}
	cluster(ns+"-plain", "plain", "", true)
	order(t, ns, "web-edge", "edge", v1.PromotionManual)
	serving(t, ns, "web-edge", "")
	order(t, ns, "web-plain", "plain", v1.PromotionManual)
	serving(t, ns, "web-plain", "")
}

func TestPlanShowsTheWavesBeforePromoting(t *testing.T) {
	ns := namespace(t, "plan")
	planFleet(t, ns)

	r := kubectlKokumi(t, "plan", "web-edge", "-n", ns)
	if r.code != 0 {
		t.Fatalf("plan: exit %d %q", r.code, r.stderr)
	}
	for _, want := range []string{
		"Roll-out plan of Serving plan/web-edge to Environment edge\n",
		"  - wave canary: 1 cluster, then soak 10m0s\n",
		"  - wave rest: 5 clusters (1 not ready: held, not counted as failures)\n",
		"  - at most 2 of 4 clusters of wave rest update at once\n",
		"  - the first failure halts the roll-out and rolls back to the last Preparation with a deployment record in this Environment\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("plan does not print %q:\n%s", want, r.stdout)
		}
	}
	table := rows(r.stdout, "WAVE")
	want := [][]string{
		{"WAVE", "CLUSTERS", "NOT READY", "AT ONCE", "SOAK", "CLUSTER NAMES"},
		{"canary", "1", "0", "1", "10m0s", "plan-canary"},
		{"rest", "5", "1", "2", "-", "plan-rest-0, plan-rest-1, plan-rest-2, plan-rest-3, plan-rest-4"},
	}
	if !equalRows(table, want) {
		t.Errorf("plan's table = %q, want %q", table, want)
	}

	r = kubectlKokumi(t, "plan", "web-plain", "-n", ns)
	if r.code != 0 || !strings.Contains(r.stdout, "  - every cluster at once, as without a policy: 1 cluster\n") {
		t.Errorf("plan without a policy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = kubectlKokumi(t, "plan", "web-edge", "-n", ns, "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"onFailure": "Rollback"`) || !strings.Contains(r.stdout, `"maxUnavailable": 2`) {
		t.Errorf("plan -o json:\n%s", r.stdout)
	}
}

func TestPlanSaysWhenYouMayNotListClusters(t *testing.T) {
	ns := namespace(t, "plan-viewed")
	planFleet(t, ns)
	kubeconfig := viewerKubeconfig(t, ns, "plan-viewer")

	r := kubectlKokumi(t, "plan", "web-edge", "--kubeconfig", kubeconfig)
	if r.code != 0 {
		t.Fatalf("plan as a viewer: exit %d %q", r.code, r.stderr)
	}
	for _, want := range []string{
		"Note: you may not list Clusters (",
		"this plan shows the policy of Environment edge without its clusters",
		"  - the first failure halts the roll-out and rolls back",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("plan as a viewer does not print %q:\n%s", want, r.stdout)
		}
	}
	table := rows(r.stdout, "WAVE")
	// rest selects every cluster canary does not: no cluster is left to the wave unselected.
	if len(table) != 3 || table[1][0] != "canary" || table[1][1] != "ring=canary" || table[2][0] != "rest" || table[2][3] != "2" {
		t.Errorf("plan as a viewer: the policy's waves = %q", table)
	}
	if strings.Contains(r.stdout, "plan-viewed-rest") {
		t.Errorf("plan as a viewer names Clusters it may not list:\n%s", r.stdout)
	}
}

// After an abort the clusters run the Preparation before it again: a rollback to it goes past the
// Environment's approval (the roll-out asks only while no cluster runs a Preparation), and the
// plan of it says so rather than ask for an approval.
// The plan names the stages the Environment requires, too.
func TestPlanOfARollbackAsksNoApprovalTheRollOutSkips(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "plan-back")
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gated"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"plan": ns}}, Project: "gated",
		Approval: &v1.ApprovalPolicy{Required: 1},
		Requires: []v1.StageRequirement{{Environment: "staging", Soak: &metav1.Duration{Duration: 30 * time.Second}, Match: v1.MatchRelease}},
	}}))
	for _, name := range []string{ns + "-a", ns + "-b"} {
		c := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"plan": ns}},
			Spec: v1.ClusterSpec{Server: "https://" + name + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: name}}}
		must(t, env.Client.Create(ctx, c))
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Probed", Message: "probed"})
		must(t, env.Client.Status().Update(ctx, c))
	}
	order(t, ns, "web", "gated", v1.PromotionManual)
	preparation(t, ns, "web-1", prepSpec{order: "web", digest: digest("1"), ready: metav1.ConditionTrue})
	preparation(t, ns, "web-2", prepSpec{order: "web", digest: digest("2"), ready: metav1.ConditionTrue})
	sv := serving(t, ns, "web", "web-2")
	sv.Status.Running = []v1.RevisionCount{{Revision: digest("1"), Clusters: 2}}
	must(t, env.Client.Status().Update(ctx, sv))

	r := kubectlKokumi(t, "plan", "web", "-n", ns, "--preparation", "web-1")
	if r.code != 0 {
		t.Fatalf("plan --preparation web-1: exit %d %q", r.code, r.stderr)
	}
	if want := "  - the roll-out starts without approval: 2 clusters of 2 run this Preparation already"; !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "approves") {
		t.Errorf("the plan of a rollback to what the clusters run does not say %q, or asks for an approval:\n%s", want, r.stdout)
	}
	r = kubectlKokumi(t, "plan", "web", "-n", ns, "--preparation", "web-2")
	for _, want := range []string{
		"  - Environment gated requires staging: soak 30s, match Release (the stages a Preparation passes before it deploys here)\n",
		"  - the roll-out starts once 1 person approves",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("the plan of what no cluster runs does not say %q: exit %d\n%s%s", want, r.code, r.stdout, r.stderr)
		}
	}
}
