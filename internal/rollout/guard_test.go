package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func TestGuardSpecsRunTheNamedVerificationsForTheDuration(t *testing.T) {
	verify := []v1.Verification{
		{Name: "smoke", Count: 3, FailureLimit: 2, Interval: &metav1.Duration{Duration: time.Second}, HTTP: &v1.HTTPVerification{URL: "http://a"}},
		{Name: "error-rate", HTTP: &v1.HTTPVerification{URL: "http://b"}},
	}
	for _, tc := range []struct {
		name     string
		guard    v1.GuardPolicy
		names    []string
		count    int32
		interval time.Duration
	}{
		{"a duration of ten intervals is ten runs in a row", v1.GuardPolicy{Verifications: []string{"error-rate"}, Interval: &metav1.Duration{Duration: 30 * time.Second},
			Duration: metav1.Duration{Duration: 5 * time.Minute}}, []string{"error-rate"}, 10, 30 * time.Second},
		{"no interval is one a minute; a duration shorter than it is one run", v1.GuardPolicy{Verifications: []string{"smoke"},
			Duration: metav1.Duration{Duration: 10 * time.Second}}, []string{"smoke"}, 1, time.Minute},
		{"the guard's order; a name spec.verify lacks is left out", v1.GuardPolicy{Verifications: []string{"error-rate", "gone", "smoke"},
			Duration: metav1.Duration{Duration: 3 * time.Minute}}, []string{"error-rate", "smoke"}, 3, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specs := GuardSpecs(verify, &tc.guard)
			var names []string
			for _, s := range specs {
				names = append(names, s.Name)
				if s.Count != tc.count || s.Interval.Duration != tc.interval {
					t.Errorf("%s: count %d every %s, want %d every %s", s.Name, s.Count, s.Interval.Duration, tc.count, tc.interval)
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.names, ",") {
				t.Errorf("specs %v, want %v", names, tc.names)
			}
		})
	}
	// The failure limit is the verification's own; the Environment's spec is not changed.
	specs := GuardSpecs(verify, &v1.GuardPolicy{Verifications: []string{"smoke"}, Duration: metav1.Duration{Duration: time.Hour}})
	if specs[0].FailureLimit != 2 || verify[0].Count != 3 || verify[0].Interval.Duration != time.Second {
		t.Errorf("spec %+v, Environment's %+v", specs[0], verify[0])
	}
}

func TestGuardPhaseOf(t *testing.T) {
	res := func(phases ...v1.VerificationPhase) []v1.VerificationResult {
		var out []v1.VerificationResult
		for _, p := range phases {
			out = append(out, v1.VerificationResult{Phase: p})
		}
		return out
	}
	for _, tc := range []struct {
		results []v1.VerificationResult
		n       int
		want    v1.GuardPhase
	}{
		{nil, 1, v1.GuardRunning},
		{res(v1.VerificationRunning, v1.VerificationPassed), 2, v1.GuardRunning},
		{res(v1.VerificationPassed, v1.VerificationPassed), 2, v1.GuardPassed},
		{res(v1.VerificationPassed, v1.VerificationFailed), 2, v1.GuardFailed},
		{res(v1.VerificationRunning, v1.VerificationFailed), 2, v1.GuardFailed},
	} {
		if got := GuardPhaseOf(tc.results, tc.n); got != tc.want {
			t.Errorf("GuardPhaseOf(%v, %d) = %s, want %s", tc.results, tc.n, got, tc.want)
		}
	}
}

// A complete roll-out whose guard failed stops: Halt leaves every cluster as it is, Rollback
// sends every cluster back to what RollbackTo finds.
func TestAFailedGuardHaltsOrRollsBackACompleteRollout(t *testing.T) {
	failed := &v1.GuardStatus{Phase: v1.GuardFailed, Record: "sha256:rec", Revocation: "sha256:rev",
		Verifications: []v1.VerificationResult{{Name: "error-rate", Phase: v1.VerificationFailed, Message: "the answer: 200 OK"}}}
	members := []Member{{Name: "c1", Wave: 0, Standing: Healthy, HasApplication: true}, {Name: "r1", Wave: 1, Standing: Healthy, HasApplication: true}}
	for _, tc := range []struct {
		name      string
		onFailure v1.RolloutFailureAction
		guard     *v1.GuardStatus
		state     v1.RolloutState
		to        string
		message   string
	}{
		{"a guard running changes nothing", v1.RolloutHalt, &v1.GuardStatus{Phase: v1.GuardRunning}, v1.RolloutComplete, "", ""},
		{"a guard that passed changes nothing", v1.RolloutRollback, &v1.GuardStatus{Phase: v1.GuardPassed}, v1.RolloutComplete, "", ""},
		{"Halt", v1.RolloutHalt, failed, v1.RolloutHalted, "",
			"the guard of the Environment failed after Preparation p-2 was Deployed: verification error-rate (the answer: 200 OK) failed; revocation sha256:rev revokes its deployment record sha256:rec; no cluster is changed"},
		{"Rollback", v1.RolloutRollback, failed, v1.RolloutRolledBack, "p-1",
			"every cluster goes back to Preparation p-1, the last with a deployment record in the Environment that is not revoked whose evidence verifies; passed over p-0 (revoked)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy(v1.RolloutHalt, 0)
			p.Waves[0].Soak = nil
			prev := &v1.RolloutStatus{Preparation: "p-2", From: "p-1", State: v1.RolloutComplete, Wave: v1.UnselectedWave, Guard: tc.guard.DeepCopy()}
			plan := Decide(Input{Policy: p, Preparation: "p-2", From: "p-1", Previous: prev, Now: time.Now(), Members: members,
				Gates:      Gates{Guard: &v1.GuardPolicy{Verifications: []string{"error-rate"}, OnFailure: tc.onFailure}},
				RollbackTo: func() (string, string) { return "p-1", "p-0 (revoked)" }})
			st := plan.Status
			if st.State != tc.state || st.RollbackTo != tc.to || !strings.Contains(st.Message, tc.message) {
				t.Fatalf("status %+v", st)
			}
			if tc.state == v1.RolloutComplete {
				if plan.Ready != nil {
					t.Errorf("Ready %+v", plan.Ready)
				}
				return
			}
			if plan.Ready == nil || plan.Ready.Message != st.Message || (tc.state == v1.RolloutHalted) != (plan.Ready.Reason == v1.ReasonRolloutHalted) {
				t.Errorf("Ready %+v", plan.Ready)
			}
			if tc.state == v1.RolloutHalted && !GoesBack(&st) && st.Guard.Phase != v1.GuardFailed {
				t.Errorf("guard %+v", st.Guard)
			}
		})
	}
}
