package analysis

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Sustained records the outcome of a run of spec that started at started into res (its
// recent outcomes, res.Recent, and when the failed runs in a row began, res.FailingSince), and
// says whether a failed run counts against the failure limit: without failFor or failures,
// every one; with failFor, once the runs have failed one after another for failFor (from the
// start of the first to the start of this one); with failures, once count of the last of runs
// failed. A run that passed never counts.
func Sustained(spec *v1.Verification, res *v1.VerificationResult, passed bool, started time.Time) bool {
	mark := "F"
	if passed {
		mark = "P"
		res.FailingSince = nil
	} else if res.FailingSince == nil {
		res.FailingSince = &metav1.Time{Time: started.Truncate(time.Second)}
	}
	recent := ""
	if w := spec.Failures; w != nil {
		of := int(min(max(w.Of, 1), 16))
		if recent = res.Recent + mark; len(recent) > of {
			recent = recent[len(recent)-of:]
		}
	}
	res.Recent = recent
	if passed {
		return false
	}
	switch {
	case spec.Failures != nil:
		return strings.Count(res.Recent, "F") >= int(max(spec.Failures.Count, 1))
	case spec.FailFor != nil && spec.FailFor.Duration > 0:
		return started.Truncate(time.Second).Sub(res.FailingSince.Time) >= spec.FailFor.Duration
	}
	return true
}
