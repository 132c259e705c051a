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

// planInputs is what rollout.Plan decides the Serving's roll-out of prep from: the
// Applications (byName, from the cache, and those a create met elsewhere), the memo of which are
// as wanted (applied), the waves, the gates and what the roll-out goes back to. listErr holds
// the error of a list of Preparations that the lookup RollbackTo made, if any.
func (r *Reconciler) planInputs(ctx context.Context, s *v1.Serving, prep *v1.Preparation, req fleet.Request, tgt target,
	byName map[string]*argocd.Application, applied *writes.Round, previous []v1.Target, now metav1.Time, listErr *error) (rollout.Inputs, error) {
	key := client.ObjectKeyFromObject(s)
	elsewhere := map[string]*argocd.Application{}
	for _, c := range req.Clusters {
		name := fleet.ApplicationName(s.Namespace, s.Name, c.Name)
		// Not in the cache, which holds only Kokumi's Applications of this shard. No lookup per
		// Application here: the write creates it, and a create that finds one of that name (not
		// Kokumi's, or labelled for another shard) reads it then (writeApplication).
		if byName[name] == nil {
			if app := r.writes.Foreign(key, name, time.Now()); app != nil {
				elsewhere[name] = app
			}
		}
	}
	in := rollout.Inputs{Request: req, Applications: byName, Elsewhere: elsewhere,
		Ours: func(app *argocd.Application) bool { return argocd.BelongsTo(app, s) },
		UpToDate: func(spec argocd.ApplicationSpec, app *argocd.Application) bool {
			return applied.UpToDate(spec, app) && shard.ApplicationIn(app, r.Config.Shard)
		},
		Targets: previous, Deadline: r.Config.ProgressDeadline, DriftAfter: r.Config.DriftAfter, Now: now, Waves: tgt.waves, BundledRegistry: r.Config.BundledRegistry,
		Preparation: func(name string) (*v1.Preparation, error) {
			var p v1.Preparation
			if err := r.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, &p); err != nil {
				return nil, err
			}
			return &p, nil
		},
	}
	gates := gatesOf(tgt.env, s, prep)
	if in.Rollout.Policy = rollout.Effective(tgt.rollout, s.Spec.Rollout, tgt.pace, prep.Name, gates.Gated()); in.Rollout.Policy == nil {
		return in, nil
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
	from, err := rollout.From(s.Status.Rollout, s.Status.Revision, prep, listPreps)
	if err != nil {
		return in, err
	}
	in.Rollout = rollout.Input{Policy: in.Rollout.Policy, Gates: gates, Preparation: prep.Name, From: from, Previous: s.Status.Rollout,
		Control: s.Spec.Rollout, Pace: tgt.pace, Generation: s.Generation,
		RollbackTo: func() (string, string) {
			all, err := listPreps()
			if err != nil {
				*listErr = err
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
	}
	return in, nil
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
		g.Verify, g.Approval, g.Guard = env.Spec.Verify, env.Spec.Approval, env.Spec.Guard
	}
	return g
}

// verifyGate steps the verifications the plan runs now (internal/verify), writes their results
// into the plan's status, and looks again when a run is due or under way. A verification that
// passed or failed is decided on by the next reconcile, at once.
func (r *Reconciler) verifyGate(ctx context.Context, s *v1.Serving, prep *v1.Preparation, tgt target, plan *rollout.Course) error {
	step := plan.Verify
	if step == nil || r.Verifier == nil {
		return nil
	}
	repository, revision := preparation.ArtifactLocation(r.Config.BundledRegistry, prep)
	facts := verify.Facts{Order: s.Spec.OrderRef.Name, Namespace: s.Namespace, Environment: tgt.environment, Wave: step.Wave,
		Preparation: prep.Name, Digest: prep.Spec.Artifact.Digest, Artifact: repository + "@" + revision, Clusters: step.Clusters, Serving: s,
		Baseline: step.Baseline, Labels: tgt.labels}
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
