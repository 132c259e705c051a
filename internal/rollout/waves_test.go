package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func policy(onFailure v1.RolloutFailureAction, budget int32) *v1.RolloutPolicy {
	ten := intstr.FromString("10%")
	return &v1.RolloutPolicy{Waves: []v1.RolloutWave{
		{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}, Soak: &metav1.Duration{Duration: time.Hour}},
		{Name: "rest", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "rest"}}, MaxUnavailable: &ten},
	}, FailureBudget: budget, OnFailure: onFailure}
}

func TestAClusterBelongsToTheFirstWaveThatSelectsIt(t *testing.T) {
	p := policy(v1.RolloutHalt, 0)
	p.Waves = append(p.Waves, v1.RolloutWave{Name: "also-canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}})
	for _, tc := range []struct {
		labels map[string]string
		want   int
	}{
		{map[string]string{"ring": "canary"}, 0},
		{map[string]string{"ring": "rest"}, 1},
		{map[string]string{"ring": "other"}, 3},
		{nil, 3},
	} {
		if got := WaveOf(p, tc.labels); got != tc.want {
			t.Errorf("WaveOf(%v) = %d, want %d", tc.labels, got, tc.want)
		}
	}
}

func TestMaxUnavailableRoundsAPercentUpAndAllowsOne(t *testing.T) {
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	three := intstr.FromInt32(3)
	for _, tc := range []struct {
		limit    *intstr.IntOrString
		selected int
		want     int
	}{
		{nil, 7, 7}, {nil, 0, 1}, {pct("10%"), 1000, 100}, {pct("10%"), 11, 2}, {pct("10%"), 3, 1}, {&three, 10, 3},
	} {
		if got := MaxUnavailable(tc.limit, tc.selected); got != tc.want {
			t.Errorf("MaxUnavailable(%v, %d) = %d, want %d", tc.limit, tc.selected, got, tc.want)
		}
	}
}

func TestARollbackWithNothingToGoBackToHaltsAndSaysWhy(t *testing.T) {
	plan := Decide(Input{Policy: policy(v1.RolloutRollback, 0), Preparation: "p-2", From: "p-1", Now: time.Now(),
		Members: []Member{
			{Name: "c1", Wave: 0, Standing: Failed, Reason: v1.ReasonDegraded, HasApplication: true},
			{Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true},
		},
		RollbackTo: func() (string, string) { return "", "no Preparation older than p-2 has a deployment record" },
	})
	if plan.Status.State != v1.RolloutHalted || plan.Ready == nil || plan.Ready.Reason != v1.ReasonRolloutHalted ||
		!strings.Contains(plan.Ready.Message, "cannot roll back: no Preparation older than p-2") || !strings.Contains(plan.Ready.Message, "c1 (Degraded)") {
		t.Fatalf("plan %+v, ready %+v", plan.Status, plan.Ready)
	}
	if plan.Waiting["r1"] == "" {
		t.Errorf("r1 is not left as it is: %v", plan.Waiting)
	}
}

func TestFailuresWithinTheBudgetDoNotHalt(t *testing.T) {
	plan := Decide(Input{Policy: policy(v1.RolloutHalt, 1), Preparation: "p-2", Now: time.Now(),
		Members: []Member{
			{Name: "c1", Wave: 0, Standing: Failed, Reason: v1.ReasonDegraded, HasApplication: true},
			{Name: "c2", Wave: 0, Standing: Healthy, HasApplication: true},
		},
	})
	if plan.Status.State != v1.RolloutProgressing || plan.Ready != nil || plan.Status.Waves[0].Failed != 1 {
		t.Fatalf("plan %+v", plan.Status)
	}
}

func TestTheSoakCountsFromWhenTheWaveBecameHealthy(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	in := Input{Policy: policy(v1.RolloutHalt, 0), Preparation: "p-2", From: "p-1", Now: now,
		Members: []Member{
			{Name: "c1", Wave: 0, Standing: Healthy, HasApplication: true},
			{Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true},
		},
	}
	plan := Decide(in)
	if plan.Status.Wave != "canary" || !plan.Status.WaveHealthySince.Time.Equal(now) || plan.RecheckAfter != time.Hour || plan.Waiting["r1"] == "" {
		t.Fatalf("plan %+v, recheck %s, waiting %v", plan.Status, plan.RecheckAfter, plan.Waiting)
	}
	in.Previous, in.Now = &plan.Status, now.Add(time.Hour)
	plan = Decide(in)
	if plan.Status.Wave != "rest" || plan.Waiting["r1"] != "" || plan.Status.Waves[1].Progressing != 1 {
		t.Fatalf("after the soak: plan %+v, waiting %v", plan.Status, plan.Waiting)
	}
}
