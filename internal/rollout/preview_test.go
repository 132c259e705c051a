package rollout

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// fleetOf returns canary clusters (ring=canary) and rest clusters, named so that they sort
// out of the order they are given in.
func fleetOf(canary, rest int) []PreviewCluster {
	var out []PreviewCluster
	for i := rest - 1; i >= 0; i-- {
		out = append(out, PreviewCluster{Name: fmt.Sprintf("rest-%02d", i), Labels: map[string]string{"ring": "main"}, Ready: true})
	}
	for i := range canary {
		out = append(out, PreviewCluster{Name: fmt.Sprintf("canary-%d", i), Labels: map[string]string{"ring": "canary"}, Ready: true})
	}
	return out
}

func twoWaves(onFailure v1.RolloutFailureAction, budget int32) *v1.RolloutPolicy {
	pct := intstr.FromString("10%")
	return &v1.RolloutPolicy{
		Waves: []v1.RolloutWave{
			{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}, Soak: &metav1.Duration{Duration: 10 * time.Minute}},
			{Name: "rest", MaxUnavailable: &pct},
		},
		FailureBudget: budget, OnFailure: onFailure,
	}
}

func hasSentence(t *testing.T, p PlanPreview, want string) {
	t.Helper()
	if !slices.Contains(p.Summary, want) {
		t.Errorf("summary lacks %q:\n%s", want, strings.Join(p.Summary, "\n"))
	}
}

func TestAPreviewWithoutAPolicyIsEveryClusterAtOnce(t *testing.T) {
	p := Preview(nil, fleetOf(1, 2), time.Now())
	if !p.AllAtOnce || len(p.Waves) != 1 || p.Waves[0].Clusters != 3 || p.Waves[0].MaxUnavailable != 3 {
		t.Fatalf("preview without a policy = %+v, want one wave of 3 clusters, all at once", p)
	}
	hasSentence(t, p, "every cluster at once, as without a policy: 3 clusters")
	if p.OnFailure != "" || p.Windows != nil {
		t.Errorf("a preview without a policy says onFailure %q, windows %+v", p.OnFailure, p.Windows)
	}
}

func TestAPreviewPutsEachClusterInItsWaveAndSaysWhatThePolicyMeans(t *testing.T) {
	clusters := fleetOf(2, 40)
	clusters[0].Ready = false // rest-39
	p := Preview(twoWaves(v1.RolloutRollback, 0), clusters, time.Now())
	if p.AllAtOnce || p.Clusters != 42 {
		t.Fatalf("preview = %+v", p)
	}
	if got := len(p.Waves); got != 2 {
		t.Fatalf("waves = %+v, want canary and rest (no cluster is left unselected)", p.Waves)
	}
	canary, rest := p.Waves[0], p.Waves[1]
	if canary.Name != "canary" || canary.Clusters != 2 || !slices.Equal(canary.Names, []string{"canary-0", "canary-1"}) || canary.Soak != "10m0s" {
		t.Errorf("wave canary = %+v", canary)
	}
	// 10% of the 39 ready clusters, rounded up.
	if rest.Name != "rest" || rest.Clusters != 40 || len(rest.Names) != PreviewNames || rest.Names[0] != "rest-00" || rest.MoreNames != 30 || rest.NotReady != 1 || rest.MaxUnavailable != 4 {
		t.Errorf("wave rest = %+v", rest)
	}
	hasSentence(t, p, "wave canary: 2 clusters, then soak 10m0s")
	hasSentence(t, p, "wave rest: 40 clusters (1 not ready: held, not counted as failures)")
	hasSentence(t, p, "at most 4 of 39 clusters of wave rest update at once")
	hasSentence(t, p, "the first failure halts the roll-out and rolls back to the last Preparation with a deployment record in this Environment")
	if p.OnFailure != "Rollback" || p.FailureBudget != 0 {
		t.Errorf("onFailure %q, budget %d", p.OnFailure, p.FailureBudget)
	}
}

func TestAPreviewListsTheUnselectedClustersAsTheLastWave(t *testing.T) {
	policy := twoWaves("", 2)
	policy.Waves[1].ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "main"}}
	clusters := append(fleetOf(1, 1), PreviewCluster{Name: "lab", Ready: true})
	p := Preview(policy, clusters, time.Now())
	if len(p.Waves) != 3 || p.Waves[2].Name != v1.UnselectedWave || !slices.Equal(p.Waves[2].Names, []string{"lab"}) {
		t.Fatalf("waves = %+v, want the cluster no wave selects in wave unselected", p.Waves)
	}
	hasSentence(t, p, "wave unselected: 1 cluster")
	hasSentence(t, p, "2 clusters may fail; one more halts the roll-out: no further cluster is changed, those it changed stay as they are")
	if p.OnFailure != "Halt" {
		t.Errorf("onFailure = %q, want the default Halt", p.OnFailure)
	}
}

func TestAPreviewSaysWhenTheFirstWaveStartsOutsideTheWindows(t *testing.T) {
	policy := twoWaves("", 0)
	policy.Windows = []v1.RolloutWindow{{Schedule: "0 22 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}, TimeZone: "Europe/Paris"}}
	p := Preview(policy, fleetOf(1, 1), at(t, "2026-12-05T12:00:00Z")) // Saturday noon
	want := at(t, "2026-12-07T21:00:00Z")
	if p.Windows == nil || p.Windows.Open || p.Windows.NextOpen == nil || !p.Windows.NextOpen.Equal(want) {
		t.Fatalf("windows = %+v, want closed until %s", p.Windows, want)
	}
	hasSentence(t, p, "outside the roll-out windows now: the first wave starts at 2026-12-07T21:00:00Z")

	p = Preview(policy, fleetOf(1, 1), at(t, "2026-12-07T22:00:00Z"))
	if p.Windows == nil || !p.Windows.Open {
		t.Fatalf("windows on Monday 23:00 in Paris = %+v, want open", p.Windows)
	}

	policy.Windows[0].TimeZone = "Mars/Olympus"
	p = Preview(policy, fleetOf(1, 1), time.Now())
	if p.Windows == nil || p.Windows.Open || !strings.Contains(p.Windows.Error, "Mars/Olympus") {
		t.Fatalf("windows of an unknown time zone = %+v, want its error", p.Windows)
	}
}

func TestAPreviewOfAnEmptyEnvironmentSaysItDeploysNowhere(t *testing.T) {
	for _, policy := range []*v1.RolloutPolicy{nil, twoWaves("", 0)} {
		p := Preview(policy, nil, time.Now())
		hasSentence(t, p, "the Environment selects no cluster: a promotion deploys nowhere")
	}
}

func TestAPreviewOfAThousandClustersStaysSmall(t *testing.T) {
	p := Preview(twoWaves("", 0), fleetOf(10, 2000), time.Now())
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 4096 {
		t.Errorf("a preview of 2010 clusters takes %d bytes: %s", len(b), b)
	}
	if p.Waves[1].MoreNames != 1990 || p.Waves[1].MaxUnavailable != 200 {
		t.Errorf("wave rest = %+v", p.Waves[1])
	}
}

func TestAPreviewSaysWhatTheLastSoakAndAClosingWindowDo(t *testing.T) {
	policy := twoWaves("", 0)
	policy.Waves[1].Soak = &metav1.Duration{Duration: time.Hour}
	policy.Waves = append([]v1.RolloutWave{{Name: "lab", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "lab"}}}}, policy.Waves...)
	policy.Windows = []v1.RolloutWindow{{Schedule: "0 8 * * *", Duration: metav1.Duration{Duration: 10 * time.Hour}}}
	policy.OnWindowClose = v1.WindowClosePause
	p := Preview(policy, fleetOf(1, 2), at(t, "2026-12-07T09:00:00Z"))
	hasSentence(t, p, "wave lab: no cluster, passed at once")
	hasSentence(t, p, "wave rest: 2 clusters, then soak 1h0m0s before the roll-out completes")
	hasSentence(t, p, "inside a roll-out window now: the first wave starts at once; when the windows close, no further cluster is changed until one opens")
	if p.Windows == nil || !p.Windows.Open || p.Windows.NextOpen != nil {
		t.Errorf("windows = %+v, want open", p.Windows)
	}
}

func TestThePlanCountsTheOrdersSlowerPace(t *testing.T) {
	one := intstr.FromInt32(1)
	pace := &v1.RolloutPace{MinSoak: &metav1.Duration{Duration: time.Hour}, MaxUnavailable: &one}
	p := PreviewPaced(twoWaves(v1.RolloutHalt, 0), pace, fleetOf(2, 20), time.Now())
	if len(p.Waves) != 2 || p.Waves[0].Soak != "1h0m0s" || p.Waves[1].MaxUnavailable != 1 {
		t.Fatalf("waves %+v: want the canary soaking the Order's hour and the rest one at a time", p.Waves)
	}
	hasSentence(t, p, "at most 1 of 20 clusters of wave rest update at once")
	p = PreviewPaced(nil, pace, fleetOf(0, 4), time.Now())
	hasSentence(t, p, "every cluster in one wave, at most 1 of 4 clusters at once (the Order's rolloutPace.maxUnavailable); no failure halts it")
}

func TestThePlanSaysWhatTheGatesAsk(t *testing.T) {
	env := &v1.Environment{Spec: v1.EnvironmentSpec{
		Rollout:  gatedPolicy(),
		Approval: &v1.ApprovalPolicy{Required: 2},
		Verify:   []v1.Verification{{Name: "e2e", Job: &v1.JobVerification{Image: "e2e:1"}}},
	}}
	clusters := []PreviewCluster{{Name: "c1", Labels: map[string]string{"ring": "canary"}, Ready: true}, {Name: "r1", Labels: map[string]string{"ring": "rest"}, Ready: true}}
	p := PreviewEnvironment(env, nil, clusters, 0, time.Now())
	all := strings.Join(p.Summary, "\n")
	for _, want := range []string{
		"the roll-out starts once 2 people approve (kubectl kokumi approve)",
		"wave canary is verified by smoke (http) before the roll-out goes on",
		"wave rest starts once 1 person approves, not the one who promoted it (kubectl kokumi approve)",
		"once every cluster runs it, the Environment verifies it by e2e (job); its deployment record says verified once they pass",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the plan does not say %q:\n%s", want, all)
		}
	}
	if !strings.HasPrefix(p.Summary[0], "the roll-out starts once") {
		t.Errorf("the Environment's approval is not said first: %q", p.Summary[0])
	}
	if p.Waves[0].Verify[0] != "smoke (http)" || p.Waves[1].Approvals != 1 {
		t.Errorf("waves %+v", p.Waves)
	}
}

// A rollback after an abort promotes what the clusters run: the plan asks for no approval the
// roll-out goes past (GateAsked), as Decide does not wait for one.
func TestThePlanOfWhatTheClustersRunAsksNoApprovalTheRollOutSkips(t *testing.T) {
	env := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "prod"}, Spec: v1.EnvironmentSpec{
		Rollout:  gatedPolicy(),
		Approval: &v1.ApprovalPolicy{Required: 2},
	}}
	clusters := []PreviewCluster{{Name: "c1", Labels: map[string]string{"ring": "canary"}, Ready: true}, {Name: "r1", Labels: map[string]string{"ring": "rest"}, Ready: true}}

	p := PreviewEnvironment(env, nil, clusters, 2, time.Now())
	all := strings.Join(p.Summary, "\n")
	if strings.Contains(all, "approves") || p.Waves[1].Approvals != 0 {
		t.Errorf("the plan of what every cluster runs asks for an approval:\n%s\nwaves %+v", all, p.Waves)
	}
	for _, want := range []string{
		"the roll-out starts without approval: 2 clusters of 2 run this Preparation already (Environment prod's approval holds only a Preparation no cluster runs yet)",
		"wave rest starts without approval: clusters of it, or of a later wave, run this Preparation already",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the plan does not say %q:\n%s", want, all)
		}
	}

	// One cluster of the two runs it: which one is not known, so the later wave's approval stays.
	p = PreviewEnvironment(env, nil, clusters, 1, time.Now())
	all = strings.Join(p.Summary, "\n")
	if !strings.Contains(all, "the roll-out starts without approval: 1 cluster of 2") ||
		!strings.Contains(all, "wave rest starts once 1 person approves") || p.Waves[1].Approvals != 1 {
		t.Errorf("the plan of what one cluster runs:\n%s\nwaves %+v", all, p.Waves)
	}
}

func TestGateAsked(t *testing.T) {
	for _, c := range []struct {
		w    int
		runs []bool
		want bool
	}{
		{-1, []bool{false, false}, true},
		{-1, []bool{false, true}, false},
		{0, []bool{true, false}, false},
		{1, []bool{true, false}, true},
		{1, []bool{false, true}, false},
		{0, nil, true},
	} {
		if got := GateAsked(c.w, c.runs); got != c.want {
			t.Errorf("GateAsked(%d, %v) = %v, want %v", c.w, c.runs, got, c.want)
		}
	}
}

func TestThePlanNamesTheStagesTheEnvironmentRequires(t *testing.T) {
	env := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1.EnvironmentSpec{
		Requires: []v1.StageRequirement{
			{Environment: "staging", Soak: &metav1.Duration{Duration: 30 * time.Second}, Match: v1.MatchRelease},
			{Environment: "qa"},
		},
	}}
	p := PreviewEnvironment(env, nil, fleetOf(0, 2), 0, time.Now())
	want := "Environment edge requires staging: soak 30s, match Release; qa: match Artifact (the stages a Preparation passes before it deploys here)"
	if len(p.Summary) == 0 || p.Summary[0] != want {
		t.Errorf("the plan's first sentence is not %q: %q", want, p.Summary)
	}
}

func TestThePlanSaysWhichChecksRunPerClusterAndAgainstWhatBaseline(t *testing.T) {
	p := twoWaves(v1.RolloutHalt, 0)
	p.Waves[0].Verify = []v1.Verification{{Name: "errors", PerCluster: true, Compare: "true", Failures: &v1.FailureWindow{Count: 2, Of: 3},
		HTTP: &v1.HTTPVerification{URL: "http://p/?c=${cluster}", SuccessCondition: "true"}}}
	clusters := fleetOf(4, 6)
	clusters[0].Ready = false
	pv := Preview(p, clusters, time.Now())
	if w := pv.Waves[0]; w.Baseline != 5 || len(w.Verify) != 1 ||
		w.Verify[0] != "errors (http, per cluster, compared with the baseline, a failure counts once 2 of the last 3 runs fail)" {
		t.Fatalf("wave %+v", w)
	}
	hasSentence(t, pv, "wave canary's per-cluster checks ask each of its clusters and compare them with the baseline: the 5 clusters of the later waves, which keep the release before (status.rollout.from) while it is verified")
	if pv.Waves[1].Baseline != 0 {
		t.Errorf("wave rest %+v", pv.Waves[1])
	}
}
