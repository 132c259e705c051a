package serving

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// records waits for n deployment records of the whole Environment in the Preparation's status
// (the records of waves, DeploymentRecord.Wave, are left out).
func (f *fixture) records(prep string, n int) []v1.DeploymentRecord {
	f.t.Helper()
	return f.recordsOf(prep, "", n)
}

// recordsOf waits for n deployment records of wave (empty: of the whole Environment) in the
// Preparation's status.
func (f *fixture) recordsOf(prep, wave string, n int) []v1.DeploymentRecord {
	f.t.Helper()
	var out []v1.DeploymentRecord
	f.eventually(fmt.Sprintf("%d deployment records of %s, wave %q", n, prep, wave), func() error {
		var p v1.Preparation
		must(f.t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: prep}, &p))
		out = nil
		for _, r := range p.Status.DeploymentRecords {
			if r.Wave == wave {
				out = append(out, r)
			}
		}
		if len(out) != n {
			return fmt.Errorf("%d records: %+v", len(out), p.Status.DeploymentRecords)
		}
		return nil
	})
	return out
}

func TestADeployedServingSignsARecordOfTheHealthyClustersOnly(t *testing.T) {
	f := newFixture(t)
	f.cluster("a12", true)
	held := f.cluster("b12", false)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a12")
	f.ready(v1.ReasonDeployed, "to a12; not ready: b12")

	recs := f.records(prep.Name, 1)
	if recs[0].Clusters != 1 || recs[0].Environment != "edge" {
		t.Errorf("first record %+v, want edge with 1 cluster", recs[0])
	}
	keys, err := (&record.Keys{Client: env.Client, Namespace: cfg.Namespace}).Trusted(f.ctx)
	must(t, err)
	repository, _, _ := strings.Cut(oci.TrimScheme(prep.Spec.Artifact.Ref), "@")
	store := &record.Store{Client: &oci.Client{}}
	attached, err := store.Records(f.ctx, repository, prep.Spec.Artifact.Digest, keys)
	must(t, err)
	if len(attached) != 1 || !attached[0].Verified || strings.Join(attached[0].Predicate.Clusters, ",") != "a12" ||
		attached[0].Predicate.Namespace != f.ns || attached[0].Predicate.TargetNamespace != "podinfo" {
		t.Fatalf("attached %+v", attached)
	}

	// A quiet resync writes no second record.
	f.settled()
	f.promote(prep.Name) // no change: the Serving is reconciled again
	if got := f.records(prep.Name, 1); got[0].Digest != recs[0].Digest {
		t.Errorf("the record changed to %s", got[0].Digest)
	}

	// The held cluster comes back and runs it healthily: the set grows, a new record names both.
	f.setReady(held, true)
	f.healthy(prep.Spec.Artifact.Digest, "b12")
	f.ready(v1.ReasonDeployed, "to a12, b12")
	recs = f.records(prep.Name, 2)
	if recs[0].Clusters != 2 || recs[1].Clusters != 1 {
		t.Errorf("records, newest first: %+v", recs)
	}
	attached, err = store.Records(f.ctx, repository, prep.Spec.Artifact.Digest, keys)
	must(t, err)
	if len(attached) != 2 || strings.Join(attached[1].Predicate.Clusters, ",") != "a12,b12" {
		t.Errorf("attached %+v", attached)
	}
}

// When Argo CD cannot even load the target state (the artifact's registry unreachable from the
// repo-server), the cluster fails the deployment with Argo CD's message rather than Progressing
// with no end.
func TestAnArgoCDErrorFailsTheDeploymentWithItsMessage(t *testing.T) {
	f := newFixture(t)
	f.cluster("a13", true)
	f.cluster("b13", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a13")
	f.playArgoCD("b13", "Unknown", "Healthy", "", map[string]any{
		"type": "ComparisonError", "message": "Failed to load target state: failed to get manifests: dial tcp 10.0.0.7:5000: connect: connection refused",
	})
	s := f.ready(v1.ReasonDeploymentFailed, "failed on b13 (ArgoCDError)")
	tgt := f.target(s, "b13")
	if tgt == nil || tgt.Conditions[0].Type != "Degraded" || tgt.Conditions[0].Reason != v1.ReasonArgoCDError ||
		!strings.Contains(tgt.Conditions[0].Message, "Argo CD reports ComparisonError: Failed to load target state") {
		t.Fatalf("target b13 = %+v", tgt)
	}
	// Argo CD recovers: so does the Serving.
	f.healthy(prep.Spec.Artifact.Digest, "b13")
	f.ready(v1.ReasonDeployed, "to a13, b13")
}

// Drift in Kokumi's own Applications is corrected: an extra source.kustomize.images (which would
// swap the pinned images) and automated sync turned off are put back as Kokumi writes them.
func TestDriftInKokumisApplicationsIsCorrected(t *testing.T) {
	f := newFixture(t)
	f.cluster("a14", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a14")
	f.ready(v1.ReasonDeployed, "to a14")

	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		app, err := f.app("a14")
		if err != nil {
			return err
		}
		must(t, unstructured.SetNestedStringSlice(app.Object, []string{"evil.example/podinfo:latest"}, "spec", "source", "kustomize", "images"))
		must(t, unstructured.SetNestedField(app.Object, false, "spec", "syncPolicy", "automated", "selfHeal"))
		return env.Client.Update(f.ctx, app)
	}))
	f.eventually("the drift is put back", func() error {
		app, err := f.app("a14")
		if err != nil {
			return err
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(app.Object, "spec", "source", "kustomize"); found {
			return fmt.Errorf("source.kustomize still there")
		}
		if heal, _, _ := unstructured.NestedBool(app.Object, "spec", "syncPolicy", "automated", "selfHeal"); !heal {
			return fmt.Errorf("selfHeal still off")
		}
		return nil
	})
}

// A cluster that leaves loses its Application even while a gate holds the Serving (here a
// promoted Preparation that does not exist): a Cluster's deletion, which waits for its
// Applications, never hangs on a Serving that is not deploying.
func TestAClusterLeavingWhileAGateHoldsLosesItsApplication(t *testing.T) {
	f := newFixture(t)
	f.cluster("a15", true)
	leaving := f.cluster("b15", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "a15", "b15")
	f.ready(v1.ReasonDeployed, "to a15, b15")

	f.promote("podinfo-edge-missing")
	f.ready(v1.ReasonPreparationNotFound, "podinfo-edge-missing does not exist")
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(leaving), leaving))
	leaving.Labels["tier"] = "elsewhere"
	must(t, env.Client.Update(f.ctx, leaving))
	f.eventually("b15 loses its Application", func() error {
		if _, err := f.app("b15"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %w", err)
		}
		return nil
	})
	if _, err := f.app("a15"); err != nil {
		t.Errorf("the cluster that stays lost its Application: %v", err)
	}
}
