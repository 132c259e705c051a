// Package verify runs the verifications of a roll-out's gates (Environment.spec.verify and
// spec.rollout.waves[].verify): a Job in Kokumi's namespace, or an HTTP request whose answer
// a CEL expression judges. Step is called by the Serving reconciler on each reconcile while a
// gate verifies; it starts the runs that are due, reads those under way, and tallies them into
// the Serving's status.rollout.verifications. Nothing here decides what a result means for the
// roll-out: internal/rollout does.
package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/analysis"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// Defaults of a verification's fields.
const (
	DefaultInterval    = 30 * time.Second
	DefaultJobTimeout  = 5 * time.Minute
	DefaultHTTPTimeout = 10 * time.Second
	MaxHTTPTimeout     = 60 * time.Second
	// PollJob is how often a Job under way is read again.
	PollJob = 5 * time.Second
	// MaxMessage is the most a result's message holds.
	MaxMessage = 512
	// JobGrace is how long past its timeout Kokumi waits for a Job's end before it counts the
	// run as failed itself.
	JobGrace = time.Minute
	// MaxClustersInFacts is the most cluster names KOKUMI_CLUSTERS holds.
	MaxClustersInFacts = 500
)

// Facts are what a verification is told of the release it verifies.
type Facts struct {
	Order, Namespace, Environment, Wave, Preparation string
	// Digest is the Preparation artifact's digest; Artifact its reference (repository@digest).
	Digest, Artifact string
	// Clusters run the release healthily in the gate verified.
	Clusters []string
	// Baseline are the clusters of the Environment still on the release before
	// (status.rollout.from), which a per-cluster check's compare measures the wave against.
	Baseline []string
	// Labels are the clusters' labels, by name, for a per-cluster check's ${label:KEY}.
	Labels map[string]map[string]string
	// Serving owns the Jobs (their owner reference: deleted with it).
	Serving *v1.Serving
}

// Outcome is what one run said: passed or not, and why, short; a per-cluster run's Fleet
// holds what it found of each cluster.
type Outcome struct {
	Passed  bool
	Message string
	Fleet   *analysis.Verdict
}

// Runner runs verifications.
type Runner struct {
	// Jobs runs job verifications; nil fails them with a message.
	Jobs *JobRunner
	// HTTP runs http verifications.
	HTTP *HTTPRunner
	// Now is the clock.
	Now func() time.Time
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Step moves the verifications of one gate on: for each, a run under way is read, and a run
// that is due is started (the first at once, the next ones interval after the last started). It
// returns the results, the gate's own replaced, in the order given, the other gates' kept, and
// when to look again (0 when nothing is under way or due).
func (r *Runner) Step(ctx context.Context, specs []v1.Verification, wave string, results []v1.VerificationResult, facts Facts) ([]v1.VerificationResult, time.Duration, error) {
	now := r.now()
	out := slices.Clone(results)
	recheck := time.Duration(0)
	soon := func(d time.Duration) {
		if d > 0 && (recheck == 0 || d < recheck) {
			recheck = d
		}
	}
	for i := range specs {
		spec := &specs[i]
		at := slices.IndexFunc(out, func(v v1.VerificationResult) bool { return v.Wave == wave && v.Name == spec.Name })
		if at < 0 {
			out = append(out, v1.VerificationResult{Name: spec.Name, Wave: wave, Kind: kindOf(spec), Phase: v1.VerificationRunning})
			at = len(out) - 1
		}
		res := &out[at]
		if res.Phase != v1.VerificationRunning {
			continue
		}
		if res.Runs > res.Completed && spec.HTTP != nil && r.HTTP != nil { // an HTTP check under way, in the pool
			o, done := r.HTTP.Read(ctx, spec, wave, res.Runs, facts)
			if !done {
				soon(PollHTTP)
				continue
			}
			res.Completed = res.Runs
			if tally(res, spec, o, now) {
				continue
			}
		}
		if res.Runs > res.Completed { // a Job's run under way
			if spec.Job == nil || r.Jobs == nil {
				res.Completed = res.Runs
			} else if res.JobUID == "" {
				// Started by a Kokumi that ran Jobs in the Order's namespace, which its tenants
				// write: that Job proves nothing. The run starts again where they cannot.
				res.Runs--
			} else {
				o, done, err := r.Jobs.Read(ctx, spec, wave, res.Runs, facts, types.UID(res.JobUID))
				if err != nil {
					return nil, 0, err
				}
				if !done && res.Started != nil && now.Sub(res.Started.Time) > jobTimeout(spec)+JobGrace {
					// The Job controller ends a Job at its deadline; where none runs (a hub without
					// one), Kokumi does not wait for ever.
					o, done = Outcome{Message: fmt.Sprintf("Job %s did not end within its timeout of %s and %s more: is the hub's Job controller running?",
						JobName(facts, wave, spec.Name, res.Runs), jobTimeout(spec), JobGrace)}, true
				}
				if !done {
					soon(PollJob)
					continue
				}
				res.Completed, res.JobUID = res.Runs, ""
				if tally(res, spec, o, now) {
					continue
				}
			}
		}
		interval := DefaultInterval
		if spec.Interval != nil && spec.Interval.Duration > 0 {
			interval = spec.Interval.Duration
		}
		if res.Runs > 0 && res.Started != nil {
			if wait := res.Started.Add(interval).Sub(now); wait > 0 {
				soon(wait)
				continue
			}
		}
		res.Runs++
		res.Started = &metav1.Time{Time: now.Truncate(time.Second)}
		switch {
		case spec.HTTP != nil && r.HTTP != nil:
			r.HTTP.Start(ctx, spec, wave, res.Runs, facts)
			soon(PollHTTP)
		case spec.Job != nil && r.Jobs != nil:
			uid, refused, err := r.Jobs.Start(ctx, spec, wave, res.Runs, facts)
			if err != nil {
				res.Runs--
				return nil, 0, err
			}
			if refused != "" {
				res.Completed = res.Runs
				if !tally(res, spec, Outcome{Message: refused}, now) {
					soon(interval)
				}
				continue
			}
			res.JobUID = string(uid)
			soon(PollJob)
		default:
			res.Completed = res.Runs
			tally(res, spec, Outcome{Message: "Kokumi runs no " + kindOf(spec) + " verification here: no runner is configured"}, now)
		}
	}
	return out, recheck, nil
}

// tally counts one run's outcome into res, and says whether the verification is over. A
// failed run counts against failureLimit only once the failure holds (analysis.Sustained);
// until then it breaks the passes in a row only.
func tally(res *v1.VerificationResult, spec *v1.Verification, o Outcome, now time.Time) bool {
	started := now
	if res.Started != nil {
		started = res.Started.Time
	}
	counts := analysis.Sustained(spec, res, o.Passed, started)
	msg := o.Message
	if !o.Passed && !counts {
		msg = "a failure that does not count yet (" + sustainedRule(spec) + "): " + msg
	}
	res.Message = text.Truncate(msg, MaxMessage)
	res.Checked, res.AtFault, res.Clusters = 0, 0, nil
	if v := o.Fleet; v != nil {
		res.Checked, res.AtFault, res.Clusters = v.Checked, v.AtFault, v.Clusters
	}
	if o.Passed {
		res.Passes++
	} else {
		res.Passes = 0
		if counts {
			res.Failures++
		}
	}
	switch {
	case res.Passes >= max(spec.Count, 1):
		res.Phase = v1.VerificationPassed
	case res.Failures >= max(spec.FailureLimit, 1):
		res.Phase = v1.VerificationFailed
	default:
		return false
	}
	res.Finished = &metav1.Time{Time: now.Truncate(time.Second)}
	return true
}

// sustainedRule says when a failed run of spec counts.
func sustainedRule(spec *v1.Verification) string {
	if w := spec.Failures; w != nil {
		return fmt.Sprintf("failures: %d of the last %d runs", w.Count, w.Of)
	}
	if spec.FailFor != nil {
		return "failFor: " + spec.FailFor.Duration.String()
	}
	return ""
}

// vars are the values of the placeholders of a request to cluster (empty: the release's only).
func (f Facts) vars(cluster string) analysis.Vars {
	return analysis.Vars{Cluster: cluster, Labels: f.Labels[cluster], Environment: f.Environment, Order: f.Order,
		Preparation: f.Preparation, Digest: f.Digest}
}

// kindOf names a verification's kind.
func kindOf(spec *v1.Verification) string {
	if spec.Job != nil {
		return "job"
	}
	return "http"
}

// firstLines returns the first lines of s, at most MaxMessage bytes, one line each.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return text.Truncate(strings.Join(lines, " | "), MaxMessage)
}

// env returns the facts as environment variables.
func (f Facts) env() []nameValue {
	clusters := f.Clusters
	if len(clusters) > MaxClustersInFacts {
		clusters = clusters[:MaxClustersInFacts]
	}
	return []nameValue{
		{"KOKUMI_ORDER", f.Order}, {"KOKUMI_NAMESPACE", f.Namespace}, {"KOKUMI_ENVIRONMENT", f.Environment},
		{"KOKUMI_WAVE", f.Wave}, {"KOKUMI_PREPARATION", f.Preparation}, {"KOKUMI_DIGEST", f.Digest},
		{"KOKUMI_ARTIFACT", f.Artifact}, {"KOKUMI_CLUSTERS", strings.Join(clusters, ",")},
		{"KOKUMI_CLUSTER_COUNT", fmt.Sprint(len(f.Clusters))},
	}
}

type nameValue struct{ name, value string }

// jobTimeout is how long one run of a job verification may take (its activeDeadlineSeconds).
func jobTimeout(spec *v1.Verification) time.Duration {
	if spec.Job != nil && spec.Job.Timeout != nil && spec.Job.Timeout.Duration > 0 {
		return spec.Job.Timeout.Duration
	}
	return DefaultJobTimeout
}
