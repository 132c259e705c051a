package rollout

import (
	"fmt"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// This file holds the rule of what a person asks of a Serving's roll-out (its spec.rollout):
// pause, resume, abort. Kokumi's API server and the kubectl plugin both call Ask, so that they
// accept and refuse the same requests with the same words; the reconciler decides what follows
// (Decide).

// Action is what a person asks of a roll-out.
type Action string

// Actions.
const (
	// Pause sets spec.rollout.paused: no further cluster is changed until Resume.
	Pause Action = "pause"
	// Resume clears spec.rollout.paused.
	Resume Action = "resume"
	// Abort sets spec.rollout.abort to the Preparation rolled out now.
	Abort Action = "abort"
)

// Refusal is a request of a roll-out that Ask refuses. Field, when set, names the field of the
// request that is wrong (a 422); otherwise the Serving's state is what refuses it (a 409).
type Refusal struct {
	Field   string
	Message string
}

// Error implements error.
func (r *Refusal) Error() string { return r.Message }

// Ask returns the Serving's spec.rollout once the person named by (as the API server names
// them: the admission policy kokumi-serving-rollout holds by to the writer) has asked act, and
// whether that changes it. preparation is the Preparation an Abort names: empty names the one
// the Serving rolls out now (spec.preparationName), anything else must be that one. A Resume of
// a roll-out that is not paused changes nothing, as does a Pause of one that is.
func Ask(sv *v1.Serving, act Action, preparation, by string) (control *v1.RolloutControl, changed bool, err error) {
	current := sv.Spec.PreparationName
	control = &v1.RolloutControl{}
	if sv.Spec.Rollout != nil {
		control = sv.Spec.Rollout.DeepCopy()
	}
	if by == "" {
		return nil, false, fmt.Errorf("ask %s of the roll-out of Serving %s/%s as nobody: the person who asks is not known", act, sv.Namespace, sv.Name)
	}
	switch act {
	case Resume:
		if !control.Paused {
			return control, false, nil
		}
		control.Paused = false
	case Pause:
		if current == "" {
			return nil, false, nothingPromoted(sv, act)
		}
		if control.Paused {
			return control, false, nil
		}
		control.Paused = true
	case Abort:
		if current == "" {
			return nil, false, nothingPromoted(sv, act)
		}
		if preparation != "" && preparation != current {
			return nil, false, &Refusal{Field: "preparation", Message: fmt.Sprintf(
				"Serving %s/%s rolls out Preparation %s, not %s: an abort names the Preparation rolled out now (leave it out to abort %s)",
				sv.Namespace, sv.Name, current, preparation, current)}
		}
		if Aborted(sv) {
			return nil, false, &Refusal{Message: fmt.Sprintf(
				"the roll-out of Preparation %s of Serving %s/%s is already aborted%s: promote another Preparation, or clear spec.rollout.abort to roll %s out again from its first wave",
				current, sv.Namespace, sv.Name, byWhom(sv), current)}
		}
		control.Abort = current
	default:
		return nil, false, fmt.Errorf("unknown roll-out action %q: pause, resume or abort", act)
	}
	control.By = by
	return control, true, nil
}

// Aborted says whether the roll-out of the Serving's current Preparation is aborted, or asked
// to be (spec.rollout.abort names it).
func Aborted(sv *v1.Serving) bool {
	current := sv.Spec.PreparationName
	if current == "" {
		return false
	}
	if sv.Spec.Rollout != nil && sv.Spec.Rollout.Abort == current {
		return true
	}
	st := sv.Status.Rollout
	return st != nil && st.Preparation == current && st.State == v1.RolloutAborted
}

// nothingPromoted refuses act of a Serving that deploys no Preparation.
func nothingPromoted(sv *v1.Serving, act Action) *Refusal {
	return &Refusal{Message: fmt.Sprintf("Serving %s/%s deploys no Preparation yet, so there is no roll-out to %s: promote one first", sv.Namespace, sv.Name, act)}
}

// byWhom names who aborted, as status or spec says, for a message (" by alice"), or nothing.
func byWhom(sv *v1.Serving) string {
	if st := sv.Status.Rollout; st != nil && st.State == v1.RolloutAborted && st.By != "" {
		return " by " + st.By
	}
	if sv.Spec.Rollout != nil && sv.Spec.Rollout.By != "" {
		return " by " + sv.Spec.Rollout.By
	}
	return ""
}
