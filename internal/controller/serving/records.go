package serving

import (
	"context"
	"fmt"
	"slices"
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
	"github.com/kokumi-dev/kokumi/internal/shard"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// RecordsFieldManager is the field manager the deployment records of a Preparation's status are
// written as, apart from the Order reconciler's writes of its Ready condition.
func RecordsFieldManager(shardName string) string { return shard.FieldManager(shardName) + "-records" }

// MaxDeploymentRecords is how many records a Preparation's status lists, newest first.
const MaxDeploymentRecords = 32

// recordDeployment signs a deployment record of a Deployed Serving and attaches it to the
// Preparation's artifact: once each time the Serving becomes Deployed, and again whenever more
// clusters run it healthily than the last record names. Held clusters are not named.
func (r *Reconciler) recordDeployment(ctx context.Context, s *v1.Serving, d *deployment) error {
	if r.Records == nil || r.Keys == nil {
		return nil
	}
	environment, healthy, wave := d.environment, d.healthy, d.wave
	since := time.Time{} // a wave's record is made once, and again when more clusters ran it
	if wave == "" {
		deployedSince, ok := s.Status.DeployedAt(d.prep.Spec.Artifact.Digest)
		if !ok {
			return nil
		}
		since = deployedSince.Truncate(time.Second)
	}
	if !needsRecord(d.prep.Status.DeploymentRecords, environment, wave, since, len(healthy), d.evidence.Verified) {
		return nil
	}
	// Read again from the API server: the cache may not hold the last record listed yet.
	prep := &v1.Preparation{}
	if err := r.apiReader().Get(ctx, client.ObjectKeyFromObject(d.prep), prep); err != nil {
		return fmt.Errorf("read Preparation %s: %w", d.prep.Name, err)
	}
	if !needsRecord(prep.Status.DeploymentRecords, environment, wave, since, len(healthy), d.evidence.Verified) {
		return nil
	}
	signer, err := r.Keys.Ensure(ctx)
	if err != nil {
		return fmt.Errorf("deployment record of Preparation %s: %w", prep.Name, err)
	}
	now := r.Now().UTC().Truncate(time.Second)
	if now.Before(since) {
		now = since
	}
	repository, _ := preparation.ArtifactLocation(r.Config.BundledRegistry, prep)
	ctx, cancel := context.WithTimeout(ctx, bundled.Timeout)
	defer cancel()
	want := record.Predicate{
		Order: s.Spec.OrderRef.Name, Namespace: s.Namespace, Environment: environment, Wave: wave,
		TargetNamespace: prep.Spec.TargetNamespace, Preparation: prep.Name, Clusters: healthy, Time: now,
	}
	evidenceOf(&want, d.evidence)
	// A record attached by a reconcile whose status write failed is listed, not signed again.
	entry, found, attested, err := r.attachedRecord(ctx, repository, prep.Spec.Artifact.Digest, signer, want, since)
	if err != nil {
		return err
	}
	if !found {
		digest, err := r.Records.Attach(ctx, repository, prep.Spec.Artifact.Digest, signer, want)
		if err != nil {
			r.Recorder.Eventf(s, prep, corev1.EventTypeWarning, "RecordFailed", "RecordDeployment",
				"Deployment record of Preparation %s could not be attached to %s: %s", prep.Name, repository, text.Truncate(err.Error(), 512))
			return fmt.Errorf("attach the deployment record of Preparation %s: %w", prep.Name, err)
		}
		kmetrics.RecordSigned()
		if wave == "" {
			countDeployment(attested, want)
		}
		entry = v1.DeploymentRecord{Environment: environment, Wave: wave, Clusters: int32(len(healthy)), Time: metav1.NewTime(now), Digest: digest, KeyID: signer.KeyID(),
			Verified: want.Verified}
	}
	base := prep.DeepCopy()
	prep.Status.DeploymentRecords = append([]v1.DeploymentRecord{entry}, prep.Status.DeploymentRecords...)
	if len(prep.Status.DeploymentRecords) > MaxDeploymentRecords {
		prep.Status.DeploymentRecords = prep.Status.DeploymentRecords[:MaxDeploymentRecords]
	}
	// Optimistic lock: a list written meanwhile is never overwritten; the next reconcile retries.
	// The records have a field manager of their own: the Order's reconciler writes the rest of
	// the Preparation's status (its Ready condition), never this list.
	written, err := status.Write(ctx, r.Client, prep, base, client.FieldOwner(RecordsFieldManager(r.Config.Shard)))
	if err != nil {
		return fmt.Errorf("list the deployment record of Preparation %s: %w", prep.Name, err)
	}
	if written.Conflict {
		return fmt.Errorf("list the deployment record in the status of Preparation %s: it changed meanwhile; trying again", prep.Name)
	}
	where := "Environment " + environment
	if wave != "" {
		where += ", wave " + wave + " and those before it,"
	}
	r.Recorder.Eventf(s, prep, corev1.EventTypeNormal, "Recorded", "RecordDeployment",
		"Signed deployment record %s of Preparation %s in %s: healthy on %s", entry.Digest, prep.Name, where, text.Names(healthy))
	return nil
}

// attachedRecord finds a record already attached to the artifact, signed with signer's key,
// that says what want says (its Order, namespace, Environment and clusters) at or after since.
// It returns what the artifact carries too: for a record of the whole Environment, with its
// provenance's changes (record.Store.Evidence), which the delivery measures read.
func (r *Reconciler) attachedRecord(ctx context.Context, repository, artifactDigest string, signer *record.Signer, want record.Predicate, since time.Time) (v1.DeploymentRecord, bool, record.Attested, error) {
	trusted, err := r.Keys.Trusted(ctx)
	if err != nil {
		return v1.DeploymentRecord{}, false, record.Attested{}, fmt.Errorf("read the trusted keys: %w", err)
	}
	read := r.Records.Attestations
	if want.Wave == "" {
		read = r.Records.Evidence
	}
	attested, err := read(ctx, repository, artifactDigest, trusted)
	if err != nil {
		return v1.DeploymentRecord{}, false, record.Attested{}, fmt.Errorf("read the deployment records of %s@%s: %w", repository, artifactDigest, err)
	}
	for _, rec := range attested.Records {
		p := rec.Predicate
		if rec.Verified && rec.KeyID == signer.KeyID() && p.Order == want.Order && p.Namespace == want.Namespace &&
			p.Environment == want.Environment && p.Wave == want.Wave && p.Preparation == want.Preparation && !p.Time.Before(since) &&
			slices.Equal(p.Clusters, want.Clusters) && p.Verified == want.Verified {
			return v1.DeploymentRecord{Environment: p.Environment, Wave: p.Wave, Clusters: int32(len(p.Clusters)), Time: metav1.NewTime(p.Time), Digest: rec.Digest, KeyID: rec.KeyID,
				Verified: p.Verified}, true, attested, nil
		}
	}
	return v1.DeploymentRecord{}, false, attested, nil
}

// countDeployment counts the record of the whole Environment just signed (want) in the delivery
// measures, by internal/dora's rules: a deployment, with its lead time, when it is the first of
// its Preparation in the Environment among what the artifact carried before (attested); else it
// may only end an outage.
func countDeployment(attested record.Attested, want record.Predicate) {
	ev := dora.FromAttested(want.Namespace, want.Order, want.Preparation, attested)
	e := dora.Event{Key: dora.Key{Namespace: want.Namespace, Order: want.Order, Environment: want.Environment}, Kind: dora.Deployed,
		Preparation: want.Preparation, Time: want.Time}
	if !dora.IsDeployment(ev.Events, e) {
		kmetrics.Restored(want.Environment, want.Namespace, want.Order, want.Time)
		return
	}
	lead, ok := dora.LeadTime(ev.Changed, want.Time)
	kmetrics.Deployed(want.Environment, want.Namespace, want.Order, lead, ok, want.Time)
}

// apiReader reads from the API server, or through the client when the reconciler has no reader.
func (r *Reconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// needsRecord says whether a Serving Deployed since since (or past wave), with healthy
// clusters, needs a new record: none was made for the Environment (and wave) since then, the
// last one names fewer clusters, or it does not say verified and the gates now passed.
func needsRecord(records []v1.DeploymentRecord, environment, wave string, since time.Time, healthy int, verified bool) bool {
	for _, rec := range records { // newest first
		if rec.Environment != environment || rec.Wave != wave {
			continue
		}
		return rec.Time.Time.Before(since) || int(rec.Clusters) < healthy || (verified && !rec.Verified)
	}
	return true
}

// evidenceOf writes what the gates passed into a record's predicate.
func evidenceOf(p *record.Predicate, ev rollout.Evidence) {
	p.Verified = ev.Verified
	for _, v := range ev.Verifications {
		at := time.Time{}
		if v.Finished != nil {
			at = v.Finished.UTC()
		}
		e := record.VerificationEvidence{Name: v.Name, Wave: v.Wave, Kind: v.Kind, Time: at, Checked: v.Checked}
		for _, c := range v.Clusters {
			e.Clusters = append(e.Clusters, record.ClusterEvidence{Cluster: c.Cluster, Baseline: c.Baseline, Value: c.Value})
		}
		p.Verifications = append(p.Verifications, e)
	}
	for _, a := range ev.Approvals {
		p.Approvers = append(p.Approvers, record.ApprovalEvidence{By: a.By, Wave: a.Wave})
	}
}

// rollbackEvidence says why prep may not be gone back to in Environment environment, or
// nothing: its status lists a record, but what a stage gate checks must hold too, now: the
// artifact is still in the registry, and a record of the whole Environment attached to it
// verifies with a key Kokumi still trusts. Without a signer (no records kept) nothing is refused.
func (r *Reconciler) rollbackEvidence(ctx context.Context, prep *v1.Preparation, environment string) string {
	if r.Records == nil || r.Keys == nil || r.Records.Client == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, bundled.Timeout)
	defer cancel()
	repository, _ := preparation.ArtifactLocation(r.Config.BundledRegistry, prep)
	digest := prep.Spec.Artifact.Digest
	present, err := r.Records.Client.Exists(ctx, repository, digest)
	switch {
	case err != nil:
		return "its artifact could not be looked up: " + text.Truncate(err.Error(), 200)
	case !present:
		return "its artifact " + repository + "@" + digest + " is no longer in the registry"
	}
	keys, err := r.Keys.Trusted(ctx)
	if err != nil {
		return "the trusted keys are unreadable: " + text.Truncate(err.Error(), 200)
	}
	recs, err := r.Records.Records(ctx, repository, digest, keys)
	if err != nil {
		return "its records could not be read: " + text.Truncate(err.Error(), 200)
	}
	problem := "no record of Environment " + environment + " is attached to its artifact"
	for _, rec := range recs {
		if rec.Predicate.Environment != environment || rec.Predicate.Wave != "" {
			continue
		}
		if rec.Verified {
			return ""
		}
		problem = "its record of Environment " + environment + " does not verify: " + rec.Problem
	}
	return problem
}
