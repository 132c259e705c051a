package rollout

import (
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// Inputs is what Plan decides one reconcile of a Serving's roll-out from: plain values the
// reconciler read, and lookups that read nothing but what it hands them.
type Inputs struct {
	// Request is the fleet's request for the Preparation rolled out (Request), without its
	// Applications, Wanted and Waiting: Plan observes them.
	Request fleet.Request
	// Applications are the Serving's Applications the cache holds, by name.
	Applications map[string]*argocd.Application
	// Elsewhere are Applications of planned names the cache does not hold that a create met
	// (someone else's, or the Serving's labelled for another shard), by name.
	Elsewhere map[string]*argocd.Application
	// Ours says whether an Application belongs to the Serving (argocd.BelongsTo).
	Ours func(*argocd.Application) bool
	// UpToDate says whether an Application is as spec wants it, and of this shard.
	UpToDate func(spec argocd.ApplicationSpec, app *argocd.Application) bool
	// Targets are the last status's targets and the clusters past its cap, with the times they
	// entered their states; Deadline is the progress deadline; DriftAfter the drift threshold
	// (fleet.ApplyDrift); Now the reconciler's clock.
	Targets              []v1.Target
	Deadline, DriftAfter time.Duration
	Now                  metav1.Time
	// Waves holds each cluster's wave of Rollout.Policy (WaveOf).
	Waves map[string]int
	// Rollout is what Decide reads of the roll-out in waves: its Policy (Effective's; nil deploys
	// every cluster at once, and Plan is then fleet.Decide), Preparation, From, Previous,
	// Control, Pace, Gates, Generation and RollbackTo. Plan sets its Members and Now.
	Rollout Input
	// Preparation returns the Preparation of the Serving's namespace of that name (the one the
	// waves not reached yet run, the one a rollback goes back to); an error for which
	// apierrors.IsNotFound holds says it does not exist.
	Preparation func(name string) (*v1.Preparation, error)
	// BundledRegistry is the bundled registry's address (preparation.ArtifactLocation).
	BundledRegistry string
}

// Outcome is what one reconcile of a Serving's roll-out does.
type Outcome struct {
	// Request is the request as planned: the clusters left waiting, the joiners' Preparation,
	// or the Preparation a rollback goes back to.
	Request fleet.Request
	// Decisions are the fleet's decisions of Request, one per cluster, by name.
	Decisions []fleet.Decision
	// Course is the roll-out in waves (Decide); nil without a policy.
	Course *Course
}

// Request is the fleet's request of the Serving that deploys prep, whose artifact is at the
// bundled registry's current address; base holds the Serving, the Argo CD side and the
// Clusters. The one mapping of a Preparation's fields into a request.
func Request(base fleet.Request, bundledRegistry string, prep *v1.Preparation) fleet.Request {
	repository, revision := preparation.ArtifactLocation(bundledRegistry, prep)
	base.Preparation, base.RepoURL, base.Revision = prep.Name, "oci://"+repository, revision
	base.TargetNamespace, base.ImagesInBundledRegistry = prep.Spec.TargetNamespace, prep.Spec.ImagesInBundledRegistry
	base.Applications, base.Wanted, base.Waiting = nil, nil, nil
	return base
}

// Plan decides one reconcile of a Serving's roll-out: it observes the Applications, runs
// fleet.Decide and the progress deadline once, gives each cluster its standing in the waves,
// decides the roll-out (Decide), and edits the request of the clusters it leaves waiting, of
// those that join a wave not reached yet (they get the Preparation that wave runs) and, when the
// roll-out goes back, of every cluster (the rollback). Without a policy it is fleet.Decide.
func Plan(in Inputs) (Outcome, error) {
	req := in.Request
	in.observe(&req)
	decisions := fleet.Decide(req)
	if in.Rollout.Policy == nil {
		return Outcome{Request: req, Decisions: decisions}, nil
	}
	roll := in.Rollout
	roll.Members, roll.Now = in.members(req, decisions), in.Now.Time
	course := Decide(roll)
	req.Waiting = course.Waiting
	changed := make(map[string]bool, len(course.Waiting)+len(course.Joiners))
	for c := range course.Waiting {
		changed[c] = true
	}
	if err := in.join(&req, &course, changed); err != nil {
		return Outcome{}, err
	}
	if GoesBack(&course.Status) {
		back, err := in.rollback(req, course.Status.RollbackTo)
		if err != nil {
			return Outcome{}, err
		}
		in.observe(&back)
		// Another Preparation: every cluster is decided anew.
		return Outcome{Request: back, Decisions: fleet.Decide(back), Course: &course}, nil
	}
	fleet.Revise(req, decisions, changed)
	return Outcome{Request: req, Decisions: decisions, Course: &course}, nil
}

// observe fills req.Applications and req.Wanted: what exists under each planned name, and
// whether it is as req wants it. The wanted spec of each cluster is computed once: compared
// here, planned by fleet.Decide.
func (in Inputs) observe(req *fleet.Request) {
	req.Applications = make(map[string]fleet.Observed, len(req.Clusters))
	req.Wanted = make(map[string]argocd.ApplicationSpec, len(req.Clusters))
	for _, c := range req.Clusters {
		name := fleet.ApplicationName(req.ServingNamespace, req.ServingName, c.Name)
		app := in.Applications[name]
		if app == nil {
			if app = in.Elsewhere[name]; app == nil {
				continue
			}
		}
		spec := req.Spec(c)
		req.Wanted[c.Name] = spec
		req.Applications[name] = fleet.Observed{Ours: in.Ours(app), UpToDate: in.UpToDate(spec, app), Status: app.Status}
	}
}

// members gives each cluster its standing in the roll-out from its decision as if every
// cluster were updated at once (past the progress deadline, Failed; drifted, Updating: never
// Healthy) and from the revision its Application targets.
func (in Inputs) members(req fleet.Request, decisions []fleet.Decision) []Member {
	observed := slices.Clone(decisions)
	fleet.ApplyTimes(observed, in.Targets, in.Now, in.Deadline, in.DriftAfter)
	members := make([]Member, len(observed))
	for i, d := range observed {
		app := in.Applications[d.Application]
		members[i] = Member{Name: d.Cluster, Wave: in.Waves[d.Cluster], HasApplication: app != nil, Reason: d.Reason,
			Standing: StandingOf(d.State, app != nil && argocd.SameRevision(app.TargetRevision(), req.Revision))}
	}
	return members
}

// StandingOf is where a cluster in state stands in a roll-out; targets says whether its
// Application targets the release rolled out.
func StandingOf(state fleet.State, targets bool) Standing {
	switch {
	case state == fleet.Held:
		return Held
	case !targets:
		return Untouched
	case state == fleet.Healthy:
		return Healthy
	case state == fleet.Degraded:
		return Failed
	default:
		return Updating
	}
}

// join gives the clusters that join a wave not reached yet the Preparation that wave runs
// (course.Status.From), or leaves them waiting when it no longer exists; changed gains them.
func (in Inputs) join(req *fleet.Request, course *Course, changed map[string]bool) error {
	if len(course.Joiners) == 0 {
		return nil
	}
	from := course.Status.From
	prep, err := in.Preparation(from)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get Preparation %q: %w", from, err)
	}
	joiners := make(map[string]bool, len(course.Joiners))
	for _, j := range course.Joiners {
		joiners[j], changed[j] = true, true
		if prep == nil {
			req.Waiting[j] = "the Preparation " + from + " its wave runs no longer exists: it joins when its wave is reached"
		}
	}
	if prep == nil {
		return nil
	}
	fromReq := Request(*req, in.BundledRegistry, prep)
	for _, c := range req.Clusters {
		if joiners[c.Name] {
			req.Wanted[c.Name] = fromReq.Spec(c)
		}
	}
	return nil
}

// rollback is req for the Preparation named to, which a rolled-back roll-out deploys to the
// clusters it changed and to those that join; the others are left as they are.
func (in Inputs) rollback(req fleet.Request, to string) (fleet.Request, error) {
	prep, err := in.Preparation(to)
	if err != nil {
		return req, fmt.Errorf("get Preparation %s to roll back to: %w", to, err)
	}
	failed := req.Revision
	out := Request(req, in.BundledRegistry, prep)
	out.Waiting = map[string]string{}
	for _, c := range req.Clusters {
		app := in.Applications[fleet.ApplicationName(req.ServingNamespace, req.ServingName, c.Name)]
		if app == nil {
			continue
		}
		if rev := app.TargetRevision(); !argocd.SameRevision(rev, failed) && !argocd.SameRevision(rev, out.Revision) {
			out.Waiting[c.Name] = RolledBackWaiting(req.Preparation)
		}
	}
	return out, nil
}

// Folded is a reconcile's roll-out folded into the Serving's status (fleet.Summary), with the
// Ready of the roll-out in waves.
type Folded struct {
	fleet.Summary
	// RecheckAfter is when to look again: a cluster reaches its progress deadline, a wave's
	// soak ends or a window opens; 0 when nothing is awaited.
	RecheckAfter time.Duration
	// OptIn is true when an Application of a planned name is someone else's.
	OptIn bool
}

// Fold folds the decisions of o, as the writes left them (results, fleet.AfterWrites), into the
// Serving's status of environment: the progress deadline, the counts and targets, and the
// Ready condition, which is the roll-out's when it halted, rolled back or was aborted, and
// otherwise says where the roll-out stands.
func Fold(in Inputs, o Outcome, results []fleet.WriteResult, environment string) Folded {
	decisions := fleet.AfterWrites(o.Decisions, results, o.Request.ArgoCDNamespace)
	var f Folded
	for _, d := range decisions {
		f.OptIn = f.OptIn || d.Reason == v1.ReasonOptInRequired
	}
	f.RecheckAfter = fleet.ApplyTimes(decisions, in.Targets, in.Now, in.Deadline, in.DriftAfter)
	f.Summary = fleet.Fold(o.Request.Preparation, environment, decisions, in.Targets, in.Now)
	c := o.Course
	if c == nil {
		return f
	}
	switch {
	case c.Ready != nil:
		// Halted or rolled back: never Deployed, so no record and no stage passed.
		f.Ready = *c.Ready
	case f.Ready.Reason != v1.ReasonDeployed:
		f.Ready.Message += c.Note()
	}
	if c.RecheckAfter > 0 && (f.RecheckAfter == 0 || c.RecheckAfter < f.RecheckAfter) {
		f.RecheckAfter = c.RecheckAfter // the soak of the current wave ends
	}
	return f
}

// From returns the Preparation the clusters of the waves not reached yet run, for a roll-out of
// prep: the one the roll-out in progress (previous) keeps, or the one rolled out before;
// without a roll-out before, the Order's Preparation (list) whose artifact the status says runs
// (revision).
func From(previous *v1.RolloutStatus, revision string, prep *v1.Preparation, list func() ([]v1.Preparation, error)) (string, error) {
	switch {
	case previous != nil && previous.Preparation == prep.Name:
		return previous.From, nil
	case previous != nil && previous.State == v1.RolloutComplete:
		return previous.Preparation, nil
	case previous != nil:
		return previous.From, nil
	case revision == "" || revision == prep.Spec.Artifact.Digest:
		return "", nil
	}
	preps, err := list()
	if err != nil {
		return "", err
	}
	for _, p := range preps {
		if p.Name != prep.Name && p.Spec.Artifact.Digest == revision {
			return p.Name, nil
		}
	}
	return "", nil
}
