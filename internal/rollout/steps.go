package rollout

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// This file holds the named steps of Decide, each a method of one round.

// stopping is how the budget step stops a roll-out, for the rollback step.
type stopping int

const (
	notStopping stopping = iota
	// aborting: a person aborts the roll-out.
	aborting
	// halting: its failures are past the failure budget.
	halting
	// guarding: the Environment's guard failed after the release was Deployed.
	guarding
)

// round is one decision of a roll-out, as its steps build it.
type round struct {
	in     Input
	names  []string
	byWave [][]*Member
	// ctl is what a person asks (Input.Control); aborted says it aborts this Preparation.
	ctl     v1.RolloutControl
	aborted bool
	st      v1.RolloutStatus
	gates   gateRule
	// open says whether a roll-out window is open; held why the windows hold the roll-out
	// back, or "" when they do not.
	open bool
	held string
	// current is the index of the wave reached, -1 before the first.
	current int
	// waitsFor says why the next wave does not start, when a gate holds it, as each cluster
	// it holds says it; approveHow, when it waits for approvals, as the roll-out's message says
	// it: with who may approve, once.
	waitsFor   string
	approveHow string
	// stop, failed, at and budgetPart are what the budget step tells the rollback step.
	stop       stopping
	failed     []string
	at         string
	budgetPart string
	plan       Course
}

// newRound groups the members of in by wave, each wave by name.
func newRound(in Input) *round {
	r := &round{in: in, names: waveNames(in.Policy), current: -1, plan: Course{Waiting: map[string]string{}}}
	r.byWave = make([][]*Member, len(r.names))
	for i := range r.in.Members {
		m := &r.in.Members[i]
		w := min(max(m.Wave, 0), len(r.names)-1)
		r.byWave[w] = append(r.byWave[w], m)
	}
	for _, ms := range r.byWave {
		sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	}
	return r
}

// stepControl starts from the last status of this Preparation's roll-out (or a fresh one), and
// applies what a person asks: a cleared abort starts again from the first wave, a resume goes
// on.
func (r *round) stepControl() {
	in := &r.in
	if in.Control != nil {
		r.ctl = *in.Control
	}
	r.aborted = r.ctl.Abort != "" && r.ctl.Abort == in.Preparation
	fresh := v1.RolloutStatus{Preparation: in.Preparation, From: in.From, State: v1.RolloutProgressing, Attempt: in.Generation}
	st := fresh
	if p := in.Previous; p != nil && p.Preparation == in.Preparation {
		st = *p.DeepCopy()
		st.Waves, st.NextWindow = nil, nil
	}
	if st.State == v1.RolloutAborted && !r.aborted {
		// The abort was cleared: the roll-out starts again from its first wave.
		st = fresh
		st.From = in.Previous.From
	}
	if st.State == v1.RolloutPaused && !r.ctl.Paused {
		st.State, st.By, st.Message = v1.RolloutProgressing, "", ""
	}
	st.Awaiting, st.Authors = "", in.Gates.Authors
	r.st = st
	r.gates = gateRule{in: &r.in, names: r.names, byWave: r.byWave, attempt: st.Attempt}
	for i, n := range r.names {
		if n == st.Wave {
			r.current = i
		}
	}
}

// stepWindows says whether a roll-out window is open and, when none is, why the windows hold
// the roll-out back and when the next opens.
func (r *round) stepWindows() {
	windows, err := ParseWindows(r.in.Policy.Windows)
	if r.open = err == nil && windows.Open(r.in.Now); r.open {
		return
	}
	if err != nil {
		r.held = "no wave starts: " + err.Error()
		return
	}
	next, _ := windows.NextOpen(r.in.Now)
	if next.IsZero() {
		r.held = "no roll-out window opens within a year"
		return
	}
	r.held = "outside the roll-out windows: the next opens at " + next.UTC().Format(time.RFC3339)
	r.st.NextWindow = &metav1.Time{Time: next}
	r.plan.RecheckAfter = next.Sub(r.in.Now)
}

// stepGates starts the first wave, unless the Environment's approval or the first wave's holds
// it (GateAsked: no cluster runs the release yet).
func (r *round) stepGates() {
	if r.st.Wave != "" || (!r.open && !touchedAny(r.byWave)) {
		return
	}
	// The Environment's approval, and the first wave's, come before the first cluster.
	gate, msg, short := r.gates.awaiting(-1)
	if gate == "" {
		gate, msg, short = r.gates.awaiting(0)
	}
	if gate == "" || !GateAsked(0, touchedWaves(r.byWave)) {
		r.current, r.st.Wave = 0, r.names[0]
	} else if !Stopped(r.st.State) {
		r.st.Awaiting, r.waitsFor, r.approveHow = gate, short, msg
	}
}

// stepBudget stops the roll-out a person aborts, or whose failed clusters and verifications are
// past the failure budget, and pauses the one a person pauses.
func (r *round) stepBudget() {
	in, st := &r.in, &r.st
	for _, m := range in.Members {
		if m.Standing == Failed {
			r.failed = append(r.failed, m.Name+" ("+m.Reason+")")
		}
	}
	sort.Strings(r.failed)
	failedChecks := 0
	for _, v := range st.Verifications {
		if v.Phase == v1.VerificationFailed {
			r.failed = append(r.failed, "verification "+v.Name+" of "+GateName(v.Wave))
			failedChecks++
		}
	}
	// Without a policy of its own (the one implicit wave), no failed cluster stops a roll-out,
	// as the spec deploys it; a failed verification does.
	past := len(r.failed) > int(in.Policy.FailureBudget) || (implicit(in.Policy) && failedChecks > 0)
	r.budgetPart = fmt.Sprintf(", past the failure budget of %d", in.Policy.FailureBudget)
	if implicit(in.Policy) {
		r.budgetPart = ""
	}
	switch {
	case r.aborted && !Stopped(st.State) || r.aborted && st.State == v1.RolloutHalted:
		st.State, st.By, st.RollbackTo = v1.RolloutAborted, r.ctl.By, ""
		r.stop = aborting
	case guardFailed(st) && !Stopped(st.State):
		st.State, st.By = v1.RolloutHalted, ""
		r.stop = guarding
	case (st.State == v1.RolloutProgressing || st.State == v1.RolloutPaused) && past:
		r.at = st.Wave
		if r.at == "" {
			r.at = r.names[0]
		}
		st.State, st.By = v1.RolloutHalted, ""
		r.stop = halting
	case st.State == v1.RolloutProgressing && r.ctl.Paused:
		st.State = v1.RolloutPaused
	}
	if st.State == v1.RolloutPaused {
		st.By = r.ctl.By
	}
}

// stepRollback says what a roll-out the budget step stopped does: an aborted one goes back to
// the Preparation RollbackTo finds, when there is one; a halted one does when its policy rolls
// back on failure.
func (r *round) stepRollback() {
	in, st := &r.in, &r.st
	switch r.stop {
	case notStopping:
		return
	case aborting:
		if to, why := r.goBack(); to != "" {
			st.RollbackTo = to
			st.Message = fmt.Sprintf("%s aborted the roll-out of Preparation %s: every cluster it changed goes back to Preparation %s, the last with a deployment record in the Environment",
				who(r.ctl.By), in.Preparation, to) + passedOver(why)
		} else {
			st.Message = fmt.Sprintf("%s aborted the roll-out of Preparation %s: no further cluster is changed; it cannot roll back: %s", who(r.ctl.By), in.Preparation, why)
		}
	case halting:
		st.Message = fmt.Sprintf("the roll-out of Preparation %s halted in wave %s: it failed on %s%s; no further cluster is changed",
			in.Preparation, r.at, text.Names(r.failed), r.budgetPart)
		if in.Policy.OnFailure == v1.RolloutRollback {
			if to, why := r.goBack(); to != "" {
				st.State, st.RollbackTo = v1.RolloutRolledBack, to
				st.Message = fmt.Sprintf("the roll-out of Preparation %s failed in wave %s on %s%s: every cluster it changed goes back to Preparation %s, the last with a deployment record in the Environment",
					in.Preparation, r.at, text.Names(r.failed), r.budgetPart, to) + passedOver(why)
			} else {
				st.Message += "; it cannot roll back: " + why
			}
		}
	case guarding:
		st.Message = guardMessage(in.Preparation, st.Guard) + "; no cluster is changed"
		if g := in.Gates.Guard; g != nil && g.OnFailure == v1.RolloutRollback {
			if to, why := r.goBack(); to != "" {
				st.State, st.RollbackTo = v1.RolloutRolledBack, to
				st.Message = guardMessage(in.Preparation, st.Guard) +
					fmt.Sprintf(": every cluster goes back to Preparation %s, the last with a deployment record in the Environment that is not revoked", to) + passedOver(why)
			} else {
				st.Message += "; it cannot roll back: " + why
			}
		}
	}
	st.Message = text.Truncate(st.Message, 1024)
}

// goBack finds the Preparation a stopped roll-out goes back to, or why there is none.
func (r *round) goBack() (string, string) {
	if r.in.RollbackTo == nil {
		return "", "no Preparation to go back to is known"
	}
	return r.in.RollbackTo()
}

// stepAdvance moves a roll-out that goes on through its waves: to the last wave some of whose
// clusters run the release, then past each wave that is healthy, soaked and verified and whose
// next gate lets it through, while a window is open and nobody paused it. It then says where
// the roll-out stands.
func (r *round) stepAdvance() {
	st := &r.st
	if st.State == v1.RolloutProgressing || st.State == v1.RolloutPaused {
		// A wave some of whose clusters run the release was reached, whatever the status says:
		// a status write lost after the Applications' is no step back.
		for w := len(r.names) - 1; w > r.current; w-- {
			if touched(r.byWave[w]) {
				r.current, st.WaveHealthySince = w, nil
				st.Wave = r.names[w]
				break
			}
		}
		for r.current >= 0 && r.pass() {
			r.current++
			st.Wave, st.WaveHealthySince = r.names[r.current], nil
		}
	}
	switch st.State {
	case v1.RolloutPaused:
		msg := who(st.By) + " paused the roll-out of Preparation " + r.in.Preparation + ": no further cluster is changed until it is resumed"
		if r.held != "" {
			msg += "; " + r.held
		}
		st.Message = text.Truncate(msg, 1024)
	case v1.RolloutProgressing:
		waits := r.waitsFor
		if r.approveHow != "" {
			waits = r.approveHow
		}
		st.Message = text.Truncate(joinParts(waits, r.held), 1024)
	}
	if r.held == "" || Stopped(st.State) || st.State == v1.RolloutComplete {
		st.NextWindow = nil
		if r.held != "" {
			r.plan.RecheckAfter = 0
		}
	}
}

// pass says whether the roll-out goes past the current wave now: it is healthy, soaked and
// verified, the next wave's gate lets it through, and nothing holds it. The last wave, passed,
// completes the roll-out.
func (r *round) pass() bool {
	in, st, plan, current := &r.in, &r.st, &r.plan, r.current
	healthy, members := waveHealthy(r.byWave[current])
	if !healthy {
		st.WaveHealthySince = nil
		return false
	}
	if current == len(r.names)-1 {
		// The Environment's own verifications, once every wave is healthy.
		if step, msg := r.gates.verify(st.Verifications, -1); step != nil {
			plan.Verify, r.waitsFor = step, msg
			return false
		}
		st.State, st.By, st.Message = v1.RolloutComplete, "", ""
		return false
	}
	// The wave's verifications run while it soaks.
	step, verifying := r.gates.verify(st.Verifications, current)
	plan.Verify = step
	soak := time.Duration(0)
	if members > 0 {
		soak = waveSoak(in.Policy, in.Pace, current)
	}
	if st.WaveHealthySince == nil || st.WaveHealthySince.After(in.Now) {
		// A time ahead of the clock (another replica's, skewed) is not believed.
		st.WaveHealthySince = &metav1.Time{Time: in.Now.Truncate(time.Second)}
	}
	if left := st.WaveHealthySince.Add(soak).Sub(in.Now); left > 0 {
		if plan.RecheckAfter == 0 || left < plan.RecheckAfter {
			plan.RecheckAfter = left
		}
		r.waitsFor = verifying
		return false
	}
	if step != nil {
		r.waitsFor = verifying
		return false
	}
	if gate, msg, short := r.gates.awaiting(current + 1); gate != "" {
		st.Awaiting, r.waitsFor, r.approveHow = gate, short, msg
		return false
	}
	// The next wave starts once resumed, or once a window opens.
	return st.State != v1.RolloutPaused && r.open
}

// stepAdmit counts each wave's clusters, and says which clusters the roll-out does not change
// now, and why: those of a stopped or frozen roll-out, those past their wave's maxUnavailable,
// and those of the waves not reached yet (or they join, with the Preparation those waves run).
func (r *round) stepAdmit() {
	st := &r.st
	// frozen: no cluster of a reached wave is changed (paused, or the windows closed on a
	// policy that pauses then).
	frozen := st.State == v1.RolloutPaused || (r.held != "" && r.in.Policy.OnWindowClose == v1.WindowClosePause)
	for w, ms := range r.byWave {
		count := v1.WaveCount{Name: r.names[w], Selected: int32(len(ms))}
		allowed := 0
		if r.reached(w) && !Stopped(st.State) && !frozen {
			allowed = r.unavailableAllowed(w)
		}
		for _, m := range ms {
			switch m.Standing {
			case Held:
			case Healthy:
				count.Healthy++
			case Updating:
				count.Progressing++
			case Failed:
				count.Failed++
			case Untouched:
				if r.admit(w, m, frozen, &allowed) {
					count.Progressing++
				} else {
					count.Waiting++
				}
			}
		}
		st.Waves = append(st.Waves, count)
	}
}

// reached says whether the roll-out reached wave w.
func (r *round) reached(w int) bool { return w <= r.current || r.st.State == v1.RolloutComplete }

// unavailableAllowed is how many more clusters of wave w may be updated now: its
// maxUnavailable, less those updating or failed.
func (r *round) unavailableAllowed(w int) int {
	unavailable, active := 0, 0
	for _, m := range r.byWave[w] {
		if m.Standing != Held {
			active++
		}
		if m.Standing == Updating || m.Standing == Failed {
			unavailable++
		}
	}
	return waveMaxUnavailable(r.in.Policy, r.in.Pace, w, active) - unavailable
}

// admit says whether the untouched cluster m of wave w is updated now (taking one of allowed);
// when it is not, it waits (Waiting says why) or joins with what its wave runs (Joiners).
func (r *round) admit(w int, m *Member, frozen bool, allowed *int) bool {
	st, plan, names := &r.st, &r.plan, r.names
	switch {
	case st.State == v1.RolloutHalted || (st.State == v1.RolloutAborted && st.RollbackTo == ""):
		plan.Waiting[m.Name] = "the roll-out of Preparation " + r.in.Preparation + " " + strings.ToLower(string(st.State)) + ": this cluster is not changed"
	case GoesBack(st):
		// The reconciler deploys the rollback to the clusters the roll-out changed.
	case r.reached(w) && st.State == v1.RolloutPaused:
		plan.Waiting[m.Name] = "the roll-out is paused: this cluster is not changed until it is resumed"
	case r.reached(w) && frozen:
		plan.Waiting[m.Name] = "the roll-out waits for a window: " + r.held
	case r.reached(w) && *allowed > 0:
		*allowed--
		return true
	case r.reached(w):
		plan.Waiting[m.Name] = fmt.Sprintf("wave %s has as many clusters updating as its maxUnavailable allows%s", names[w], pacePart(r.in.Pace))
	case !m.HasApplication && st.From != "":
		plan.Joiners = append(plan.Joiners, m.Name)
	case r.current < 0:
		plan.Waiting[m.Name] = fmt.Sprintf("wave %s waits for the roll-out to start: %s", names[w], joinParts(r.waitsFor, r.held))
	case r.waitsFor != "" && w == r.current+1:
		plan.Waiting[m.Name] = fmt.Sprintf("wave %s waits: %s", names[w], r.waitsFor)
	case r.held != "" && w == r.current+1:
		plan.Waiting[m.Name] = fmt.Sprintf("wave %s waits for a roll-out window: %s", names[w], r.held)
	default:
		plan.Waiting[m.Name] = fmt.Sprintf("wave %s waits for wave %s to be healthy%s", names[w], names[r.current], soakPart(waveSoak(r.in.Policy, r.in.Pace, r.current)))
	}
	return false
}

// conclude says the Serving's Ready when the roll-out stopped, the waves it passed with their
// healthy clusters and evidence (a deployment record of each), and the Environment's evidence.
func (r *round) conclude() Course {
	st, plan := r.st, &r.plan
	switch st.State {
	case v1.RolloutHalted:
		plan.Ready = &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonRolloutHalted, Message: st.Message}
	case v1.RolloutRolledBack:
		plan.Ready = &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonRolledBack, Message: st.Message}
	case v1.RolloutAborted:
		plan.Ready = &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonRolloutAborted, Message: st.Message}
	}
	plan.Status = st
	last := -1 // the last wave with clusters: its record would be the Environment's
	for w, ms := range r.byWave {
		if len(ms) > 0 {
			last = w
		}
	}
	var healthy []string
	for w, name := range PassedWaves(&st, r.in.Preparation) {
		if w >= last {
			break
		}
		for _, m := range r.byWave[w] {
			if m.Standing == Healthy {
				healthy = append(healthy, m.Name)
			}
		}
		if len(healthy) > 0 {
			plan.Passed = append(plan.Passed, PassedWave{Name: name, Healthy: slices.Sorted(slices.Values(healthy)),
				Evidence: r.gates.evidence(st.Verifications, w, false)})
		}
	}
	plan.Evidence = r.gates.evidence(st.Verifications, len(r.names)-1, st.State == v1.RolloutComplete)
	plan.Status.Approvals = plan.Evidence.Approvals
	return *plan
}
