package rollout

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// This file holds the preview of a roll-out: what an Environment's policy does with its
// clusters if a Preparation is promoted now, before anything is promoted. The API, the UI and
// the plugin show it as it is decided here.

// PreviewNames is how many cluster names a wave of a preview lists; the rest are counted.
const PreviewNames = 10

// PreviewCluster is one cluster of an Environment, as a preview needs it.
type PreviewCluster struct {
	// Name of the Cluster.
	Name string
	// Labels of the Cluster, which the waves' selectors match.
	Labels map[string]string
	// Ready is the Cluster's Ready condition: a cluster that is not Ready is held.
	Ready bool
}

// PlanPreview is what a roll-out would do if a Preparation were promoted now. It stays small
// whatever the number of clusters: each wave lists its first names and counts the rest.
type PlanPreview struct {
	// AllAtOnce is true when the Environment has no roll-out policy: every cluster at once.
	AllAtOnce bool `json:"allAtOnce"`
	// Clusters is how many clusters the Environment selects.
	Clusters int `json:"clusters"`
	// Waves in the order they roll out; without a policy, one wave of every cluster. The
	// implicit last wave, unselected, is listed when it has clusters.
	Waves []WavePreview `json:"waves"`
	// FailureBudget and OnFailure are the policy's (OnFailure defaulted to Halt); empty
	// without a policy.
	FailureBudget int32  `json:"failureBudget"`
	OnFailure     string `json:"onFailure,omitempty"`
	// Windows says whether a wave may start now; nil when the policy has no windows.
	Windows *WindowsPreview `json:"windows,omitempty"`
	// Summary says, in short sentences, what the policy means now.
	Summary []string `json:"summary"`
}

// WavePreview is one wave of a preview.
type WavePreview struct {
	// Name of the wave.
	Name string `json:"name"`
	// Clusters is how many clusters the wave has.
	Clusters int `json:"clusters"`
	// Names are the first PreviewNames of them, by name; MoreNames counts the others.
	Names     []string `json:"names"`
	MoreNames int      `json:"moreNames,omitempty"`
	// NotReady is how many of them are not Ready: held, not counted as failures.
	NotReady int `json:"notReady,omitempty"`
	// Soak is how long the wave runs healthily before the next starts, such as 10m0s; empty
	// when the next starts as soon as it is healthy.
	Soak string `json:"soak,omitempty"`
	// MaxUnavailable is how many of its clusters update at once.
	MaxUnavailable int `json:"maxUnavailable"`
	// Verify names the wave's verifications (waves[].verify), each with its kind, and whether
	// it runs once per cluster and compares the wave with the baseline.
	Verify []string `json:"verify,omitempty"`
	// Baseline is how many clusters a verification of the wave that compares measures the wave
	// against: those of the later waves, which keep the release before while it is verified.
	Baseline int `json:"baseline,omitempty"`
	// Approvals is how many people must approve before the wave starts (waves[].approval).
	Approvals int `json:"approvals,omitempty"`
}

// WindowsPreview is what the roll-out windows say now.
type WindowsPreview struct {
	// Open is true when a wave may start now.
	Open bool `json:"open"`
	// NextOpen is when a wave may next start, while they are closed; nil when none opens
	// within a year.
	NextOpen *time.Time `json:"nextOpen,omitempty"`
	// Error is why the windows cannot be read (ParseWindows): no wave starts while it stands.
	Error string `json:"error,omitempty"`
}

// Preview decides what a roll-out under policy (nil: no policy) would do with these clusters if
// a Preparation were promoted at now, for an Order that asks no slower pace.
func Preview(policy *v1.RolloutPolicy, clusters []PreviewCluster, now time.Time) PlanPreview {
	return PreviewPaced(policy, nil, clusters, now)
}

// PreviewPaced is Preview for an Order that asks the pace pace (its spec.rolloutPace; nil asks
// none): each wave's maxUnavailable and soak as the roll-out counts them (waveMaxUnavailable,
// waveSoak).
func PreviewPaced(policy *v1.RolloutPolicy, pace *v1.RolloutPace, clusters []PreviewCluster, now time.Time) PlanPreview {
	return previewPaced(policy, pace, clusters, nil, now)
}

// previewPaced is PreviewPaced of a Preparation that clusters of the waves runs[i] is true of
// run already: their approvals are not asked (GateAsked).
func previewPaced(policy *v1.RolloutPolicy, pace *v1.RolloutPace, clusters []PreviewCluster, runs []bool, now time.Time) PlanPreview {
	sorted := append([]PreviewCluster(nil), clusters...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	out := PlanPreview{Clusters: len(sorted), Waves: []WavePreview{}, Summary: []string{}}

	if policy == nil {
		out.AllAtOnce = true
		implicit := Effective(nil, nil, pace, "", false)
		w := previewWave(AllAtOnceWave, sorted, implicit, pace, 0)
		out.Waves = append(out.Waves, w)
		if len(sorted) == 0 {
			out.Summary = append(out.Summary, "the Environment selects no cluster: a promotion deploys nowhere")
			return out
		}
		s := "every cluster at once, as without a policy: " + clusterCount(len(sorted))
		if ready := w.Clusters - w.NotReady; implicit != nil && w.MaxUnavailable < ready {
			s = fmt.Sprintf("every cluster in one wave, at most %d of %s at once (the Order's rolloutPace.maxUnavailable); no failure halts it", w.MaxUnavailable, clusterCount(ready))
		}
		if w.NotReady > 0 {
			s += fmt.Sprintf(" (%d not ready: held, not counted as failures)", w.NotReady)
		}
		out.Summary = append(out.Summary, s)
		return out
	}

	names := waveNames(policy)
	byWave := make([][]PreviewCluster, len(names))
	for _, c := range sorted {
		w := WaveOf(policy, c.Labels)
		byWave[w] = append(byWave[w], c)
	}
	if len(sorted) == 0 {
		out.Summary = append(out.Summary, "the Environment selects no cluster: a promotion deploys nowhere")
	}
	for i, name := range names {
		var wave *v1.RolloutWave
		if i < len(policy.Waves) {
			wave = &policy.Waves[i]
		} else if len(byWave[i]) == 0 {
			break // the implicit last wave, when no cluster is left to it
		}
		w := previewWave(name, byWave[i], policy, pace, i)
		out.Waves = append(out.Waves, w)
		if len(sorted) == 0 {
			continue
		}
		asked := GateAsked(i, runs)
		if wave != nil {
			w.Verify = verifyNames(wave.Verify)
			if asked {
				w.Approvals = Required(wave.Approval)
			}
		}
		out.Waves[len(out.Waves)-1] = w
		switch {
		case wave != nil && wave.Approval != nil && asked:
			out.Summary = append(out.Summary, approvalSentence("wave "+w.Name+" starts", wave.Approval))
		case wave != nil && wave.Approval != nil:
			out.Summary = append(out.Summary, "wave "+w.Name+" starts without approval: clusters of it, or of a later wave, run this Preparation already")
		}
		out.Summary = append(out.Summary, waveSentence(w, wave != nil && i == len(policy.Waves)-1 && len(byWave[len(names)-1]) == 0))
		if len(w.Verify) > 0 {
			out.Summary = append(out.Summary, "wave "+w.Name+" is verified by "+strings.Join(w.Verify, ", ")+" before the roll-out goes on")
		}
		if wave != nil && Compares(wave.Verify) {
			for _, later := range byWave[i+1:] {
				for _, c := range later {
					if c.Ready {
						w.Baseline++
					}
				}
			}
			out.Waves[len(out.Waves)-1] = w
			out.Summary = append(out.Summary, baselineSentence(w))
		}
		if ready := w.Clusters - w.NotReady; w.MaxUnavailable < ready {
			out.Summary = append(out.Summary, fmt.Sprintf("at most %d of %s of wave %s update at once", w.MaxUnavailable, clusterCount(ready), w.Name))
		}
	}

	out.FailureBudget = policy.FailureBudget
	out.OnFailure = string(policy.OnFailure)
	if out.OnFailure == "" {
		out.OnFailure = string(v1.RolloutHalt)
	}
	var more []string
	more, out.Windows = PolicySentences(policy, now)
	out.Summary = append(out.Summary, more...)
	return out
}

// PolicySentences says what a policy means at now whatever its clusters: what a failure does,
// and whether its windows let a wave start (nil windows when it has none).
func PolicySentences(policy *v1.RolloutPolicy, now time.Time) ([]string, *WindowsPreview) {
	out := []string{failureSentence(policy)}
	if len(policy.Windows) == 0 {
		return out, nil
	}
	wp := &WindowsPreview{}
	ws, err := ParseWindows(policy.Windows)
	switch {
	case err != nil:
		wp.Error = err.Error()
		out = append(out, "no wave starts while the windows cannot be read: "+err.Error())
	case ws.Open(now):
		wp.Open = true
		s := "inside a roll-out window now: the first wave starts at once"
		if policy.OnWindowClose == v1.WindowClosePause {
			s += "; when the windows close, no further cluster is changed until one opens"
		} else {
			s += "; when the windows close, the wave under way finishes and the next waits for a window"
		}
		out = append(out, s)
	default:
		if next, ok := ws.NextOpen(now); ok {
			next = next.UTC()
			wp.NextOpen = &next
			out = append(out, "outside the roll-out windows now: the first wave starts at "+next.Format(time.RFC3339))
		} else {
			out = append(out, "outside the roll-out windows now, and none opens within a year: no wave starts")
		}
	}
	return out, wp
}

// previewWave lists wave w of policy (nil: no policy, every cluster at once), of these clusters,
// with its maxUnavailable and soak as the roll-out counts them under the Order's pace.
func previewWave(name string, clusters []PreviewCluster, policy *v1.RolloutPolicy, pace *v1.RolloutPace, w int) WavePreview {
	wp := WavePreview{Name: name, Clusters: len(clusters), Names: []string{}}
	for i, c := range clusters {
		if i < PreviewNames {
			wp.Names = append(wp.Names, c.Name)
		}
		if !c.Ready {
			wp.NotReady++
		}
	}
	wp.MoreNames = len(clusters) - len(wp.Names)
	ready := wp.Clusters - wp.NotReady
	wp.MaxUnavailable = ready
	if policy != nil {
		// As Decide counts it: a percent of the clusters that are not held.
		wp.MaxUnavailable = min(waveMaxUnavailable(policy, pace, w, ready), ready)
		if soak := waveSoak(policy, pace, w); soak > 0 && ready > 0 {
			wp.Soak = soak.String()
		}
	}
	return wp
}

// waveSentence says what a wave holds and how long it soaks; last is true for the last wave
// that has clusters, after which the roll-out completes.
func waveSentence(w WavePreview, last bool) string {
	s := "wave " + w.Name + ": "
	if w.Clusters == 0 {
		return s + "no cluster, passed at once"
	}
	s += clusterCount(w.Clusters)
	if w.NotReady > 0 {
		s += fmt.Sprintf(" (%d not ready: held, not counted as failures)", w.NotReady)
	}
	if w.Soak != "" {
		if last {
			s += ", then soak " + w.Soak + " before the roll-out completes"
		} else {
			s += ", then soak " + w.Soak
		}
	}
	return s
}

// PreviewEnvironment is PreviewPaced for the Environment env, its own gates included: the stages
// it requires (view.RequiresSentence), what its approval and its verifications ask before and
// after the waves, for a Preparation that running
// of these clusters run already (a rollback to what they run): the approvals the roll-out goes
// past without asking (GateAsked) are not asked for.
func PreviewEnvironment(env *v1.Environment, pace *v1.RolloutPace, clusters []PreviewCluster, running int, now time.Time) PlanPreview {
	runs := runsByWave(env.Spec.Rollout, clusters, running)
	out := previewPaced(env.Spec.Rollout, pace, clusters, runs, now)
	var before []string
	if s := view.RequiresSentence(env); s != "" {
		before = append(before, s)
	}
	switch {
	case env.Spec.Approval != nil && GateAsked(-1, runs):
		before = append(before, approvalSentence("the roll-out starts", env.Spec.Approval))
	case env.Spec.Approval != nil:
		before = append(before, fmt.Sprintf("the roll-out starts without approval: %s of %d run this Preparation already (Environment %s's approval holds only a Preparation no cluster runs yet)",
			clusterCount(min(running, len(clusters))), len(clusters), env.Name))
	}
	out.Summary = append(before, out.Summary...)
	if len(env.Spec.Verify) > 0 {
		out.Summary = append(out.Summary, "once every cluster runs it, the Environment verifies it by "+strings.Join(verifyNames(env.Spec.Verify), ", ")+
			"; its deployment record says verified once they pass")
	}
	return out
}

// runsByWave says, of each wave of policy (nil: the one wave of every cluster), whether a cluster
// of it runs the Preparation previewed, given that running of clusters do. Which ones is known
// only when all do: when some do, only the first wave is marked, which passes the Environment's
// approval and the first wave's as a roll-out does (GateAsked), and keeps the later waves'.
func runsByWave(policy *v1.RolloutPolicy, clusters []PreviewCluster, running int) []bool {
	waves := 1
	if policy != nil {
		waves = len(waveNames(policy))
	}
	runs := make([]bool, waves)
	switch {
	case running <= 0 || len(clusters) == 0:
	case running < len(clusters):
		runs[0] = true
	case policy == nil:
		runs[0] = true
	default:
		for _, c := range clusters {
			runs[WaveOf(policy, c.Labels)] = true
		}
	}
	return runs
}

// approvalSentence says who must approve before what starts.
func approvalSentence(what string, p *v1.ApprovalPolicy) string {
	people := "1 person approves"
	if n := Required(p); n > 1 {
		people = fmt.Sprintf("%d people approve", n)
	}
	s := what + " once " + people
	if p.SeparateFromPromoter {
		s += ", not the one who promoted it"
	}
	return s + " (kubectl kokumi approve)"
}

// verifyNames names verifications with their kinds: "smoke (job)", "errors (http, per
// cluster, compared with the baseline, a failure counts once 2 of the last 3 runs fail)".
func verifyNames(vs []v1.Verification) []string {
	out := make([]string, 0, len(vs))
	for i := range vs {
		v := &vs[i]
		kind := "http"
		if v.Job != nil {
			kind = "job"
		}
		if v.PerCluster {
			kind += ", per cluster"
			if v.Compare != "" {
				kind += ", compared with the baseline"
			}
		}
		switch {
		case v.Failures != nil:
			kind += fmt.Sprintf(", a failure counts once %d of the last %d runs fail", v.Failures.Count, v.Failures.Of)
		case v.FailFor != nil && v.FailFor.Duration > 0:
			kind += ", a failure counts once the runs fail for " + v.FailFor.Duration.String()
		}
		out = append(out, v.Name+" ("+kind+")")
	}
	return out
}

// baselineSentence says against what a wave's comparing check measures it.
func baselineSentence(w WavePreview) string {
	s := "wave " + w.Name + "'s per-cluster checks ask each of its clusters and compare them with the baseline: "
	if w.Baseline == 0 {
		return s + "no cluster of a later wave keeps the release before, so compare sees an empty baseline"
	}
	return s + "the " + clusterCount(w.Baseline) + " of the later waves, which keep the release before (status.rollout.from) while it is verified"
}

// failureSentence says what the failure budget means.
func failureSentence(p *v1.RolloutPolicy) string {
	s := "the first failure halts the roll-out"
	if p.FailureBudget > 0 {
		s = fmt.Sprintf("%s may fail; one more halts the roll-out", clusterCount(int(p.FailureBudget)))
	}
	if p.OnFailure == v1.RolloutRollback {
		return s + " and rolls back to the last Preparation with a deployment record in this Environment"
	}
	return s + ": no further cluster is changed, those it changed stay as they are"
}

// clusterCount says "1 cluster" or "n clusters".
func clusterCount(n int) string {
	if n == 1 {
		return "1 cluster"
	}
	return fmt.Sprintf("%d clusters", n)
}

// PreviewSelected previews a roll-out to env at now over its member Clusters: those of clusters
// its selector (sel, parsed from env.Spec.ClusterSelector) picks (cluster.Members), Ready as
// their Ready condition says, of a Preparation running of them run already (0: a new one). The
// plan the server and the plugin show.
func PreviewSelected(env *v1.Environment, pace *v1.RolloutPace, sel labels.Selector, clusters []v1.Cluster, running int, now time.Time) PlanPreview {
	members := cluster.Members(sel, clusters)
	out := make([]PreviewCluster, len(members))
	for i, c := range members {
		out[i] = PreviewCluster{Name: c.Name, Labels: c.Labels, Ready: cluster.IsReady(c)}
	}
	return PreviewEnvironment(env, pace, out, running, now)
}
