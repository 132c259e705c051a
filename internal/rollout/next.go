package rollout

import (
	"fmt"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// AfterApproval says what happens next once a gate of the Serving's roll-out has approvers of
// the required count: it waits for more; or it stays stopped (aborted, halted, rolled back,
// paused), which an approval does not change; or the roll-out goes past the gate. The server's
// answer and `kubectl kokumi approve` both say it.
func AfterApproval(sv *v1.Serving, approvers, required int) string {
	if left := required - approvers; left > 0 {
		return fmt.Sprintf("it waits for %d more", left)
	}
	st := sv.Status.Rollout
	if st == nil || st.Preparation != sv.Spec.PreparationName {
		return "the roll-out goes past it"
	}
	switch st.State {
	case v1.RolloutAborted:
		return "the roll-out stays aborted: an approval does not resume it (clearing the abort starts another attempt, which asks again)"
	case v1.RolloutHalted, v1.RolloutRolledBack:
		return fmt.Sprintf("the roll-out stays %s: an approval does not restart it", stateWord(st.State))
	case v1.RolloutPaused:
		return "the roll-out goes past it once someone resumes it"
	}
	return "the roll-out goes past it"
}

func stateWord(s v1.RolloutState) string {
	if s == v1.RolloutRolledBack {
		return "rolled back"
	}
	return "halted"
}
