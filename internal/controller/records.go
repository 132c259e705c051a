package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// MaxDeploymentRecords is how many records a Preparation's status lists, newest first.
const MaxDeploymentRecords = 32

// registryTimeout bounds one write or read of records in a registry.
const registryTimeout = 30 * time.Second

// recordDeployment signs a deployment record of a Deployed Serving and attaches it to the
// Preparation's artifact: once each time the Serving becomes Deployed, and again whenever more
// clusters run it healthily than the last record names. Held clusters are not named.
func (r *ServingReconciler) recordDeployment(ctx context.Context, s *v1.Serving, d *deployment) error {
	if r.Records == nil || r.Keys == nil {
		return nil
	}
	prep, environment, healthy := d.prep, d.environment, d.healthy
	ready := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
	since := ready.LastTransitionTime.Truncate(time.Second)
	if !needsRecord(prep.Status.DeploymentRecords, environment, since, len(healthy)) {
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
	repository, _, _ := strings.Cut(oci.TrimScheme(prep.Spec.Artifact.Ref), "@")
	ctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	digest, err := r.Records.Attach(ctx, repository, prep.Spec.Artifact.Digest, signer, record.Predicate{
		Order: s.Spec.OrderRef.Name, Namespace: s.Namespace, Environment: environment,
		TargetNamespace: prep.Spec.TargetNamespace, Preparation: prep.Name, Clusters: healthy, Time: now,
	})
	if err != nil {
		r.Recorder.Eventf(s, prep, corev1.EventTypeWarning, "RecordFailed", "RecordDeployment",
			"Deployment record of Preparation %s could not be attached to %s: %s", prep.Name, repository, fleet.Truncate(err.Error(), 512))
		return fmt.Errorf("attach the deployment record of Preparation %s: %w", prep.Name, err)
	}
	base := prep.DeepCopy()
	entry := v1.DeploymentRecord{Environment: environment, Clusters: int32(len(healthy)), Time: metav1.NewTime(now), Digest: digest, KeyID: signer.KeyID()}
	prep.Status.DeploymentRecords = append([]v1.DeploymentRecord{entry}, prep.Status.DeploymentRecords...)
	if len(prep.Status.DeploymentRecords) > MaxDeploymentRecords {
		prep.Status.DeploymentRecords = prep.Status.DeploymentRecords[:MaxDeploymentRecords]
	}
	if err := r.Status().Patch(ctx, prep, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("list the deployment record in the status of Preparation %s: %w", prep.Name, err)
	}
	r.Recorder.Eventf(s, prep, corev1.EventTypeNormal, "Recorded", "RecordDeployment",
		"Signed deployment record %s of Preparation %s in Environment %s: healthy on %s", digest, prep.Name, environment, fleet.Names(healthy))
	return nil
}

// needsRecord says whether a Serving Deployed since since, with healthy clusters, needs a new
// record: none was made for the Environment since then, or the last one names fewer clusters.
func needsRecord(records []v1.DeploymentRecord, environment string, since time.Time, healthy int) bool {
	for _, rec := range records { // newest first
		if rec.Environment != environment {
			continue
		}
		return rec.Time.Time.Before(since) || int(rec.Clusters) < healthy
	}
	return true
}
