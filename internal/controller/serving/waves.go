package serving

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/rollout/writes"
	"github.com/kokumi-dev/kokumi/internal/shard"
	"github.com/kokumi-dev/kokumi/internal/text"
	"github.com/kokumi-dev/kokumi/internal/verify"
)

// observe fills req.Applications and req.Wanted from the Serving's Applications byName: what
// exists under each planned name, and whether it is as req wants it.
func (r *Reconciler) observe(s *v1.Serving, req *fleet.Request, byName map[string]*argocd.Application, applied *writes.Round) {
	req.Applications = make(map[string]fleet.Observed, len(req.Clusters))
	// The wanted spec of each cluster is computed once: compared here, planned by Decide.
	req.Wanted = make(map[string]argocd.ApplicationSpec, len(req.Clusters))
	key := client.ObjectKeyFromObject(s)
	for _, c := range req.Clusters {
		name := fleet.ApplicationName(s.Namespace, s.Name, c.Name)
		app := byName[name]
		if app == nil {
			// Not in the cache, which holds only Kokumi's Applications of this shard. No lookup per
			// Application here: the write creates it, and a create that finds one of that name
			// (not Kokumi's, or labelled for another shard) reads it then (writeApplication).
			if app = r.writes.Foreign(key, name, time.Now()); app == nil {
				continue
			}
		}
		spec := req.Spec(c)
		req.Wanted[c.Name] = spec
		req.Applications[name] = fleet.Observed{Ours: argocd.BelongsTo(app, s),
			UpToDate: applied.UpToDate(spec, app) && shard.ApplicationIn(app, r.Config.Shard), Status: app.Status}
	}
}

// planWaves plans the roll-out of req in the waves of the Environment's policy: it reads where
// each cluster stands from its Application (the revision it targets, and what Argo CD reports
// of it), and sets req.Waiting to the clusters left as they are, and req.Wanted of the clusters
// that join a wave not reached yet to the Preparation that wave runs.
func (r *Reconciler) planWaves(ctx context.Context, s *v1.Serving, prep *v1.Preparation, req *fleet.Request, tgt target,
	byName map[string]*argocd.Application, previous []v1.Target, now metav1.Time) (*rollout.Plan, error) {
	// Every cluster as if it were updated at once: Held, or its state at the new revision.
	observed := fleet.Decide(*req)
	fleet.ApplyDeadline(observed, previous, now, r.Config.ProgressDeadline)
	members := make([]rollout.Member, len(observed))
	for i, d := range observed {
		app := byName[d.Application]
		m := rollout.Member{Name: d.Cluster, Wave: tgt.waves[d.Cluster], HasApplication: app != nil, Reason: d.Reason}
		switch {
		case d.State == fleet.Held:
			m.Standing = rollout.Held
		case app == nil || !argocd.SameRevision(app.TargetRevision(), req.Revision):
			m.Standing = rollout.Untouched
		case d.State == fleet.Healthy:
			m.Standing = rollout.Healthy
		case d.State == fleet.Degraded:
			m.Standing = rollout.Failed
		default:
			m.Standing = rollout.Updating
		}
		members[i] = m
	}

	var preps []v1.Preparation
	listPreps := func() ([]v1.Preparation, error) {
		if preps != nil {
			return preps, nil
		}
		var list v1.PreparationList
		if err := r.List(ctx, &list, client.InNamespace(s.Namespace)); err != nil {
			return nil, fmt.Errorf("list Preparations of namespace %s: %w", s.Namespace, err)
		}
		preps = promotion.OrderPreparations(list.Items, s.Spec.OrderRef.Name)
		return preps, nil
	}
	from, err := r.rolloutFrom(s, prep, listPreps)
	if err != nil {
		return nil, err
	}
	var listErr error
	plan := rollout.Decide(rollout.Input{
		Gates:  gatesOf(tgt.env, s, prep),
		Policy: tgt.rollout, Preparation: prep.Name, From: from, Previous: s.Status.Rollout, Control: s.Spec.Rollout, Pace: tgt.pace, Members: members, Now: now.Time,
		Generation: s.Generation,
		RollbackTo: func() (string, string) {
			all, err := listPreps()
			if err != nil {
				listErr = err
				return "", err.Error()
			}
			to, skipped, err := promotion.RollbackTargetChecked(all, prep.Name, tgt.environment, func(p *v1.Preparation) string {
				return r.rollbackEvidence(ctx, p, tgt.environment)
			})
			if len(skipped) > 0 {
				ctrl.LoggerFrom(ctx).Info("passed over rollback targets whose evidence does not verify", "serving", s.Name, "skipped", skipped)
			}
			if err != nil {
				return "", err.Error()
			}
			return to.Name, text.Names(skipped)
		},
	})
	if listErr != nil {
		return nil, listErr
	}

	req.Waiting = plan.Waiting
	if len(plan.Joiners) > 0 {
		// A cluster that joins a wave not reached yet gets what that wave runs.
		var fromPrep v1.Preparation
		found, err := exists(ctx, r.Client, client.ObjectKey{Namespace: s.Namespace, Name: plan.Status.From}, &fromPrep, "Preparation")
		if err != nil {
			return nil, err
		}
		fromReq := withPreparation(*req, r.Config.BundledRegistry, &fromPrep)
		for _, c := range req.Clusters {
			if !found {
				break
			}
			for _, j := range plan.Joiners {
				if j == c.Name {
					req.Wanted[c.Name] = fromReq.Spec(c)
				}
			}
		}
		if !found {
			for _, j := range plan.Joiners {
				req.Waiting[j] = "the Preparation " + plan.Status.From + " its wave runs no longer exists: it joins when its wave is reached"
			}
		}
	}
	return &plan, nil
}

// rolloutFrom returns the Preparation the clusters of the waves not reached yet run: the one the
// roll-out in progress keeps, or the one rolled out before; without a roll-out before, the
// Order's Preparation whose artifact the status says runs.
func (r *Reconciler) rolloutFrom(s *v1.Serving, prep *v1.Preparation, listPreps func() ([]v1.Preparation, error)) (string, error) {
	prev := s.Status.Rollout
	switch {
	case prev != nil && prev.Preparation == prep.Name:
		return prev.From, nil
	case prev != nil && prev.State == v1.RolloutComplete:
		return prev.Preparation, nil
	case prev != nil:
		return prev.From, nil
	case s.Status.Revision == "" || s.Status.Revision == prep.Spec.Artifact.Digest:
		return "", nil
	}
	preps, err := listPreps()
	if err != nil {
		return "", err
	}
	for _, p := range preps {
		if p.Name != prep.Name && p.Spec.Artifact.Digest == s.Status.Revision {
			return p.Name, nil
		}
	}
	return "", nil
}

// rollbackRequest is req for the Preparation named to, which a rolled-back roll-out deploys to
// the clusters it changed and to those that join; the others are left as they are.
func (r *Reconciler) rollbackRequest(ctx context.Context, s *v1.Serving, req fleet.Request, to string, byName map[string]*argocd.Application) (fleet.Request, error) {
	var rb v1.Preparation
	if err := r.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: to}, &rb); err != nil {
		return req, fmt.Errorf("get Preparation %s to roll back to: %w", to, err)
	}
	failed := req.Revision
	out := withPreparation(req, r.Config.BundledRegistry, &rb)
	out.Waiting = map[string]string{}
	for _, c := range req.Clusters {
		app := byName[fleet.ApplicationName(s.Namespace, s.Name, c.Name)]
		if app == nil {
			continue
		}
		if rev := app.TargetRevision(); !argocd.SameRevision(rev, failed) && !argocd.SameRevision(rev, out.Revision) {
			out.Waiting[c.Name] = rollout.RolledBackWaiting(req.Preparation)
		}
	}
	return out, nil
}

// withPreparation is req deploying prep instead.
func withPreparation(req fleet.Request, bundledRegistry string, prep *v1.Preparation) fleet.Request {
	repository, revision := preparation.ArtifactLocation(bundledRegistry, prep)
	req.Preparation, req.RepoURL, req.Revision = prep.Name, "oci://"+repository, revision
	req.TargetNamespace, req.ImagesInBundledRegistry = prep.Spec.TargetNamespace, prep.Spec.ImagesInBundledRegistry
	req.Wanted = nil
	return req
}

// Notifier tells an Environment's webhooks (spec.notifications) of a transition of a Serving's
// roll-out; it must not block.
type Notifier interface {
	Notify(env *v1.Environment, s *v1.Serving, t rollout.Transition)
}

// rolloutEvents records an Event of each transition of the roll-out (rollout.Transitions), and
// tells the Environment's webhooks of it. A person's pause, resume or abort names them
// (spec.rollout.by, which the admission policy kokumi-serving-rollout holds to the person who
// wrote it).
func (r *Reconciler) rolloutEvents(s *v1.Serving, env *v1.Environment, previous, next *v1.RolloutStatus) {
	by := ""
	if s.Spec.Rollout != nil {
		by = s.Spec.Rollout.By
	}
	for _, t := range rollout.Transitions(previous, next, by) {
		kind := corev1.EventTypeNormal
		if t.Warning {
			kind = corev1.EventTypeWarning
		}
		if t.Reason != v1.ReasonRolloutHalted && t.Reason != v1.ReasonRolledBack {
			// A halt or a rollback is the Serving's Ready reason: recordTransition records it.
			r.Recorder.Eventf(s, nil, kind, string(t.Reason), "Rollout", "%s", eventMessage(t))
		}
		if r.Notifier != nil && env != nil && len(env.Spec.Notifications) > 0 {
			r.Notifier.Notify(env, s, t)
		}
	}
}

// eventMessage is the message of the Serving's Event of transition t: its message and, apart
// and marked, what the check printed (t.Output, already cleaned), quoted.
func eventMessage(t rollout.Transition) string {
	if t.Output == "" {
		return t.Message
	}
	return fmt.Sprintf("%s; the check's output (untrusted): %q", t.Message, t.Output)
}

// gatesOf returns the gates of the Environment env (nil: none) for the Serving's roll-out of
// prep.
func gatesOf(env *v1.Environment, s *v1.Serving, prep *v1.Preparation) rollout.Gates {
	g := rollout.Gates{Approvals: s.Spec.Approvals, PromotedBy: s.Spec.PromotedBy, Serving: s.Name}
	if prep != nil {
		g.Authors = preparation.Authors(prep)
	}
	if env != nil {
		g.Verify, g.Approval = env.Spec.Verify, env.Spec.Approval
	}
	return g
}

// verifyGate steps the verifications the plan runs now (internal/verify), writes their results
// into the plan's status, and looks again when a run is due or under way. A verification that
// passed or failed is decided on by the next reconcile, at once.
func (r *Reconciler) verifyGate(ctx context.Context, s *v1.Serving, prep *v1.Preparation, tgt target, plan *rollout.Plan) error {
	step := plan.Verify
	if step == nil || r.Verifier == nil {
		return nil
	}
	repository, revision := preparation.ArtifactLocation(r.Config.BundledRegistry, prep)
	facts := verify.Facts{Order: s.Spec.OrderRef.Name, Namespace: s.Namespace, Environment: tgt.environment, Wave: step.Wave,
		Preparation: prep.Name, Digest: prep.Spec.Artifact.Digest, Artifact: repository + "@" + revision, Clusters: step.Clusters, Serving: s}
	before := plan.Status.Verifications
	results, after, err := r.Verifier.Step(ctx, step.Specs, step.Wave, before, facts)
	if err != nil {
		return fmt.Errorf("verify %s of Serving %s/%s: %w", rollout.GateName(step.Wave), s.Namespace, s.Name, err)
	}
	plan.Status.Verifications = results
	for _, v := range results {
		if old := rollout.FindResult(before, v.Wave, v.Name); v.Phase != v1.VerificationRunning && (old == nil || old.Phase != v.Phase) {
			after = time.Second // passed or failed: the next reconcile goes on, or halts
		}
	}
	if after > 0 && (plan.RecheckAfter == 0 || after < plan.RecheckAfter) {
		plan.RecheckAfter = after
	}
	return nil
}
