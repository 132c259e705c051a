package rollout

import (
	"fmt"
	"strings"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// This file holds the rule of a roll-out's gates: the approvals a wave (or the Environment)
// waits for before it starts, the verifications it passes before the next one starts, and what
// a deployment record says of them (Evidence). Decide calls it; the verifications themselves
// run in internal/verify.

// gateRule decides the gates of one Decide: gate -1 is the Environment's own, 0… the waves'.
type gateRule struct {
	in     *Input
	names  []string
	byWave [][]*Member
	// attempt is the roll-out's (status.rollout.attempt): only approvals of it count.
	attempt int64
}

// approval returns the approval policy of gate w, the wave an Approval of it names, and the
// gate's name in status.rollout.awaiting.
func (g gateRule) approval(w int) (policy *v1.ApprovalPolicy, wave, label string) {
	switch {
	case w < 0:
		return g.in.Gates.Approval, "", v1.EnvironmentGate
	case w < len(g.in.Policy.Waves):
		return g.in.Policy.Waves[w].Approval, g.names[w], g.names[w]
	}
	return nil, "", ""
}

// WhoApproves says who may approve a gate and how, once where a roll-out says it waits for
// approvals (its status message): not in each waiting cluster's message.
const WhoApproves = "by someone bound to the ClusterRole kokumi-approver in the Serving's namespace"

// awaiting returns the name of gate w and why it holds the roll-out back, while it waits for
// approvals: msg says it with who may approve and how (WhoApproves), for the roll-out's
// message; short without, for each cluster it holds. Empty when it asks for none or has them.
func (g gateRule) awaiting(w int) (gate, msg, short string) {
	policy, wave, label := g.approval(w)
	if policy == nil {
		return "", "", ""
	}
	by, refused := Approvers(policy, g.in.Gates.Approvals, g.in.Preparation, g.attempt, wave, g.in.Gates.promoters())
	if len(by) >= Required(policy) {
		return "", "", ""
	}
	flag := ""
	if wave != "" {
		flag = " --wave " + wave
	}
	approved := ""
	if len(by) > 0 {
		approved = " by " + strings.Join(by, ", ")
	}
	short = fmt.Sprintf("%s awaits approval (%d of %d%s)", GateName(wave), len(by), Required(policy), approved)
	msg = fmt.Sprintf("%s: kubectl kokumi approve %s%s or Approve on the Serving's page, %s", short, g.in.Gates.Serving, flag, WhoApproves)
	if refused != "" {
		part := "; the approval of " + refused + ", who " + RefusedAs(refused, g.in.Gates.PromotedBy, g.in.Preparation) + ", does not count (approval.separateFromPromoter)"
		msg, short = msg+part, short+part
	}
	return label, msg, short
}

// specs returns the verifications of gate w, and the wave their results name.
func (g gateRule) specs(w int) ([]v1.Verification, string) {
	switch {
	case w < 0:
		return g.in.Gates.Verify, ""
	case w < len(g.in.Policy.Waves):
		return g.in.Policy.Waves[w].Verify, g.names[w]
	}
	return nil, ""
}

// healthyUpTo returns the clusters of the waves up to w (every wave when w < 0) that run the
// release healthily, in roll-out order.
func (g gateRule) healthyUpTo(w int) []string {
	var out []string
	for i, ms := range g.byWave {
		if w >= 0 && i > w {
			break
		}
		for _, m := range ms {
			if m.Standing == Healthy {
				out = append(out, m.Name)
			}
		}
	}
	return out
}

// verify returns the verifications of gate w still to pass, with why the roll-out waits for
// them; nil when the gate has none, they all passed, or no cluster runs the release healthily
// in it (there is nothing to verify).
func (g gateRule) verify(results []v1.VerificationResult, w int) (*VerifyStep, string) {
	specs, wave := g.specs(w)
	if len(specs) == 0 || (w >= 0 && !g.anyHealthy(w)) {
		return nil, ""
	}
	var pending []string
	for _, spec := range specs {
		r := FindResult(results, wave, spec.Name)
		switch {
		case r == nil:
			// The step this returns starts it in the same reconcile, so its status says it runs.
			pending = append(pending, fmt.Sprintf("%s 0 of %d passes", spec.Name, max(spec.Count, 1)))
		case r.Phase == v1.VerificationPassed:
		case r.Phase == v1.VerificationFailed:
			pending = append(pending, spec.Name+" failed within the failure budget (abort the roll-out, or promote another Preparation)")
		default:
			pending = append(pending, fmt.Sprintf("%s %d of %d passes", spec.Name, r.Passes, max(spec.Count, 1)))
		}
	}
	if len(pending) == 0 {
		return nil, ""
	}
	step := &VerifyStep{Wave: wave, Specs: specs, Clusters: g.healthyUpTo(w)}
	if Compares(specs) {
		step.Baseline = g.baseline()
	}
	return step, GateName(wave) + " is being verified: " + strings.Join(pending, ", ")
}

// Compares says whether a verification of specs compares the wave with the baseline.
func Compares(specs []v1.Verification) bool {
	for i := range specs {
		if specs[i].PerCluster && specs[i].Compare != "" {
			return true
		}
	}
	return false
}

// baseline returns the clusters that still run what they ran before the roll-out (an
// Application that does not target the release: status.rollout.from), by wave and name.
func (g gateRule) baseline() []string {
	var out []string
	for _, ms := range g.byWave {
		for _, m := range ms {
			if m.Standing == Untouched && m.HasApplication {
				out = append(out, m.Name)
			}
		}
	}
	return out
}

// anyHealthy says whether a cluster of wave w runs the release healthily.
func (g gateRule) anyHealthy(w int) bool {
	if w >= len(g.byWave) {
		return false
	}
	for _, m := range g.byWave[w] {
		if m.Standing == Healthy {
			return true
		}
	}
	return false
}

// evidence is what the record of the waves up to upTo (the Environment's, with its own gates,
// when upTo is the last wave) says of the gates: the verifications passed, the approvals given,
// and verified when each one asked for was, at least one was asked for, and (for the
// Environment) the roll-out is complete.
func (g gateRule) evidence(results []v1.VerificationResult, upTo int, complete bool) Evidence {
	whole := upTo >= len(g.names)-1
	var ev Evidence
	asked, all := false, true
	gatesUpTo := []int{-1}
	for w := 0; w <= upTo && w < len(g.in.Policy.Waves); w++ {
		gatesUpTo = append(gatesUpTo, w)
	}
	for _, w := range gatesUpTo {
		if policy, wave, _ := g.approval(w); policy != nil {
			asked = true
			by, _ := Approvers(policy, g.in.Gates.Approvals, g.in.Preparation, g.attempt, wave, g.in.Gates.promoters())
			for _, b := range by {
				ev.Approvals = append(ev.Approvals, v1.Approval{Preparation: g.in.Preparation, Wave: wave, By: b, Attempt: g.attempt})
			}
			all = all && len(by) >= Required(policy)
		}
		if w < 0 && !whole {
			continue // the Environment's verifications prove the whole Environment only
		}
		specs, wave := g.specs(w)
		if len(specs) == 0 || (w >= 0 && !g.anyHealthy(w)) {
			continue
		}
		asked = true
		for _, spec := range specs {
			r := FindResult(results, wave, spec.Name)
			if r == nil || r.Phase != v1.VerificationPassed {
				all = false
				continue
			}
			ev.Verifications = append(ev.Verifications, *r)
		}
	}
	ev.Verified = asked && all && (!whole || complete)
	return ev
}

// FindResult returns the result of the verification name of wave (empty: the Environment's),
// or nil.
func FindResult(results []v1.VerificationResult, wave, name string) *v1.VerificationResult {
	for i := range results {
		if results[i].Wave == wave && results[i].Name == name {
			return &results[i]
		}
	}
	return nil
}
