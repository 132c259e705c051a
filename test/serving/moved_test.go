package serving

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// A Preparation made before the bundled registry moved (a new Service, a restore) names the
// old address: its artifact, the same digest, deploys from the registry's current address, and
// its deployment record is attached there.
func TestAPreparationOfAMovedBundledRegistryDeploysFromItsCurrentAddress(t *testing.T) {
	f := newFixture(t)
	f.cluster("moved1", true)
	current := registry.Addr + "/kokumi/" + f.ns + "/podinfo-edge"
	d, err := (&oci.Client{}).PushArtifact(f.ctx, current, []byte("moved"), nil)
	must(t, err)
	prep := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-edge-moved", Namespace: f.ns}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo-edge"}, ProductRef: v1.LocalObjectReference{Name: "podinfo-fleet"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: digestOf("chart")},
		TargetNamespace: "podinfo",
		Artifact:        v1.Artifact{Ref: "oci://kokumi-registry.kokumi-system.svc:5000/kokumi/" + f.ns + "/podinfo-edge@" + d, Digest: d},
		ConfigHash:      "moved",
	}}
	must(t, env.Client.Create(f.ctx, prep))
	f.order("edge", prep.Name)

	f.eventually("the Application reads the artifact at the registry's current address", func() error {
		app, err := f.app("moved1")
		if err != nil {
			return err
		}
		repoURL, _, _ := unstructured.NestedString(app.Object, "spec", "source", "repoURL")
		revision, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
		if repoURL != "oci://"+current || revision != d {
			return fmt.Errorf("source %s at %s, want oci://%s at %s", repoURL, revision, current, d)
		}
		return nil
	})
	f.healthy(d, "moved1")
	f.ready(v1.ReasonDeployed, "moved1")

	f.records(prep.Name, 1)
	keys, err := (&record.Keys{Client: env.Client, Namespace: cfg.Namespace}).Trusted(f.ctx)
	must(t, err)
	attached, err := (&record.Store{Client: &oci.Client{}}).Records(f.ctx, current, d, keys)
	must(t, err)
	if len(attached) != 1 || !attached[0].Verified || attached[0].Predicate.Preparation != prep.Name {
		t.Errorf("records attached at the current address: %+v", attached)
	}
}
