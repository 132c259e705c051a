package recipe

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
)

func product(mutate func(*v1.Product)) *v1.Product {
	p := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "team"},
		Spec: v1.ProductSpec{Source: v1.ProductSource{URL: "oci://registry.example/charts/shop", Version: "1.0.0"}}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func TestTheRenderInputFollowsTheProductAndTheOrder(t *testing.T) {
	order := &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team"}}
	in, f := Input(order, product(nil), "bundled:5000")
	if f != nil || in.Render.ReleaseName != "web" || in.Render.TargetNamespace != "team" || in.Render.RequireChart || in.VendorRegistry != "" {
		t.Errorf("a bundle: %+v, %v", in, f)
	}
	helm := product(func(p *v1.Product) {
		p.Spec.Render = &v1.RenderSpec{Helm: &v1.HelmRender{ReleaseName: "shop", Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicas":2}`)}}}
		p.Spec.Images = v1.ImageSpec{Policy: v1.ImagePolicyVendor}
	})
	in, f = Input(order, helm, "bundled:5000")
	if f != nil || !in.Render.RequireChart || in.Render.ReleaseName != "shop" || in.Render.Values["replicas"] != float64(2) || in.VendorRegistry != "bundled:5000" {
		t.Errorf("a chart vendored without a registry: %+v, %v", in, f)
	}
	helm.Spec.Render.Helm.Values.Raw = []byte(`[1]`)
	if _, f := Input(order, helm, "bundled:5000"); f == nil || f.Reason != v1.ReasonRenderFailed {
		t.Errorf("values that are no object: %v, want RenderFailed", f)
	}
}

func TestTheInputsHashChangesWithWhatTheRenderReads(t *testing.T) {
	in := build.Input{SourceURL: "oci://registry.example/charts/shop", Version: "1.0.0"}
	base := InputsHash(in, "sha256:1", product(nil))
	if base == "" || base != InputsHash(in, "sha256:1", product(nil)) {
		t.Fatalf("the same input hashes to %q, then otherwise", base)
	}
	other := in
	other.Render.TargetNamespace = "elsewhere"
	withSecret := product(func(p *v1.Product) { p.Spec.Source.CredentialsRef = &v1.LocalObjectReference{Name: "pull"} })
	for name, h := range map[string]string{
		"another source digest":    InputsHash(in, "sha256:2", product(nil)),
		"another target namespace": InputsHash(other, "sha256:1", product(nil)),
		"a credentials Secret":     InputsHash(in, "sha256:1", withSecret),
	} {
		if h == base {
			t.Errorf("%s hashes as before", name)
		}
	}
}

func TestANewPreparationIsNamedByItsArtifactAndRecordsItsRender(t *testing.T) {
	order := &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team"}}
	in := build.Input{SourceURL: "oci://registry.example/charts/shop", Version: "1.0.0", VendorRegistry: "bundled:5000"}
	in.Render.ReleaseName, in.Render.TargetNamespace = "web", "apps"
	built := &build.Built{SourceDigest: "sha256:src", ConfigHash: "h1", Images: []images.Pin{{Original: "nginx:1", Pinned: "bundled:5000/vendor/team/nginx@sha256:n"}},
		Manifests: []byte("kind: Deployment\n")}
	prep := New(order, product(nil), in, built, Pushed{Repository: "bundled:5000/kokumi/team/web", Digest: "sha256:0123456789abcdef", Parent: "sha256:old"}, "bundled:5000")
	if prep.Name != preparation.Name("web", "sha256:0123456789abcdef") || prep.Labels[preparation.LabelOrder] != "web" || prep.Labels[preparation.LabelProduct] != "shop" {
		t.Errorf("identity: %s %v", prep.Name, prep.Labels)
	}
	if prep.Spec.Artifact.Ref != "oci://bundled:5000/kokumi/team/web@sha256:0123456789abcdef" || prep.Spec.ParentDigest != "sha256:old" ||
		prep.Spec.Source.Digest != "sha256:src" || prep.Spec.TargetNamespace != "apps" || !prep.Spec.ImagesInBundledRegistry {
		t.Errorf("spec: %+v", prep.Spec)
	}
	if prep.Spec.ReleaseName != "" || prep.Spec.HiddenImages != nil {
		t.Errorf("a bundle without a chart label has no release name (%q) and no hidden images (%v)", prep.Spec.ReleaseName, prep.Spec.HiddenImages)
	}
	built.Manifests = []byte("labels: {helm.sh/chart: shop-1.0.0}\n")
	if prep := New(order, product(nil), in, built, Pushed{Digest: "sha256:1"}, "elsewhere:5000"); prep.Spec.ReleaseName != "web" || prep.Spec.ImagesInBundledRegistry {
		t.Errorf("a rendered chart vendored elsewhere: release %q, in bundled registry %v", prep.Spec.ReleaseName, prep.Spec.ImagesInBundledRegistry)
	}
}
