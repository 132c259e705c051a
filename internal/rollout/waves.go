package rollout

import (
	"fmt"
	"math"
	"slices"
	"strconv"
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
	// Updating: the Application targets the release, which is not healthy yet, or drifted
	// (fleet.Drifted): it holds its wave back until Argo CD reports it synced and healthy
	// again, and it does not fail the roll-out (what drifted is the cluster, not the release).
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
	// Guard is the Environment's spec.guard: a failed guard stops the roll-out (status.guard).
	Guard *v1.GuardPolicy
}

// Gated says whether the Environment asks for a verification, an approval or a guard of its own.
func (g Gates) Gated() bool { return len(g.Verify) > 0 || g.Approval != nil || g.Guard != nil }

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
// empty) that run now, and the healthy clusters they verify; Baseline, when one of them
// compares, are the clusters still on the release before (status.rollout.from).
type VerifyStep struct {
	Wave     string
	Specs    []v1.Verification
	Clusters []string
	Baseline []string
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
func joinParts(parts ...string) string { return text.JoinNonEmpty(parts...) }

// who names a person in a message: by, or "someone" when the Serving does not say.
func who(by string) string {
	if by == "" {
		return "someone"
	}
	return by
}

// GateAsked says whether the approval of gate w (-1: the Environment's, 0…: the waves') holds a
// roll-out back, given runs[i]: whether a cluster of wave i runs the release already. A gate asks
// only while no cluster of its wave or a later one runs the release (the Environment's and the
// first wave's: while no cluster does): a roll-out already past it, such as a rollback to what
// the clusters run after an abort, goes on without asking.
func GateAsked(w int, runs []bool) bool {
	for i := max(w, 0); i < len(runs); i++ {
		if runs[i] {
			return false
		}
	}
	return true
}

// touchedWaves says, of each wave, whether a cluster of it runs the release (touched).
func touchedWaves(byWave [][]*Member) []bool {
	out := make([]bool, len(byWave))
	for i, ms := range byWave {
		out[i] = touched(ms)
	}
	return out
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
