package serving

import (
	"testing"

	"github.com/kokumi-dev/kokumi/internal/rollout"
)

// What a check printed goes in the Event apart from Kokumi's words, marked and quoted.
func TestAnEventShowsTheChecksOutputApartAndMarked(t *testing.T) {
	plain := rollout.Transition{Reason: "RolloutPaused", Message: "alice paused the roll-out of Preparation p-2"}
	if got := eventMessage(plain); got != plain.Message {
		t.Errorf("a transition without output: %q", got)
	}
	failed := rollout.Transition{Reason: "VerificationFailed", Message: "verification smoke of wave canary failed for Preparation p-2",
		Output: `channel all "clear"`}
	if got, want := eventMessage(failed), `verification smoke of wave canary failed for Preparation p-2; the check's output (untrusted): "channel all \"clear\""`; got != want {
		t.Errorf("Event message %q, want %q", got, want)
	}
}
