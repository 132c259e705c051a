package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// The steps of Decide, each on its own: a round is run up to the step under test.

var stepNoon = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// roundThrough runs a round of in through steps.
func roundThrough(in Input, steps ...func(*round)) *round {
	if in.Now.IsZero() {
		in.Now = stepNoon
	}
	r := newRound(in)
	for _, s := range steps {
		s(r)
	}
	return r
}

func members(standings ...Standing) []Member {
	out := make([]Member, len(standings))
	for i, s := range standings {
		out[i] = Member{Name: string(rune('a' + i)), Wave: i % 2, Standing: s, Reason: v1.ReasonDegraded, HasApplication: true}
	}
	return out
}

func TestStepControlStartsFromTheLastStatusAndWhatAPersonAsks(t *testing.T) {
	for _, tc := range []struct {
		name      string
		previous  *v1.RolloutStatus
		control   *v1.RolloutControl
		wantState v1.RolloutState
		wantWave  string
		wantFrom  string
		current   int
	}{
		{"no status: a fresh roll-out from its From", nil, nil, v1.RolloutProgressing, "", "p-1", -1},
		{"another Preparation's status counts for nothing", &v1.RolloutStatus{Preparation: "p-0", Wave: "rest", State: v1.RolloutHalted}, nil, v1.RolloutProgressing, "", "p-1", -1},
		{"this Preparation's status goes on at its wave", &v1.RolloutStatus{Preparation: "p-2", From: "p-0", Wave: "rest", State: v1.RolloutProgressing}, nil, v1.RolloutProgressing, "rest", "p-0", 1},
		{"a cleared abort starts again from the first wave", &v1.RolloutStatus{Preparation: "p-2", From: "p-0", Wave: "rest", State: v1.RolloutAborted}, nil, v1.RolloutProgressing, "", "p-0", -1},
		{"an abort still asked stays", &v1.RolloutStatus{Preparation: "p-2", Wave: "rest", State: v1.RolloutAborted}, &v1.RolloutControl{Abort: "p-2"}, v1.RolloutAborted, "rest", "", 1},
		{"a resume goes on", &v1.RolloutStatus{Preparation: "p-2", Wave: "canary", State: v1.RolloutPaused, By: "alice"}, nil, v1.RolloutProgressing, "canary", "", 0},
		{"a pause still asked stays", &v1.RolloutStatus{Preparation: "p-2", Wave: "canary", State: v1.RolloutPaused}, &v1.RolloutControl{Paused: true}, v1.RolloutPaused, "canary", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := roundThrough(Input{Policy: policy(v1.RolloutHalt, 0), Preparation: "p-2", From: "p-1", Previous: tc.previous, Control: tc.control},
				(*round).stepControl)
			if r.st.State != tc.wantState || r.st.Wave != tc.wantWave || r.st.From != tc.wantFrom || r.current != tc.current {
				t.Fatalf("got %s at %q from %q (current %d), want %s at %q from %q (current %d)",
					r.st.State, r.st.Wave, r.st.From, r.current, tc.wantState, tc.wantWave, tc.wantFrom, tc.current)
			}
		})
	}
}

func TestStepWindowsSaysWhatHoldsTheRolloutBack(t *testing.T) {
	night := []v1.RolloutWindow{{Schedule: "0 22 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}}
	for _, tc := range []struct {
		name     string
		windows  []v1.RolloutWindow
		open     bool
		held     string
		recheck  time.Duration
		nextOpen bool
	}{
		{"no window: always open", nil, true, "", 0, false},
		{"outside the window: held until it opens", night, false, "outside the roll-out windows: the next opens at 2026-12-07T22:00:00Z", 10 * time.Hour, true},
		{"a window that does not parse: no wave starts", []v1.RolloutWindow{{Schedule: "whenever"}}, false, "no wave starts: ", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy(v1.RolloutHalt, 0)
			p.Windows = tc.windows
			r := roundThrough(Input{Policy: p, Preparation: "p-2"}, (*round).stepControl, (*round).stepWindows)
			if r.open != tc.open || !strings.HasPrefix(r.held, tc.held) || (tc.held == "") != (r.held == "") ||
				r.plan.RecheckAfter != tc.recheck || (r.st.NextWindow != nil) != tc.nextOpen {
				t.Fatalf("open %v, held %q, recheck %s, next %v", r.open, r.held, r.plan.RecheckAfter, r.st.NextWindow)
			}
		})
	}
}

func TestStepGatesStartsTheFirstWaveUnlessAnApprovalHoldsIt(t *testing.T) {
	approval := &v1.ApprovalPolicy{Required: 1}
	for _, tc := range []struct {
		name     string
		approval *v1.ApprovalPolicy
		members  []Member
		wave     string
		awaiting bool
	}{
		{"no gate: the first wave starts", nil, members(Untouched, Untouched), "canary", false},
		{"the Environment's approval holds the first wave", approval, members(Untouched, Untouched), "", true},
		{"a cluster that runs the release already: the wave was reached", approval, members(Updating, Untouched), "canary", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := roundThrough(Input{Policy: policy(v1.RolloutHalt, 0), Preparation: "p-2", Members: tc.members, Gates: Gates{Approval: tc.approval}},
				(*round).stepControl, (*round).stepWindows, (*round).stepGates)
			if r.st.Wave != tc.wave || (r.st.Awaiting != "") != tc.awaiting || (r.waitsFor != "") != tc.awaiting {
				t.Fatalf("wave %q, awaiting %q, waits for %q", r.st.Wave, r.st.Awaiting, r.waitsFor)
			}
		})
	}
}

func TestStepBudgetStopsAnAbortedOrFailedRollout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  int32
		control *v1.RolloutControl
		members []Member
		state   v1.RolloutState
		stop    stopping
		by      string
	}{
		{"within the budget", 1, nil, members(Failed, Healthy), v1.RolloutProgressing, notStopping, ""},
		{"past the budget: halts", 0, nil, members(Failed, Healthy), v1.RolloutHalted, halting, ""},
		{"an abort of this Preparation", 5, &v1.RolloutControl{Abort: "p-2", By: "bob"}, members(Healthy), v1.RolloutAborted, aborting, "bob"},
		{"an abort of another Preparation is nothing", 5, &v1.RolloutControl{Abort: "p-1"}, members(Healthy), v1.RolloutProgressing, notStopping, ""},
		{"a pause", 5, &v1.RolloutControl{Paused: true, By: "carol"}, members(Healthy), v1.RolloutPaused, notStopping, "carol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := roundThrough(Input{Policy: policy(v1.RolloutHalt, tc.budget), Preparation: "p-2", Members: tc.members, Control: tc.control},
				(*round).stepControl, (*round).stepWindows, (*round).stepGates, (*round).stepBudget)
			if r.st.State != tc.state || r.stop != tc.stop || r.st.By != tc.by {
				t.Fatalf("state %s, stop %d, by %q; want %s, %d, %q", r.st.State, r.stop, r.st.By, tc.state, tc.stop, tc.by)
			}
		})
	}
}

func TestStepRollbackGoesBackWhenItMay(t *testing.T) {
	to := func() (string, string) { return "p-1", "" }
	none := func() (string, string) { return "", "no Preparation has a deployment record" }
	for _, tc := range []struct {
		name       string
		onFailure  v1.RolloutFailureAction
		control    *v1.RolloutControl
		rollbackTo func() (string, string)
		state      v1.RolloutState
		back       string
		says       string
	}{
		{"a halt of a policy that halts stays halted", v1.RolloutHalt, nil, to, v1.RolloutHalted, "", "halted in wave canary: it failed on a (Degraded), past the failure budget of 0"},
		{"a halt of a policy that rolls back goes back", v1.RolloutRollback, nil, to, v1.RolloutRolledBack, "p-1", "goes back to Preparation p-1"},
		{"a rollback with nowhere to go halts and says why", v1.RolloutRollback, nil, none, v1.RolloutHalted, "", "it cannot roll back: no Preparation has a deployment record"},
		{"an abort goes back", v1.RolloutHalt, &v1.RolloutControl{Abort: "p-2", By: "dan"}, to, v1.RolloutAborted, "p-1", "dan aborted the roll-out of Preparation p-2: every cluster it changed goes back to Preparation p-1"},
		{"an abort with nowhere to go changes nothing more", v1.RolloutHalt, &v1.RolloutControl{Abort: "p-2"}, none, v1.RolloutAborted, "", "someone aborted the roll-out of Preparation p-2: no further cluster is changed; it cannot roll back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := roundThrough(Input{Policy: policy(tc.onFailure, 0), Preparation: "p-2", Members: members(Failed, Healthy), Control: tc.control, RollbackTo: tc.rollbackTo},
				(*round).stepControl, (*round).stepWindows, (*round).stepGates, (*round).stepBudget, (*round).stepRollback)
			if r.st.State != tc.state || r.st.RollbackTo != tc.back || !strings.Contains(r.st.Message, tc.says) {
				t.Fatalf("state %s, back to %q, message %q", r.st.State, r.st.RollbackTo, r.st.Message)
			}
		})
	}
}

func TestStepAdvanceGoesPastHealthySoakedWaves(t *testing.T) {
	soaked := &metav1.Time{Time: stepNoon.Add(-2 * time.Hour)}
	soaking := &metav1.Time{Time: stepNoon.Add(-time.Minute)}
	for _, tc := range []struct {
		name     string
		previous *v1.RolloutStatus
		control  *v1.RolloutControl
		members  []Member
		state    v1.RolloutState
		wave     string
		recheck  bool
	}{
		{"an unhealthy wave holds", nil, nil, members(Updating, Untouched), v1.RolloutProgressing, "canary", false},
		{"a healthy wave soaks first", &v1.RolloutStatus{Preparation: "p-2", Wave: "canary", State: v1.RolloutProgressing, WaveHealthySince: soaking}, nil,
			members(Healthy, Untouched), v1.RolloutProgressing, "canary", true},
		{"a soaked wave lets the next start", &v1.RolloutStatus{Preparation: "p-2", Wave: "canary", State: v1.RolloutProgressing, WaveHealthySince: soaked}, nil,
			members(Healthy, Untouched), v1.RolloutProgressing, "rest", false},
		{"a paused roll-out stays at its wave", &v1.RolloutStatus{Preparation: "p-2", Wave: "canary", State: v1.RolloutPaused, WaveHealthySince: soaked}, &v1.RolloutControl{Paused: true},
			members(Healthy, Untouched), v1.RolloutPaused, "canary", false},
		{"every wave healthy: complete", &v1.RolloutStatus{Preparation: "p-2", Wave: "rest", State: v1.RolloutProgressing}, nil,
			members(Healthy, Healthy), v1.RolloutComplete, v1.UnselectedWave, false},
		{"a wave running the release is reached whatever the status says", nil, nil, members(Untouched, Updating), v1.RolloutProgressing, "rest", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := roundThrough(Input{Policy: policy(v1.RolloutHalt, 0), Preparation: "p-2", Members: tc.members, Previous: tc.previous, Control: tc.control},
				(*round).stepControl, (*round).stepWindows, (*round).stepGates, (*round).stepBudget, (*round).stepRollback, (*round).stepAdvance)
			if r.st.State != tc.state || r.st.Wave != tc.wave || (r.plan.RecheckAfter > 0) != tc.recheck {
				t.Fatalf("state %s at %q, recheck %s; want %s at %q", r.st.State, r.st.Wave, r.plan.RecheckAfter, tc.state, tc.wave)
			}
		})
	}
}

func TestStepAdmitChangesWhatMaxUnavailableAllowsAndSaysWhyTheOthersWait(t *testing.T) {
	one := Member{Name: "c1", Wave: 0, Standing: Untouched, HasApplication: true}
	two := Member{Name: "c2", Wave: 0, Standing: Untouched, HasApplication: true}
	later := Member{Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true}
	joiner := Member{Name: "r2", Wave: 1, Standing: Untouched}
	p := policy(v1.RolloutHalt, 0)
	onePct := p.Waves[1].MaxUnavailable
	p.Waves[0].MaxUnavailable = onePct // 10% of two: one at a time
	for _, tc := range []struct {
		name    string
		control *v1.RolloutControl
		members []Member
		from    string
		waiting map[string]string
		joiners []string
	}{
		{"one of the first wave at a time; the next wave waits", nil, []Member{one, two, later}, "",
			map[string]string{"c2": "wave canary has as many clusters updating as its maxUnavailable allows", "r1": "wave rest waits for wave canary to be healthy and soak 1h0m0s"}, nil},
		{"a cluster without an Application in a wave not reached joins with what it runs", nil, []Member{one, joiner}, "p-1",
			map[string]string{}, []string{"r2"}},
		{"paused: nothing of the reached wave changes", &v1.RolloutControl{Paused: true}, []Member{one}, "",
			map[string]string{"c1": "the roll-out is paused: this cluster is not changed until it is resumed"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := roundThrough(Input{Policy: p, Preparation: "p-2", From: tc.from, Members: tc.members, Control: tc.control},
				(*round).stepControl, (*round).stepWindows, (*round).stepGates, (*round).stepBudget, (*round).stepRollback, (*round).stepAdvance, (*round).stepAdmit)
			if len(r.plan.Waiting) != len(tc.waiting) || strings.Join(r.plan.Joiners, ",") != strings.Join(tc.joiners, ",") {
				t.Fatalf("waiting %v, joiners %v; want %v, %v", r.plan.Waiting, r.plan.Joiners, tc.waiting, tc.joiners)
			}
			for c, why := range tc.waiting {
				if !strings.HasPrefix(r.plan.Waiting[c], why) {
					t.Errorf("%s waits because %q, want %q", c, r.plan.Waiting[c], why)
				}
			}
		})
	}
}

func TestConcludeGivesAStoppedRolloutItsReadyAndRecordsThePassedWaves(t *testing.T) {
	soaked := &metav1.Time{Time: stepNoon.Add(-2 * time.Hour)}
	for _, tc := range []struct {
		name     string
		budget   int32
		previous *v1.RolloutStatus
		members  []Member
		ready    string
		passed   []string
	}{
		{"halted: Ready False, RolloutHalted", 0, nil, members(Failed, Untouched), v1.ReasonRolloutHalted, nil},
		{"past the first wave: its record", 0, &v1.RolloutStatus{Preparation: "p-2", Wave: "canary", State: v1.RolloutProgressing, WaveHealthySince: soaked},
			members(Healthy, Untouched), "", []string{"canary"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Decide(Input{Policy: policy(v1.RolloutHalt, tc.budget), Preparation: "p-2", Members: tc.members, Previous: tc.previous, Now: stepNoon})
			reason := ""
			if c.Ready != nil {
				reason = c.Ready.Reason
			}
			var passed []string
			for _, w := range c.Passed {
				passed = append(passed, w.Name)
			}
			if reason != tc.ready || strings.Join(passed, ",") != strings.Join(tc.passed, ",") {
				t.Fatalf("Ready %q, passed %v; want %q, %v", reason, passed, tc.ready, tc.passed)
			}
		})
	}
}
