package stages_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
	"github.com/kokumi-dev/kokumi/internal/stages"
)

// staticKeys is a fixed list of trusted keys.
type staticKeys struct{ keys record.TrustedKeys }

func (s staticKeys) Trusted(context.Context) (record.TrustedKeys, error) { return s.keys, nil }

// BenchmarkGate evaluates the promotion gate of an Order to prod, whose Environment requires
// staging, where staging runs the release on 1,000 clusters and its artifact carries 100 signed
// records each naming the 1,000 clusters, in a real registry on loopback. The Kubernetes objects
// come from a fake client (the manager's cache in production); the records are read from the
// registry each time and verified once (cold), then from the verification cache (warm).
func BenchmarkGate(b *testing.B) {
	ctx := context.Background()
	reg := ocitest.Start(b)
	repo := ocitest.Repo(reg, "kokumi/team/app-staging")
	digest := ocitest.PushBundle(b, repo, "v1", map[string]string{"deploy.yaml": "kind: ConfigMap\nmetadata:\n  name: app\n"})
	signer := recordtest.NewSigner(b)
	trusted, err := record.ParseTrustedKeys(signer.PublicKeyPEM())
	if err != nil {
		b.Fatal(err)
	}
	clusters := make([]string, 1000)
	for i := range clusters {
		clusters[i] = fmt.Sprintf("edge-%04d", i)
	}
	store := &record.Store{Client: &oci.Client{}}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		if _, err := store.Attach(ctx, repo, digest, signer, record.Predicate{Order: "app-staging", Namespace: "team", Environment: "staging",
			TargetNamespace: "app", Preparation: "app-staging-1", Clusters: clusters, Time: start.Add(time.Duration(i) * time.Minute)}); err != nil {
			b.Fatal(err)
		}
	}

	source := v1.PreparationSource{URL: "oci://" + reg.Addr + "/charts/app", Version: "1.0.0", Digest: "sha256:" + strings.Repeat("c", 64)}
	images := []v1.ImagePin{{Original: "app:1.0.0", Pinned: "registry.example/app@sha256:" + strings.Repeat("d", 64)}}
	stagingPrep := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: "app-staging-1", Namespace: "team"}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: "app-staging"}, Source: source, Images: images, TargetNamespace: "app",
		Artifact: v1.Artifact{Ref: "oci://" + repo + "@" + digest, Digest: digest}, ConfigHash: "staging"}}
	prodPrep := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: "app-prod-1", Namespace: "team"}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: "app-prod"}, Source: source, Images: images, TargetNamespace: "app",
		Artifact: v1.Artifact{Ref: "oci://" + reg.Addr + "/kokumi/team/app-prod@" + digest, Digest: digest}, ConfigHash: "prod"}}
	staging := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "app-staging", Namespace: "team"},
		Spec:   v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "app-staging"}, PreparationName: stagingPrep.Name},
		Status: v1.ServingStatus{Revision: digest, Clusters: v1.ClusterCounts{Selected: 1000, Healthy: 1000}}}
	apimeta.SetStatusCondition(&staging.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1.ReasonDeployed, LastTransitionTime: metav1.NewTime(start)})
	scheme, err := kscheme.New()
	if err != nil {
		b.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "staging", Namespace: "team"}, Spec: v1.EnvironmentSpec{Project: "p"}},
		&v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "team"}, Spec: v1.EnvironmentSpec{Project: "p",
			Requires: []v1.StageRequirement{{Environment: "staging", Soak: &metav1.Duration{Duration: 30 * time.Minute}}}}},
		&v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "app-staging", Namespace: "team"}, Spec: v1.OrderSpec{EnvironmentRef: v1.LocalObjectReference{Name: "staging"}}},
		&v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "app-prod", Namespace: "team"}, Spec: v1.OrderSpec{EnvironmentRef: v1.LocalObjectReference{Name: "prod"}}},
		staging, stagingPrep, prodPrep,
	).WithStatusSubresource(&v1.Serving{}).Build()
	p := &stages.Pipeline{Client: c, Records: store, Keys: staticKeys{trusted}, Now: func() time.Time { return start.Add(time.Hour) }}

	check := func(b *testing.B) {
		v, err := p.Check(ctx, "team", "prod", prodPrep)
		if err != nil {
			b.Fatal(err)
		}
		if !v.Allowed {
			b.Fatalf("not allowed: %s", v.Message)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			p.Records = &record.Store{Client: &oci.Client{}}
			b.StartTimer()
			check(b)
		}
	})
	p.Records = store
	b.Run("warm", func(b *testing.B) {
		for b.Loop() {
			check(b)
		}
	})
}
