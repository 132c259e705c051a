package rollout

import (
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// This file holds the rule of an Environment's guard (spec.guard): which verifications it runs
// again after a release is Deployed, how often and how many times, when it passed or failed,
// and what a failed guard does to the roll-out (stepBudget, stepRollback).

// GuardWave is the gate name the guard's runs go by (their Jobs' names, KOKUMI_WAVE): no wave
// can be named so (wave names have no dot), so that no run of a gate is taken for the guard's.
const GuardWave = "environment.guard"

// DefaultGuardInterval is the guard's interval when it names none.
const DefaultGuardInterval = time.Minute

// GuardSpecs returns the verifications the guard g runs: those of the Environment's spec.verify
// it names, in its order, each run every interval of the guard and passing once it passed
// duration/interval times in a row (at least once), with its own failureLimit. Names that
// spec.verify does not list (the API server refuses them) are left out.
func GuardSpecs(verify []v1.Verification, g *v1.GuardPolicy) []v1.Verification {
	interval := DefaultGuardInterval
	if g.Interval != nil && g.Interval.Duration > 0 {
		interval = g.Interval.Duration
	}
	runs := min(max(int64(g.Duration.Duration/interval), 1), math.MaxInt32)
	var out []v1.Verification
	for _, name := range g.Verifications {
		for _, v := range verify {
			if v.Name != name {
				continue
			}
			spec := *v.DeepCopy()
			spec.Interval = &metav1.Duration{Duration: interval}
			spec.Count = int32(runs)
			out = append(out, spec)
		}
	}
	return out
}

// GuardPhaseOf is where a guard of n verifications stands with these results: Failed once one
// failed, Passed once all n passed, else Running.
func GuardPhaseOf(results []v1.VerificationResult, n int) v1.GuardPhase {
	passed := 0
	for _, r := range results {
		switch r.Phase {
		case v1.VerificationFailed:
			return v1.GuardFailed
		case v1.VerificationPassed:
			passed++
		}
	}
	if passed >= n {
		return v1.GuardPassed
	}
	return v1.GuardRunning
}

// GuardFailure returns the verification whose failure failed the guard g, or nil.
func GuardFailure(g *v1.GuardStatus) *v1.VerificationResult {
	if g == nil {
		return nil
	}
	for i := range g.Verifications {
		if g.Verifications[i].Phase == v1.VerificationFailed {
			return &g.Verifications[i]
		}
	}
	return nil
}

// guardFailed says whether the roll-out's guard failed.
func guardFailed(st *v1.RolloutStatus) bool {
	return st.Guard != nil && st.Guard.Phase == v1.GuardFailed
}

// guardMessage says why the guard stopped the roll-out of preparation.
func guardMessage(preparation string, g *v1.GuardStatus) string {
	what := "a verification"
	if f := GuardFailure(g); f != nil {
		what = fmt.Sprintf("verification %s (%s)", f.Name, f.Message)
	}
	revoked := "its deployment record is revoked"
	if g.Revocation != "" {
		revoked = "revocation " + g.Revocation + " revokes its deployment record " + g.Record
	}
	return fmt.Sprintf("the guard of the Environment failed after Preparation %s was Deployed: %s failed; %s", preparation, what, revoked)
}
