package rollout

import (
	"fmt"
	"slices"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// This file holds the one rule of approvals: which gates ask for them, which approvals of a
// Serving count, and whether a person may approve now. The reconciler counts with Approvers;
// Kokumi's API server and the kubectl plugin refuse with Approve before they write, so that
// every surface says the same.

// ApprovalGate returns the approval policy of a gate of the Environment: wave names a wave of
// its spec.rollout, empty the Environment's own (spec.approval); nil when the gate asks for none.
func ApprovalGate(env *v1.Environment, wave string) *v1.ApprovalPolicy {
	if env == nil {
		return nil
	}
	if wave == "" {
		return env.Spec.Approval
	}
	if env.Spec.Rollout == nil {
		return nil
	}
	for i := range env.Spec.Rollout.Waves {
		if env.Spec.Rollout.Waves[i].Name == wave {
			return env.Spec.Rollout.Waves[i].Approval
		}
	}
	return nil
}

// Required is how many approvals a policy asks for (at least 1).
func Required(p *v1.ApprovalPolicy) int {
	if p == nil {
		return 0
	}
	return max(int(p.Required), 1)
}

// Counts says whether an approval is of the roll-out attempt of preparation: of another
// Preparation, or of an earlier attempt of the same (before it was promoted away and back, or
// an abort was cleared), it no longer counts, and the reconciler prunes it.
func Counts(a v1.Approval, preparation string, attempt int64) bool {
	return a.Preparation == preparation && a.Attempt == attempt
}

// Approvers returns the people whose approvals of the gate wave (empty: the Environment's) of
// the roll-out attempt of preparation count, in the order they approved, each once; the
// promoter's does not when the policy asks for separation, nor those of the people who wrote
// the specs it was rendered from: promoters are the promoter and those authors. refused names
// one whose approval was left out.
func Approvers(p *v1.ApprovalPolicy, approvals []v1.Approval, preparation string, attempt int64, wave string, promoters []string) (by []string, refused string) {
	for _, a := range approvals {
		if !Counts(a, preparation, attempt) || a.Wave != wave || a.By == "" || slices.Contains(by, a.By) {
			continue
		}
		if p != nil && p.SeparateFromPromoter && slices.Contains(promoters, a.By) {
			refused = a.By
			continue
		}
		by = append(by, a.By)
	}
	return by, refused
}

// Attempt returns the roll-out attempt of the Serving's Preparation (status.rollout.attempt),
// and false while its roll-out has not started (no approval counts then).
func Attempt(sv *v1.Serving) (int64, bool) {
	st := sv.Status.Rollout
	if st == nil || sv.Spec.PreparationName == "" || st.Preparation != sv.Spec.PreparationName {
		return 0, false
	}
	return st.Attempt, true
}

// ApproversOf is Approvers of the Serving's approvals of the gate wave of the roll-out under way.
func ApproversOf(sv *v1.Serving, p *v1.ApprovalPolicy, wave string) (by []string, refused string) {
	attempt, ok := Attempt(sv)
	if !ok {
		return nil, ""
	}
	return Approvers(p, sv.Spec.Approvals, sv.Spec.PreparationName, attempt, wave, promotersOf(sv))
}

// promoters are whose approvals separation refuses: the promoter, and the people who wrote the
// specs the Preparation was rendered from.
func (g Gates) promoters() []string {
	return append([]string{g.PromotedBy}, g.Authors...)
}

// promotersOf is Gates.promoters of a Serving, from its spec and status.rollout.
func promotersOf(sv *v1.Serving) []string {
	g := Gates{PromotedBy: sv.Spec.PromotedBy}
	if st := sv.Status.Rollout; st != nil && st.Preparation == sv.Spec.PreparationName {
		g.Authors = st.Authors
	}
	return g.promoters()
}

// RefusedAs says why separation refuses a person's approval of preparation: they "promoted
// Preparation p", or "wrote the spec Preparation p was rendered from".
func RefusedAs(person, promotedBy, preparation string) string {
	if person == promotedBy {
		return "promoted Preparation " + preparation
	}
	return "wrote the spec Preparation " + preparation + " was rendered from"
}

// Stale returns the Serving's approvals that still count (those of the roll-out attempt under
// way), and whether any other is left to prune; nothing is pruned while the roll-out of its
// Preparation has not started.
func Stale(sv *v1.Serving) (kept []v1.Approval, stale bool) {
	attempt, ok := Attempt(sv)
	if !ok {
		return sv.Spec.Approvals, false
	}
	for _, a := range sv.Spec.Approvals {
		if Counts(a, sv.Spec.PreparationName, attempt) {
			kept = append(kept, a)
		}
	}
	return kept, len(kept) != len(sv.Spec.Approvals)
}

// GateName is how a message names a gate: "wave canary", or "the Environment".
func GateName(wave string) string {
	if wave == "" {
		return "the Environment's gate"
	}
	return "wave " + wave
}

// Approve returns the Serving's spec.approvals once the person named by (as the API server
// names them) approved the gate wave (empty: the Environment's) of the Preparation the Serving
// rolls out now, or refuses: the gate asks for no approval, nothing is promoted, preparation
// names another Preparation, the person promoted it and the gate asks for separation, or they
// approved already. The approval names the roll-out attempt under way (status.rollout.attempt);
// approvals of other Preparations or attempts are dropped, so that the list stays short.
func Approve(env *v1.Environment, sv *v1.Serving, wave, preparation, by string) ([]v1.Approval, error) {
	if by == "" {
		return nil, fmt.Errorf("approve %s of Serving %s/%s as nobody: the person who approves is not known", GateName(wave), sv.Namespace, sv.Name)
	}
	current := sv.Spec.PreparationName
	if current == "" {
		return nil, &Refusal{Message: fmt.Sprintf("Serving %s/%s deploys no Preparation yet, so there is nothing to approve: promote one first", sv.Namespace, sv.Name)}
	}
	if preparation != "" && preparation != current {
		return nil, &Refusal{Field: "preparation", Message: fmt.Sprintf(
			"Serving %s/%s rolls out Preparation %s, not %s: an approval names the Preparation rolled out now (leave it out to approve %s)",
			sv.Namespace, sv.Name, current, preparation, current)}
	}
	attempt, started := Attempt(sv)
	if !started {
		return nil, &Refusal{Message: fmt.Sprintf("the roll-out of Preparation %s of Serving %s/%s has not started yet: approve once it awaits approval (kubectl kokumi status %s)",
			current, sv.Namespace, sv.Name, sv.Name)}
	}
	policy := ApprovalGate(env, wave)
	if policy == nil {
		field := "wave"
		msg := fmt.Sprintf("Environment %s asks for no approval of %s", env.Name, GateName(wave))
		if wave == "" {
			field = ""
			msg += ": name the wave to approve"
		}
		return nil, &Refusal{Field: field, Message: msg}
	}
	if policy.SeparateFromPromoter && slices.Contains(promotersOf(sv), by) {
		return nil, &Refusal{Message: fmt.Sprintf(
			"%s %s, and Environment %s asks that someone else approve %s (approval.separateFromPromoter)",
			by, RefusedAs(by, sv.Spec.PromotedBy, current), env.Name, GateName(wave))}
	}
	var out []v1.Approval
	for _, a := range sv.Spec.Approvals {
		if !Counts(a, current, attempt) {
			continue
		}
		if a.Wave == wave && a.By == by {
			return nil, &Refusal{Message: fmt.Sprintf("%s already approved %s of Preparation %s", by, GateName(wave), current)}
		}
		out = append(out, a)
	}
	if len(out) >= 32 {
		return nil, &Refusal{Message: fmt.Sprintf("Serving %s/%s holds 32 approvals of Preparation %s, the most it keeps", sv.Namespace, sv.Name, current)}
	}
	return append(out, v1.Approval{Preparation: current, Wave: wave, By: by, Attempt: attempt}), nil
}
