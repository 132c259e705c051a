package rollout

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// This file holds the rule of a roll-out in waves (an Environment's spec.rollout): which wave
// a cluster belongs to, which waves are reached, which clusters may be updated now, when the
// roll-out halts or rolls back, and what the Serving says of it. The reconciler reads the
// Applications and writes what the plan says; the decisions and their messages live here.

// Standing is where one cluster stands in a roll-out, as its Application shows it.
type Standing int

// Standings.
const (
	// Untouched: the cluster's Application does not target the release rolled out (or there is
	// none): it runs what it ran.
	Untouched Standing = iota
	// Held: Kokumi does not deploy to the cluster (ClusterNotReady and the other held
	// reasons): it neither counts as a failure nor blocks its wave.
	Held
	// Healthy: the Application targets the release and Argo CD reports it synced and healthy.
	Healthy
	// Updating: the Application targets the release, which is not healthy yet.
	Updating
	// Failed: the Application targets the release, which failed (Degraded, an Argo CD error,
	// past the progress deadline).
	Failed
)

// Member is one cluster of the roll-out.
type Member struct {
	// Name of the Cluster.
	Name string
	// Wave is the index of its wave (WaveOf).
	Wave int
	// Standing is where it stands; Reason says why it failed.
	Standing Standing
	Reason   string
	// HasApplication is true when the Serving has an Application for it.
	HasApplication bool
}

// WaveOf returns the index of the wave a cluster of these labels belongs to: the first wave
// whose selector matches, else len(policy.Waves), the implicit last wave. A selector that does
// not parse matches nothing (the API server's validation keeps such selectors out).
func WaveOf(policy *v1.RolloutPolicy, clusterLabels map[string]string) int {
	for i, w := range policy.Waves {
		if w.ClusterSelector == nil {
			return i
		}
		sel, err := metav1.LabelSelectorAsSelector(w.ClusterSelector)
		if err == nil && sel.Matches(labels.Set(clusterLabels)) {
			return i
		}
	}
	return len(policy.Waves)
}

// Input is what a roll-out's plan is decided from.
type Input struct {
	// Policy is the Environment's spec.rollout.
	Policy *v1.RolloutPolicy
	// Preparation is the Preparation rolled out; From the one the clusters not reached run,
	// used when Previous does not roll out Preparation.
	Preparation, From string
	// Previous is the roll-out the last status says; nil when there is none.
	Previous *v1.RolloutStatus
	// Control is what a person asks of the roll-out (the Serving's spec.rollout); nil asks
	// nothing.
	Control *v1.RolloutControl
	// Pace is the slower pace the Order asks for (its spec.rolloutPace); nil asks none.
	Pace *v1.RolloutPace
	// Members are the Environment's clusters.
	Members []Member
	// Now is the reconciler's clock.
	Now time.Time
	// RollbackTo finds the Preparation a roll-out past its budget, or aborted, goes back to:
	// its name, or empty with why there is none; with a name, why may say which newer
	// candidates it passed over and why (their evidence no longer verifies). Called only when
	// one goes back.
	RollbackTo func() (name, why string)
	// Gates are the Environment's own verifications and approval, and the approvals the
	// Serving holds.
	Gates Gates
	// Generation is the Serving's metadata.generation: a roll-out that starts now is the attempt
	// of that number (status.rollout.attempt).
	Generation int64
}

// Gates are what the gates of a roll-out are decided from, beside the waves' own (the
// policy's waves[].verify and waves[].approval).
type Gates struct {
	// Verify and Approval are the Environment's spec.verify and spec.approval.
	Verify   []v1.Verification
	Approval *v1.ApprovalPolicy
	// Approvals and PromotedBy are the Serving's spec.approvals and spec.promotedBy.
	Approvals  []v1.Approval
	PromotedBy string
	// Authors wrote the specs the Preparation was rendered from (preparation.Authors).
	Authors []string
	// Serving names the Serving in messages that say how to approve.
	Serving string
}

// Gated says whether the Environment asks for a verification or an approval of its own.
func (g Gates) Gated() bool { return len(g.Verify) > 0 || g.Approval != nil }

// Course is what the roll-out in waves does now (Decide).
type Course struct {
	// Status is the Serving's status.rollout.
	Status v1.RolloutStatus
	// Waiting are the clusters whose Applications stay as they are, with why (the message of
	// their Waiting target).
	Waiting map[string]string
	// Joiners are the clusters without an Application in a wave not reached yet: they get
	// Status.From.
	Joiners []string
	// Ready, when set, is the Serving's Ready condition instead of what the clusters fold
	// into: the roll-out halted, rolled back or was aborted.
	Ready *metav1.Condition
	// RecheckAfter is when a soak ends or a window opens; 0 when nothing is awaited.
	RecheckAfter time.Duration
	// Passed are the waves the roll-out went past (PassedWaves), each with the clusters of it
	// and of the waves before it that run the release healthily: a deployment record of each.
	Passed []PassedWave
	// Verify, when set, are the verifications to run now (the runner steps them and writes
	// their results into Status.Verifications).
	Verify *VerifyStep
	// Evidence is what the Environment's deployment record says of the gates.
	Evidence Evidence
}

// PassedWave is a wave a roll-out went past, and the clusters up to it that ran the release
// healthily, sorted; Evidence is what its record says of the gates up to it.
type PassedWave struct {
	Name     string
	Healthy  []string
	Evidence Evidence
}

// VerifyStep is the verifications of one gate (a wave's, or the Environment's when Wave is
// empty) that run now, and the healthy clusters they verify.
type VerifyStep struct {
	Wave     string
	Specs    []v1.Verification
	Clusters []string
}

// Evidence is what a deployment record says of the gates: the verifications that passed and
// the approvals given, and whether every one asked for was (and at least one was asked for).
type Evidence struct {
	Verified      bool
	Verifications []v1.VerificationResult
	Approvals     []v1.Approval
}

// waveNames returns the names of the waves, the implicit last one included.
func waveNames(p *v1.RolloutPolicy) []string {
	out := make([]string, 0, len(p.Waves)+1)
	for _, w := range p.Waves {
		out = append(out, w.Name)
	}
	return append(out, v1.UnselectedWave)
}

// MaxUnavailable returns how many of selected clusters of a wave may be not healthy at once:
// a percent is rounded up, and at least one is always allowed; absent allows all.
func MaxUnavailable(w *intstr.IntOrString, selected int) int {
	if w == nil {
		return max(selected, 1)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(w, selected, true)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// AllAtOnceWave names the one wave of a Serving whose Environment has no roll-out policy, while a
// person pauses or aborts its roll-out (Effective).
const AllAtOnceWave = "all"

// Effective returns the policy a Serving's roll-out of preparation follows: the Environment's;
// without one, while the Serving's spec.rollout pauses or aborts it, the Order's pace slows it,
// or the Environment has gates of its own (gated), one wave of every cluster
// that no failure halts (so that a person can pause or abort a release that rolls out all at
// once, as the spec deploys it); else nil, every cluster at once.
func Effective(policy *v1.RolloutPolicy, control *v1.RolloutControl, pace *v1.RolloutPace, preparation string, gated bool) *v1.RolloutPolicy {
	if policy != nil {
		return policy
	}
	paced := pace != nil && pace.MaxUnavailable != nil
	if !paced && !gated && (control == nil || (!control.Paused && control.Abort != preparation)) {
		return nil
	}
	return &v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: AllAtOnceWave}}, FailureBudget: math.MaxInt32, OnFailure: v1.RolloutHalt}
}

// waveSoak is how long wave w soaks: its own soak, or the Order's minSoak when longer.
func waveSoak(p *v1.RolloutPolicy, pace *v1.RolloutPace, w int) time.Duration {
	soak := time.Duration(0)
	if w < len(p.Waves) && p.Waves[w].Soak != nil {
		soak = p.Waves[w].Soak.Duration
	}
	if pace != nil && pace.MinSoak != nil && pace.MinSoak.Duration > soak && w < len(p.Waves) && p.Waves[w].Name != AllAtOnceWave {
		soak = pace.MinSoak.Duration
	}
	return soak
}

// waveMaxUnavailable is how many of active clusters of wave w may be not healthy at once: the
// smaller of the wave's maxUnavailable and the Order's.
func waveMaxUnavailable(p *v1.RolloutPolicy, pace *v1.RolloutPace, w, active int) int {
	var limit *intstr.IntOrString
	if w < len(p.Waves) {
		limit = p.Waves[w].MaxUnavailable
	}
	n := MaxUnavailable(limit, active)
	if pace != nil && pace.MaxUnavailable != nil {
		n = min(n, MaxUnavailable(pace.MaxUnavailable, active))
	}
	return n
}

// Stopped says whether a roll-out in this state changes no further cluster on its own: it
// halted, rolled back or was aborted.
func Stopped(state v1.RolloutState) bool {
	return state == v1.RolloutHalted || state == v1.RolloutRolledBack || state == v1.RolloutAborted
}

// AcrossStop is what a roll-out's status keeps while a Stop verdict (gate.Verdict.Stop: no
// Cluster selected, the project gone, ...) deletes the Serving's Applications: a roll-out that
// halted, rolled back or was aborted is remembered as it stood, its counts cleared, so that when
// the Stop clears its Preparation does not roll out again from the first wave unless someone
// promotes it anew; any other is forgotten (it starts again from its first wave).
func AcrossStop(st *v1.RolloutStatus) *v1.RolloutStatus {
	if st == nil || !Stopped(st.State) {
		return nil
	}
	kept := st.DeepCopy()
	kept.Waves, kept.NextWindow, kept.Awaiting = nil, nil, ""
	return kept
}

// GoesBack says whether the clusters a roll-out in this status changed go back to
// status.rollbackTo.
func GoesBack(st *v1.RolloutStatus) bool {
	return st != nil && st.RollbackTo != "" && (st.State == v1.RolloutRolledBack || st.State == v1.RolloutAborted)
}

// Decide plans the roll-out in named steps, each a method of one round (as Argo CD's
// applicationset progressivesync steps its waves): control (the last status and what a person
// asks), windows, gates (those before the first wave), budget (an abort, or failures past the
// failure budget, stop the roll-out), rollback (a stopped roll-out goes back, when it may),
// advance (the waves healthy, soaked and let through by their gates), admit (which clusters of
// the waves reached change now, as maxUnavailable allows) and conclude (Ready, the waves passed,
// the evidence). The failure budget comes before the advance: a roll-out it stops advances no
// further.
func Decide(in Input) Course {
	r := newRound(in)
	r.stepControl()
	r.stepWindows()
	r.stepGates()
	r.stepBudget()
	r.stepRollback()
	r.stepAdvance()
	r.stepAdmit()
	return r.conclude()
}

// stopping is how the budget step stops a roll-out, for the rollback step.
type stopping int

const (
	notStopping stopping = iota
	// aborting: a person aborts the roll-out.
	aborting
	// halting: its failures are past the failure budget.
	halting
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
	// waitsFor says why the next wave does not start, when a gate holds it.
	waitsFor string
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
// it (and no cluster runs the release yet).
func (r *round) stepGates() {
	if r.st.Wave != "" || (!r.open && !touchedAny(r.byWave)) {
		return
	}
	// The Environment's approval, and the first wave's, come before the first cluster.
	gate, msg := r.gates.awaiting(-1)
	if gate == "" {
		gate, msg = r.gates.awaiting(0)
	}
	if gate == "" || touchedAny(r.byWave) {
		r.current, r.st.Wave = 0, r.names[0]
	} else if !Stopped(r.st.State) {
		r.st.Awaiting, r.waitsFor = gate, msg
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
		st.Message = text.Truncate(joinParts(r.waitsFor, r.held), 1024)
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
	if gate, msg := r.gates.awaiting(current + 1); gate != "" {
		st.Awaiting, r.waitsFor = gate, msg
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

// implicit says whether the policy is the one wave Effective gives a Serving whose Environment
// has no roll-out policy.
func implicit(p *v1.RolloutPolicy) bool {
	return len(p.Waves) == 1 && p.Waves[0].Name == AllAtOnceWave
}

// otherPerson names who did what another person undoes (", which alice paused"), or nothing
// when it was the same person or nobody is named.
func otherPerson(did, was, by string) string {
	if was == "" || was == by {
		return ""
	}
	return ", which " + was + " " + did
}

// passedOver is what a rollback's message adds of the newer candidates it went past.
func passedOver(why string) string {
	if why == "" {
		return ""
	}
	return " whose evidence verifies; passed over " + why
}

// joinParts joins the non-empty parts of a message with "; ".
func joinParts(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}

// who names a person in a message: by, or "someone" when the Serving does not say.
func who(by string) string {
	if by == "" {
		return "someone"
	}
	return by
}

// touchedAny says whether a cluster of any wave runs the release.
func touchedAny(byWave [][]*Member) bool {
	for _, ms := range byWave {
		if touched(ms) {
			return true
		}
	}
	return false
}

// touched says whether a cluster of the wave runs the release, healthy or not.
func touched(ms []*Member) bool {
	for _, m := range ms {
		if m.Standing == Healthy || m.Standing == Updating || m.Standing == Failed {
			return true
		}
	}
	return false
}

// waveHealthy says whether every cluster of a wave that is not held runs the release healthily,
// and how many are not held.
func waveHealthy(ms []*Member) (healthy bool, members int) {
	for _, m := range ms {
		switch m.Standing {
		case Held:
			continue
		case Healthy:
		default:
			return false, 0
		}
		members++
	}
	return true, members
}

func soakPart(soak time.Duration) string {
	if soak > 0 {
		return " and soak " + soak.String()
	}
	return ""
}

// RolledBackWaiting is the message of a cluster a rolled-back roll-out leaves as it is: one it
// never changed.
func RolledBackWaiting(preparation string) string {
	return "the roll-out of Preparation " + preparation + " was rolled back: this cluster, which it did not change, is left as it is"
}

// Note is what the Serving's Ready message adds while the roll-out progresses or is paused:
// the current wave, since when it soaks, and what holds it back.
func (p *Course) Note() string {
	st := p.Status
	if st.State != v1.RolloutProgressing && st.State != v1.RolloutPaused {
		return ""
	}
	note := "; roll-out not started"
	if st.Wave != "" {
		at := 0
		for i, w := range st.Waves {
			if w.Name == st.Wave {
				at = i
			}
		}
		note = fmt.Sprintf("; roll-out at wave %s (%d of %d)", st.Wave, at+1, len(st.Waves))
	}
	if st.WaveHealthySince != nil {
		note += ", healthy and soaking since " + st.WaveHealthySince.UTC().Format(time.RFC3339)
	}
	if st.Message != "" {
		note += "; " + st.Message
	}
	return note
}

// Transition is a change of a roll-out worth an Event, and a notification to the Environment's
// webhooks: its reason (one of v1.NotificationEvent's values), message and whether it warns.
// Message is Kokumi's own words; Output, of a VerificationFailed, is what the check printed (a
// Job's last words, the start of an HTTP answer), which the tenant's program controls: cleaned
// by text.Untrusted, and always shown apart, marked as the check's output.
type Transition struct {
	Reason  v1.NotificationEvent
	Message string
	Warning bool
	Output  string
}

// Transitions returns the changes of a roll-out from previous to next worth an Event, in the
// order they happened: a person paused, resumed or aborted it (by is the Serving's
// spec.rollout.by), a person approved a gate, a wave started, a verification failed, a gate awaits approval, the
// roll-out halted, rolled back or completed.
func Transitions(previous *v1.RolloutStatus, next *v1.RolloutStatus, by string) []Transition {
	if next == nil {
		return nil
	}
	was := &v1.RolloutStatus{}
	if previous != nil && previous.Preparation == next.Preparation {
		was = previous
	}
	var out []Transition
	add := func(reason v1.NotificationEvent, warning bool, message string) {
		out = append(out, Transition{Reason: reason, Message: message, Warning: warning})
	}
	switch {
	case next.State == v1.RolloutPaused && was.State != v1.RolloutPaused:
		add("RolloutPaused", false, next.Message)
	case was.State == v1.RolloutPaused && (next.State == v1.RolloutProgressing || next.State == v1.RolloutComplete):
		add("RolloutResumed", false, who(by)+" resumed the roll-out of Preparation "+next.Preparation+otherPerson("paused", was.By, by))
	case was.State == v1.RolloutAborted && next.State == v1.RolloutProgressing:
		add("RolloutResumed", false, who(by)+" cleared the abort of the roll-out of Preparation "+next.Preparation+otherPerson("aborted", was.By, by)+
			": it starts again from its first wave, as attempt "+strconv.FormatInt(next.Attempt, 10))
	}
	for _, a := range next.Approvals {
		if !slices.Contains(was.Approvals, a) {
			add("Approved", false, a.By+" approved "+GateName(a.Wave)+" of Preparation "+next.Preparation)
		}
	}
	if next.Wave != "" && next.Wave != was.Wave && next.Wave != AllAtOnceWave && !Stopped(next.State) {
		add("WaveStarted", false, "the roll-out of Preparation "+next.Preparation+" started wave "+next.Wave)
	}
	for _, v := range next.Verifications {
		if v.Phase != v1.VerificationFailed {
			continue
		}
		if p := FindResult(was.Verifications, v.Wave, v.Name); p != nil && p.Phase == v1.VerificationFailed {
			continue
		}
		add("VerificationFailed", true, text.Truncate(fmt.Sprintf("verification %s of %s failed for Preparation %s", v.Name, GateName(v.Wave), next.Preparation), text.MaxMessage))
		out[len(out)-1].Output = text.Untrusted(v.Message)
	}
	if next.Awaiting != "" && next.Awaiting != was.Awaiting {
		add("AwaitingApproval", false, next.Message)
	}
	if next.State != was.State {
		switch next.State {
		case v1.RolloutAborted:
			add(v1.ReasonRolloutAborted, true, next.Message)
		case v1.RolloutHalted:
			add(v1.ReasonRolloutHalted, true, next.Message)
		case v1.RolloutRolledBack:
			add(v1.ReasonRolledBack, true, next.Message)
		case v1.RolloutComplete:
			if previous != nil && previous.Preparation == next.Preparation {
				add("RolloutComplete", false, "the roll-out of Preparation "+next.Preparation+" is complete")
			}
		}
	}
	return out
}

func pacePart(pace *v1.RolloutPace) string {
	if pace != nil && pace.MaxUnavailable != nil {
		return " (the Environment's, or the Order's rolloutPace.maxUnavailable of " + pace.MaxUnavailable.String() + ")"
	}
	return ""
}

// PassedWaves returns the waves a roll-out of preparation in this status rolled out past
// (healthy, and soaked as each says), in order, while it goes on or completed: those a stage
// requiring one of them (StageRequirement.Wave) may count. The implicit last wave is never one
// (the whole Environment's record proves it), nor is the one wave of a Serving without a policy.
func PassedWaves(st *v1.RolloutStatus, preparation string) []string {
	if st == nil || st.Preparation != preparation || Stopped(st.State) {
		return nil
	}
	var out []string
	for _, w := range st.Waves {
		if (w.Name == st.Wave && st.State != v1.RolloutComplete) || w.Name == v1.UnselectedWave || w.Name == AllAtOnceWave {
			break
		}
		out = append(out, w.Name)
	}
	return out
}
