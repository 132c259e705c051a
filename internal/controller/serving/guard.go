package serving

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/controller/status"
	"github.com/kokumi-dev/kokumi/internal/dora"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/text"
	"github.com/kokumi-dev/kokumi/internal/verify"
)

// guard steps the Environment's guard (spec.guard) of a complete roll-out: it starts once the
// Environment's deployment record of this deployment is listed (at once without records), runs
// the guard's verifications again (internal/verify, GuardWave) into status.rollout.guard, and,
// once one failed, revokes the record. It returns when to look again (0: nothing awaited). What
// a failed guard does to the roll-out, internal/rollout decides on the next reconcile.
func (r *Reconciler) guard(ctx context.Context, s *v1.Serving, prep *v1.Preparation, tgt target, plan *rollout.Course, healthy []string) (time.Duration, error) {
	if plan == nil || tgt.env == nil || tgt.env.Spec.Guard == nil || r.Verifier == nil {
		return 0, nil
	}
	st := &plan.Status
	if st.Guard == nil {
		if st.State != v1.RolloutComplete {
			return 0, nil
		}
		rec, ok := r.guardedRecord(s, prep, tgt.environment, plan.Evidence.Verified)
		if !ok {
			return 0, nil // the record's listing in the Preparation's status brings the next reconcile
		}
		st.Guard = &v1.GuardStatus{Phase: v1.GuardRunning, Since: metav1.NewTime(r.Now().Truncate(time.Second)), Record: rec}
	}
	g := st.Guard
	after := time.Duration(0)
	if g.Phase == v1.GuardRunning && st.State == v1.RolloutComplete {
		specs := rollout.GuardSpecs(tgt.env.Spec.Verify, tgt.env.Spec.Guard)
		repository, revision := preparation.ArtifactLocation(r.Config.BundledRegistry, prep)
		facts := verify.Facts{Order: s.Spec.OrderRef.Name, Namespace: s.Namespace, Environment: tgt.environment, Wave: rollout.GuardWave,
			Preparation: prep.Name, Digest: prep.Spec.Artifact.Digest, Artifact: repository + "@" + revision, Clusters: healthy, Serving: s}
		results, next, err := r.Verifier.Step(ctx, specs, rollout.GuardWave, g.Verifications, facts)
		if err != nil {
			return 0, fmt.Errorf("guard of Serving %s/%s: %w", s.Namespace, s.Name, err)
		}
		g.Verifications, after = results, next
		if phase := rollout.GuardPhaseOf(results, len(specs)); phase != g.Phase {
			g.Phase, after = phase, time.Second // the next reconcile halts or rolls back
		}
	}
	if g.Phase == v1.GuardFailed && g.Revocation == "" {
		if err := r.revoke(ctx, s, prep, tgt.environment, g); err != nil {
			return 0, err
		}
	}
	return after, nil
}

// recording says whether Kokumi signs deployment records (and so revocations).
func (r *Reconciler) recording() bool { return r.Records != nil && r.Keys != nil }

// guardedRecord is the digest of the Environment's deployment record of the Serving's current
// deployment of prep (made since it was Deployed, and saying verified when the gates passed),
// which the guard watches over; without records, none is awaited.
func (r *Reconciler) guardedRecord(s *v1.Serving, prep *v1.Preparation, environment string, verified bool) (string, bool) {
	if !r.recording() {
		return "", true
	}
	since, ok := s.Status.DeployedAt(prep.Spec.Artifact.Digest)
	if !ok {
		return "", false
	}
	for _, rec := range prep.Status.DeploymentRecords { // newest first
		if rec.Environment == environment && rec.Wave == "" {
			return rec.Digest, !rec.Time.Time.Before(since.Truncate(time.Second)) && (rec.Verified || !verified)
		}
	}
	return "", false
}

// revoke signs a revocation of the record the failed guard g watched over, attaches it to the
// Preparation's artifact beside the record, and lists it in the Preparation's status, which
// only Kokumi writes: the stages after the Environment refuse the release even if the
// registry loses it. A revocation listed already (a reconcile whose Serving status write was
// lost made it) is not signed again.
func (r *Reconciler) revoke(ctx context.Context, s *v1.Serving, prep *v1.Preparation, environment string, g *v1.GuardStatus) error {
	listed := func(p *v1.Preparation) (string, bool) {
		for _, rev := range p.Status.Revocations {
			if rev.Environment == environment && rev.Record == g.Record {
				return rev.Digest, true
			}
		}
		return "", false
	}
	if d, ok := listed(prep); ok {
		g.Revocation = d
		return nil
	}
	fresh := &v1.Preparation{}
	if err := r.apiReader().Get(ctx, client.ObjectKeyFromObject(prep), fresh); err != nil {
		return fmt.Errorf("read Preparation %s: %w", prep.Name, err)
	}
	if d, ok := listed(fresh); ok {
		g.Revocation = d
		return nil
	}
	failure := rollout.GuardFailure(g)
	if failure == nil {
		return nil
	}
	at := r.Now().UTC().Truncate(time.Second)
	if failure.Finished != nil {
		at = failure.Finished.UTC()
	}
	entry := v1.Revocation{Environment: environment, Record: g.Record, Verification: failure.Name, Message: failure.Message, Time: metav1.NewTime(at)}
	if r.recording() {
		signer, err := r.Keys.Ensure(ctx)
		if err != nil {
			return fmt.Errorf("revocation of Preparation %s: %w", prep.Name, err)
		}
		repository, _ := preparation.ArtifactLocation(r.Config.BundledRegistry, fresh)
		rctx, cancel := context.WithTimeout(ctx, bundled.Timeout)
		defer cancel()
		digest, added, err := r.Records.Revoke(rctx, repository, fresh.Spec.Artifact.Digest, signer, record.RevocationPredicate{
			Order: s.Spec.OrderRef.Name, Namespace: s.Namespace, Environment: environment, Preparation: fresh.Name, Revokes: g.Record, Time: at,
			Check: record.RevokingCheck{Name: failure.Name, Kind: failure.Kind, Runs: failure.Runs, Failures: failure.Failures, Message: failure.Message},
		})
		if err != nil {
			r.Recorder.Eventf(s, fresh, corev1.EventTypeWarning, "RevocationFailed", "Revoke",
				"The revocation of the deployment record of Preparation %s could not be attached to %s: %s", fresh.Name, repository, text.Truncate(err.Error(), 512))
			return fmt.Errorf("attach the revocation of Preparation %s: %w", fresh.Name, err)
		}
		entry.Digest = digest
		if added {
			kmetrics.ChangeFailed(environment, s.Namespace, s.Spec.OrderRef.Name, string(dora.Revoked), at)
		} else {
			kmetrics.FailureFound(environment, s.Namespace, s.Spec.OrderRef.Name, at)
		}
	}
	base := fresh.DeepCopy()
	fresh.Status.Revocations = append([]v1.Revocation{entry}, fresh.Status.Revocations...)
	if len(fresh.Status.Revocations) > v1.MaxRevocations {
		fresh.Status.Revocations = fresh.Status.Revocations[:v1.MaxRevocations]
	}
	written, err := status.Write(ctx, r.Client, fresh, base, client.FieldOwner(RecordsFieldManager(r.Config.Shard)))
	if err != nil {
		return fmt.Errorf("list the revocation of Preparation %s: %w", fresh.Name, err)
	}
	if written.Conflict {
		return fmt.Errorf("list the revocation in the status of Preparation %s: it changed meanwhile; trying again", fresh.Name)
	}
	g.Revocation = entry.Digest
	r.Recorder.Eventf(s, fresh, corev1.EventTypeWarning, "Revoked", "Revoke",
		"Revoked deployment record %s of Preparation %s in Environment %s with %s: the guard's verification %s failed: %s",
		g.Record, fresh.Name, environment, entry.Digest, failure.Name, failure.Message)
	return nil
}
