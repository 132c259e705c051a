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

func TestAPausedRolloutChangesNoFurtherClusterAndResumes(t *testing.T) {
	members := []Member{
		{Name: "c1", Wave: 0, Standing: Healthy, HasApplication: true},
		{Name: "r1", Wave: 1, Standing: Updating, HasApplication: true},
		{Name: "r2", Wave: 1, Standing: Untouched, HasApplication: true},
	}
	p := policy(v1.RolloutHalt, 0)
	p.Waves[0].Soak, p.Waves[1].MaxUnavailable = nil, nil
	paused := Decide(Input{Policy: p, Preparation: "p-2", Now: time.Now(), Members: members,
		Control: &v1.RolloutControl{Paused: true, By: "alice"}})
	if st := paused.Status; st.State != v1.RolloutPaused || st.By != "alice" || st.Wave != "rest" ||
		!strings.Contains(st.Message, "alice paused the roll-out of Preparation p-2") {
		t.Fatalf("paused: %+v", st)
	}
	if !strings.Contains(paused.Waiting["r2"], "paused") {
		t.Errorf("r2 is changed while paused: %v", paused.Waiting)
	}
	if ts := Transitions(&v1.RolloutStatus{Preparation: "p-2", State: v1.RolloutProgressing, Wave: "rest"}, &paused.Status, "alice"); len(ts) != 1 || ts[0].Reason != "RolloutPaused" || !strings.Contains(ts[0].Message, "alice") {
		t.Errorf("transitions %+v", ts)
	}

	resumed := Decide(Input{Policy: p, Preparation: "p-2", Now: time.Now(), Members: members, Previous: &paused.Status,
		Control: &v1.RolloutControl{Paused: false, By: "bob"}})
	if st := resumed.Status; st.State != v1.RolloutProgressing || st.By != "" || st.Message != "" {
		t.Fatalf("resumed: %+v", st)
	}
	if _, waits := resumed.Waiting["r2"]; waits {
		t.Errorf("r2 still waits once resumed: %v", resumed.Waiting)
	}
	if ts := Transitions(&paused.Status, &resumed.Status, "bob"); len(ts) != 1 || ts[0].Reason != "RolloutResumed" || !strings.Contains(ts[0].Message, "bob resumed") {
		t.Errorf("transitions %+v", ts)
	}

	// A failure past the budget still halts a paused roll-out.
	members[1].Standing, members[1].Reason = Failed, v1.ReasonDegraded
	halted := Decide(Input{Policy: p, Preparation: "p-2", Now: time.Now(), Members: members, Previous: &paused.Status,
		Control: &v1.RolloutControl{Paused: true, By: "alice"}})
	if halted.Status.State != v1.RolloutHalted {
		t.Errorf("a paused roll-out past its budget: %+v", halted.Status)
	}
}

func TestAnAbortedRolloutGoesBackAndStartsAgainOnceCleared(t *testing.T) {
	members := []Member{
		{Name: "c1", Wave: 0, Standing: Healthy, HasApplication: true},
		{Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true},
	}
	p := policy(v1.RolloutHalt, 0)
	aborted := Decide(Input{Policy: p, Preparation: "p-2", From: "p-1", Now: time.Now(), Members: members,
		Control:    &v1.RolloutControl{Abort: "p-2", By: "carol"},
		RollbackTo: func() (string, string) { return "p-1", "" }})
	st := aborted.Status
	if st.State != v1.RolloutAborted || st.RollbackTo != "p-1" || st.By != "carol" || aborted.Ready == nil || aborted.Ready.Reason != v1.ReasonRolloutAborted ||
		!strings.Contains(st.Message, "carol aborted the roll-out of Preparation p-2: every cluster it changed goes back to Preparation p-1") || !GoesBack(&st) {
		t.Fatalf("aborted: %+v, ready %+v", st, aborted.Ready)
	}
	if _, waits := aborted.Waiting["r1"]; waits || len(aborted.Joiners) > 0 {
		t.Errorf("the clusters the roll-out did not change are the reconciler's to leave: %v", aborted.Waiting)
	}
	// An abort that names another Preparation does nothing.
	other := Decide(Input{Policy: p, Preparation: "p-2", Now: time.Now(), Members: members, Control: &v1.RolloutControl{Abort: "p-9"}})
	if other.Status.State != v1.RolloutProgressing {
		t.Errorf("an abort of p-9 acted on p-2: %+v", other.Status)
	}
	// Cleared, the roll-out starts again from its first wave.
	again := Decide(Input{Policy: p, Preparation: "p-2", Now: time.Now(), Members: members, Previous: &st, Control: &v1.RolloutControl{By: "carol"}})
	if again.Status.State != v1.RolloutProgressing || again.Status.Wave != "canary" || again.Status.RollbackTo != "" || again.Status.From != "p-1" {
		t.Errorf("cleared: %+v", again.Status)
	}
	// Without a Preparation to go back to, an abort changes nothing further and says why.
	stuck := Decide(Input{Policy: p, Preparation: "p-2", Now: time.Now(), Members: members, Control: &v1.RolloutControl{Abort: "p-2", By: "carol"},
		RollbackTo: func() (string, string) { return "", "no Preparation older than p-2 has a deployment record" }})
	if stuck.Status.State != v1.RolloutAborted || GoesBack(&stuck.Status) || !strings.Contains(stuck.Waiting["r1"], "aborted: this cluster is not changed") ||
		!strings.Contains(stuck.Status.Message, "cannot roll back: no Preparation older") {
		t.Errorf("aborted with nothing to go back to: %+v %v", stuck.Status, stuck.Waiting)
	}
}

func TestWavesStartOnlyInsideTheirWindows(t *testing.T) {
	p := policy(v1.RolloutHalt, 0)
	p.Waves[0].Soak = nil
	p.Windows = []v1.RolloutWindow{{Schedule: "0 22 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}}
	noon := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	night := time.Date(2026, 12, 7, 22, 30, 0, 0, time.UTC)
	fresh := []Member{{Name: "c1", Wave: 0, Standing: Untouched, HasApplication: true}, {Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true}}

	closed := Decide(Input{Policy: p, Preparation: "p-2", Now: noon, Members: fresh})
	if st := closed.Status; st.Wave != "" || st.NextWindow == nil || !st.NextWindow.Time.Equal(time.Date(2026, 12, 7, 22, 0, 0, 0, time.UTC)) ||
		closed.RecheckAfter != 10*time.Hour || !strings.Contains(closed.Waiting["c1"], "wave canary waits for the roll-out to start: outside the roll-out windows: the next opens at 2026-12-07T22:00:00Z") {
		t.Fatalf("closed at noon: %+v, waiting %v, recheck %s", st, closed.Waiting, closed.RecheckAfter)
	}
	if note := closed.Note(); !strings.Contains(note, "roll-out not started; outside the roll-out windows") {
		t.Errorf("Ready's note %q", note)
	}
	open := Decide(Input{Policy: p, Preparation: "p-2", Now: night, Members: fresh, Previous: &closed.Status})
	if _, waits := open.Waiting["c1"]; waits || open.Status.Wave != "canary" || open.Status.NextWindow != nil {
		t.Fatalf("open at night: %+v %v", open.Status, open.Waiting)
	}

	// The canary runs the release healthily when the window closes: Finish updates the clusters
	// of the wave under way, but the next wave waits; Pause changes nothing further.
	started := []Member{{Name: "c1", Wave: 0, Standing: Healthy, HasApplication: true}, {Name: "c2", Wave: 0, Standing: Untouched, HasApplication: true},
		{Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true}}
	finish := Decide(Input{Policy: p, Preparation: "p-2", Now: noon, Members: started, Previous: &open.Status})
	if _, waits := finish.Waiting["c2"]; waits || !strings.Contains(finish.Waiting["r1"], "wave rest waits") {
		t.Errorf("Finish: %v", finish.Waiting)
	}
	p.OnWindowClose = v1.WindowClosePause
	pause := Decide(Input{Policy: p, Preparation: "p-2", Now: noon, Members: started, Previous: &open.Status})
	if !strings.Contains(pause.Waiting["c2"], "waits for a window") || pause.Status.State != v1.RolloutProgressing {
		t.Errorf("Pause: %+v %v", pause.Status, pause.Waiting)
	}

	// A window that cannot be read holds every wave back and names the field.
	p.Windows[0].TimeZone = "Mars/Olympus"
	bad := Decide(Input{Policy: p, Preparation: "p-2", Now: night, Members: fresh})
	if !strings.Contains(bad.Status.Message, `spec.rollout.windows[0].timeZone "Mars/Olympus"`) || bad.Status.Wave != "" {
		t.Errorf("a bad window: %+v", bad.Status)
	}
}

func TestAServingWithoutAPolicyPausesAsOneWave(t *testing.T) {
	if Effective(nil, nil, nil, "p-2", false) != nil || Effective(nil, &v1.RolloutControl{Abort: "p-1"}, nil, "p-2", false) != nil {
		t.Fatal("a Serving without a policy and without a pause or an abort of its Preparation rolls out at once")
	}
	p := Effective(nil, &v1.RolloutControl{Paused: true}, nil, "p-2", false)
	if p == nil || len(p.Waves) != 1 || p.Waves[0].Name != AllAtOnceWave || p.Waves[0].MaxUnavailable != nil || p.FailureBudget < 1<<30 {
		t.Fatalf("implicit policy %+v", p)
	}
	own := policy(v1.RolloutHalt, 0)
	if Effective(own, &v1.RolloutControl{Paused: true}, nil, "p-2", false) != own {
		t.Error("the Environment's policy is replaced")
	}
}

func TestAnOrdersPaceSlowsTheEnvironmentsPolicyDown(t *testing.T) {
	ten := intstr.FromString("10%")
	one := intstr.FromInt32(1)
	p := policy(v1.RolloutHalt, 0)
	p.Waves[0].Soak = &metav1.Duration{Duration: time.Minute}
	p.Waves[1].MaxUnavailable = &ten // 10% of 20 clusters: 2
	pace := &v1.RolloutPace{MinSoak: &metav1.Duration{Duration: time.Hour}, MaxUnavailable: &one}
	if got := waveSoak(p, pace, 0); got != time.Hour {
		t.Errorf("soak %s, want the Order's hour", got)
	}
	if got := waveSoak(p, &v1.RolloutPace{MinSoak: &metav1.Duration{Duration: time.Second}}, 0); got != time.Minute {
		t.Errorf("soak %s: an Order sped the Environment's minute up", got)
	}
	if got := waveMaxUnavailable(p, pace, 1, 20); got != 1 {
		t.Errorf("maxUnavailable %d, want the Order's 1", got)
	}
	if got := waveMaxUnavailable(p, &v1.RolloutPace{MaxUnavailable: &ten}, 0, 20); got != 2 {
		t.Errorf("maxUnavailable %d: the Order's 10%% of a wave without a limit", got)
	}
	// Without a policy, the Order's maxUnavailable makes one wave of every cluster, that
	// nothing halts.
	implicit := Effective(nil, nil, pace, "p-2", false)
	if implicit == nil || len(implicit.Waves) != 1 || waveMaxUnavailable(implicit, pace, 0, 20) != 1 || waveSoak(implicit, pace, 0) != 0 {
		t.Fatalf("implicit policy %+v", implicit)
	}
	members := []Member{{Name: "a", Standing: Updating, HasApplication: true}, {Name: "b", Standing: Untouched, HasApplication: true}}
	plan := Decide(Input{Policy: implicit, Pace: pace, Preparation: "p-2", Now: time.Now(), Members: members})
	if !strings.Contains(plan.Waiting["b"], "wave all has as many clusters updating as its maxUnavailable allows (the Environment's, or the Order's rolloutPace.maxUnavailable of 1)") {
		t.Errorf("waiting %v", plan.Waiting)
	}
}
