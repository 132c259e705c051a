package build_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// fixture is a loopback registry holding the podinfo-like chart and its images.
type fixture struct {
	reg           *registry.Registry
	chartURL      string
	chartDigest   string
	podinfoImage  string
	podinfoDigest string
	initImage     string
	initDigest    string
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	reg := ocitest.Start(tb)
	f := &fixture{reg: reg}
	f.podinfoImage = ocitest.Repo(reg, "stefanprodan/podinfo:6.14.1")
	f.podinfoDigest = ocitest.PushImage(tb, f.podinfoImage, 2)
	f.initImage = ocitest.Repo(reg, "library/busybox:1.37")
	f.initDigest = ocitest.PushImage(tb, f.initImage, 1)
	f.chartURL = "oci://" + ocitest.Repo(reg, "charts/podinfo")
	f.chartDigest = ocitest.PushChart(tb, oci.TrimScheme(f.chartURL), "6.14.1", "podinfo", "6.14.1", ocitest.PodinfoChart(tb))
	return f
}

func (f *fixture) input() build.Input {
	return build.Input{
		SourceURL: f.chartURL,
		Version:   "6.14.1",
		Render: render.Options{
			ReleaseName:     "podinfo-edge",
			TargetNamespace: "podinfo",
			RequireChart:    true,
			Values: map[string]any{
				"image":     map[string]any{"repository": f.reg.Addr + "/stefanprodan/podinfo"},
				"initImage": f.initImage,
				"ui":        map[string]any{"message": "Hello from the edge"},
			},
		},
	}
}

func builder() *build.Builder {
	return &build.Builder{Sources: &oci.Client{}, Images: &images.Resolver{}}
}

func TestHelmChartRendersWithPinnedImagesIntoTheTargetNamespace(t *testing.T) {
	f := newFixture(t)
	built, err := builder().Build(context.Background(), f.input())
	if err != nil {
		t.Fatal(err)
	}
	if built.SourceDigest != f.chartDigest {
		t.Errorf("source digest = %s, want the chart's %s", built.SourceDigest, f.chartDigest)
	}
	m := string(built.Manifests)
	for _, want := range []string{
		"kind: Deployment", "kind: Service", "kind: HorizontalPodAutoscaler", "kind: Job",
		"name: podinfo-edge\n", "namespace: podinfo\n", "Hello from the edge",
		"image: " + f.reg.Addr + "/stefanprodan/podinfo@" + f.podinfoDigest,
		"image: " + f.reg.Addr + "/library/busybox@" + f.initDigest,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("manifests lack %q:\n%s", want, m)
		}
	}
	for _, unwanted := range []string{"curlimages/curl", "-test\n", ":6.14.1\n", "CustomResourceDefinition"} {
		if strings.Contains(m, unwanted) {
			t.Errorf("manifests hold %q (test hooks, tags and CRDs without includeCRDs stay out):\n%s", unwanted, m)
		}
	}
	if got := strings.Count(m, "namespace: podinfo\n"); got != 5 {
		t.Errorf("%d objects in namespace podinfo, want all 5 (the ConfigMap written without one too):\n%s", got, m)
	}
	want := []images.Pin{
		{Original: f.initImage, Pinned: f.reg.Addr + "/library/busybox@" + f.initDigest},
		{Original: f.podinfoImage, Pinned: f.reg.Addr + "/stefanprodan/podinfo@" + f.podinfoDigest},
	}
	if len(built.Images) != 2 || built.Images[0] != want[0] || built.Images[1] != want[1] {
		t.Errorf("images = %+v, want %+v", built.Images, want)
	}
}

func TestIncludeCRDsRendersTheChartsCRDs(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	in.Render.IncludeCRDs = true
	built, err := builder().Build(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	m := string(built.Manifests)
	if !strings.Contains(m, "kind: CustomResourceDefinition") {
		t.Fatalf("includeCRDs rendered no CRD:\n%s", m)
	}
	if beforeCRD, _, _ := strings.Cut(m, "kind: CustomResourceDefinition"); strings.Contains(beforeCRD, "name: widgets.example.com\n  namespace") {
		t.Errorf("the cluster-scoped CRD got a namespace:\n%s", m)
	}
}

func TestSameInputPushesTheSameDigestAndAnyChangeAnother(t *testing.T) {
	f := newFixture(t)
	b := builder()
	ctx := context.Background()
	repo := ocitest.Repo(f.reg, "kokumi/team/podinfo-edge")
	digests := map[string]string{}
	hashes := map[string]string{}
	for _, c := range []struct {
		name   string
		change func(*build.Input)
	}{
		{"first", func(*build.Input) {}},
		{"again", func(*build.Input) {}},
		{"target namespace", func(in *build.Input) { in.Render.TargetNamespace = "other" }},
		{"values", func(in *build.Input) { in.Render.Values["replicaCount"] = 3 }},
	} {
		in := f.input()
		c.change(&in)
		built, err := b.Build(ctx, in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		d, err := b.Push(ctx, repo, in, built, "")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		digests[c.name], hashes[c.name] = d, built.ConfigHash
	}
	if digests["first"] != digests["again"] || hashes["first"] != hashes["again"] {
		t.Errorf("the same input pushed %s then %s (hash %s, %s)", digests["first"], digests["again"], hashes["first"], hashes["again"])
	}
	for _, c := range []string{"target namespace", "values"} {
		if digests[c] == digests["first"] || hashes[c] == hashes["first"] {
			t.Errorf("a change of %s kept digest %s / hash %s", c, digests[c], hashes[c])
		}
	}
	if !ocitest.Exists(t, repo+"@"+digests["first"]) {
		t.Errorf("artifact %s@%s is not in the registry", repo, digests["first"])
	}
}

func TestArtifactIsOneTarGzipLayerWithSourceAnnotations(t *testing.T) {
	f := newFixture(t)
	b := builder()
	ctx := context.Background()
	in := f.input()
	built, err := b.Build(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	repo := ocitest.Repo(f.reg, "kokumi/team/podinfo-edge")
	parent := "sha256:" + strings.Repeat("ab", 32)
	d, err := b.Push(ctx, repo, in, built, parent)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := (&oci.Client{}).Pull(ctx, repo, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(pulled.Layers) != 1 || pulled.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Fatalf("layers = %+v, want one application/vnd.oci.image.layer.v1.tar+gzip", pulled.Layers)
	}
	files, err := oci.UntarGz(pulled.Layers[0].Data, true)
	if err != nil {
		t.Fatal(err)
	}
	if string(files[preparation.ManifestsFile]) != string(built.Manifests) {
		t.Errorf("layer holds %v, want %s with the manifests", keys(files), preparation.ManifestsFile)
	}
	a := build.Annotations(in, built, parent)
	for k, want := range map[string]string{
		"org.opencontainers.image.source":      f.chartURL,
		"org.opencontainers.image.version":     "6.14.1",
		"org.opencontainers.image.base.name":   oci.TrimScheme(f.chartURL) + ":6.14.1",
		"org.opencontainers.image.base.digest": f.chartDigest,
		build.AnnotationParentDigest:           parent,
	} {
		if a[k] != want {
			t.Errorf("annotation %s = %q, want %q", k, a[k], want)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestVendorCopiesEveryPlatformAndPointsThere(t *testing.T) {
	f := newFixture(t)
	vendor := ocitest.Start(t)
	in := f.input()
	in.VendorRegistry = vendor.Addr
	built, err := builder().Build(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	src := strings.ReplaceAll(f.reg.Addr, ":", "-")
	wantPodinfo := vendor.Addr + "/" + src + "/stefanprodan/podinfo@" + f.podinfoDigest
	if !strings.Contains(string(built.Manifests), "image: "+wantPodinfo) {
		t.Errorf("manifests do not point at the vendored %s:\n%s", wantPodinfo, built.Manifests)
	}
	if n := ocitest.Index(t, wantPodinfo); n != 2 {
		t.Errorf("vendored index lists %d platforms, want 2", n)
	}
	if !ocitest.Exists(t, vendor.Addr+"/"+src+"/library/busybox@"+f.initDigest) {
		t.Error("busybox was not vendored")
	}
}

func TestImageAlreadyByDigestIsKept(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	byDigest := f.reg.Addr + "/library/busybox@" + f.initDigest
	in.Render.Values["initImage"] = byDigest
	built, err := builder().Build(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range built.Images {
		if p.Original == byDigest && p.Pinned != byDigest {
			t.Errorf("image by digest pinned to %s, want it kept", p.Pinned)
		}
	}
}

func TestManifestBundleRenders(t *testing.T) {
	f := newFixture(t)
	url := "oci://" + ocitest.Repo(f.reg, "bundles/web")
	ocitest.PushBundle(t, oci.TrimScheme(url), "v1", map[string]string{
		"b/deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: web, image: " + f.podinfoImage + "}\n",
		"a/ns.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata: {name: web}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: web}\n",
		"README.md":     "not a manifest",
	})
	built, err := builder().Build(context.Background(), build.Input{
		SourceURL: url, Version: "v1", Render: render.Options{ReleaseName: "x", TargetNamespace: "apps"},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := string(built.Manifests)
	if strings.Index(m, "kind: Namespace") > strings.Index(m, "kind: Deployment") {
		t.Errorf("files not in path order:\n%s", m)
	}
	if strings.Count(m, "namespace: apps") != 1 {
		t.Errorf("want only the Deployment in namespace apps (Namespace and ClusterRole are cluster-scoped):\n%s", m)
	}
	if !strings.Contains(m, "@"+f.podinfoDigest) {
		t.Errorf("bundle image not pinned:\n%s", m)
	}
}

func reason(t *testing.T, err error) build.Reason {
	t.Helper()
	var pe *build.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *build.Error", err)
	}
	return pe.Reason
}

func TestFailuresNameTheStepAndWhatFailed(t *testing.T) {
	f := newFixture(t)
	badChart := "oci://" + ocitest.Repo(f.reg, "charts/broken")
	files := map[string]string{}
	for k, v := range ocitest.PodinfoFiles {
		files[k] = v
	}
	files["templates/broken.yaml"] = "{{ .Values.missing.deeper }}\n{{ if }}"
	ocitest.PushChart(t, oci.TrimScheme(badChart), "1.0.0", "podinfo", "1.0.0", ocitest.Chart(t, "podinfo", files))

	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := down.Addr().String()
	_ = down.Close()

	for _, c := range []struct {
		name     string
		change   func(*build.Input)
		reason   build.Reason
		mentions []string
	}{
		{"unknown version", func(in *build.Input) { in.Version = "9.9.9" }, build.ReasonSourceNotFound, []string{"9.9.9", "does not exist"}},
		{"bad chart", func(in *build.Input) { in.SourceURL, in.Version = badChart, "1.0.0" }, build.ReasonRenderFailed, []string{"broken.yaml"}},
		{"unresolvable image", func(in *build.Input) { in.Render.Values["initImage"] = f.reg.Addr + "/library/nothing:1" },
			build.ReasonImageResolutionFailed, []string{f.reg.Addr + "/library/nothing:1"}},
		{"source registry down", func(in *build.Input) { in.SourceURL = "oci://" + downAddr + "/charts/podinfo" },
			build.ReasonSourceNotFound, []string{downAddr, "reachable"}},
		{"vendor registry down", func(in *build.Input) { in.VendorRegistry = downAddr },
			build.ReasonImageResolutionFailed, []string{downAddr}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := f.input()
			c.change(&in)
			_, err := builder().Build(context.Background(), in)
			if err == nil {
				t.Fatal("build succeeded")
			}
			if got := reason(t, err); got != c.reason {
				t.Errorf("reason = %s, want %s (%v)", got, c.reason, err)
			}
			for _, m := range c.mentions {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not mention %q", err, m)
				}
			}
		})
	}

	t.Run("push registry down", func(t *testing.T) {
		in := f.input()
		b := builder()
		built, err := b.Build(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.Push(context.Background(), downAddr+"/kokumi/x", in, built, "")
		if got := reason(t, err); got != build.ReasonPushFailed || !strings.Contains(err.Error(), downAddr) {
			t.Errorf("push to a stopped registry: %s %v", got, err)
		}
	})
}

func TestTheConfigurationDigestIsTheValuesWithoutWhatIsEachOrdersOwn(t *testing.T) {
	values := func(replicas any) map[string]any {
		return map[string]any{"replicaCount": replicas, "ui": map[string]any{"message": "hi", "color": "blue"}}
	}
	staging := build.ConfigurationDigest(render.Options{ReleaseName: "podinfo-staging", TargetNamespace: "staging", Values: values(3.0)})
	prod := build.ConfigurationDigest(render.Options{ReleaseName: "podinfo-prod", TargetNamespace: "prod", Values: values(3.0)})
	if staging == "" || staging != prod {
		t.Errorf("the same values under another release name and namespace: %q, %q", staging, prod)
	}
	if zero := build.ConfigurationDigest(render.Options{Values: values(0.0)}); zero == staging {
		t.Error("zero replicas have the same configuration as three")
	}
	if crds := build.ConfigurationDigest(render.Options{Values: values(3.0), IncludeCRDs: true}); crds == staging {
		t.Error("rendering the CRDs too has the same configuration")
	}
	if build.ConfigurationDigest(render.Options{}) != build.ConfigurationDigest(render.Options{Values: map[string]any{}}) {
		t.Error("no values differ from empty values")
	}
}

func TestImagesOutsideThePodSpecsAreRecordedNotPinned(t *testing.T) {
	f := newFixture(t)
	url := "oci://" + ocitest.Repo(f.reg, "bundles/rollout")
	ocitest.PushBundle(t, oci.TrimScheme(url), "v1", map[string]string{
		"rollout.yaml": "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: web, image: " + f.podinfoImage + "}\n",
		"deploy.yaml":  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: api, image: " + f.initImage + "}\n",
	})
	in := build.Input{SourceURL: url, Version: "v1", Render: render.Options{ReleaseName: "x", TargetNamespace: "apps"}}
	built, err := builder().Build(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := "Rollout/web: spec.template.spec.containers[0].image (" + f.podinfoImage + ")"
	if len(built.Hidden.Unpinned) != 1 || built.Hidden.Unpinned[0] != want || built.Hidden.Pinned() {
		t.Errorf("hidden = %+v, want %q", built.Hidden, want)
	}
	if len(built.Images) != 1 || built.Images[0].Original != f.initImage {
		t.Errorf("images = %+v, want only the Deployment's", built.Images)
	}
	if built.ConfigurationDigest != build.ConfigurationDigest(in.Render) {
		t.Errorf("configuration digest %q", built.ConfigurationDigest)
	}
}

// A tenant's Product names its source, its images and its vendor registry: with
// --allowed-registries an admin keeps the controller from fetching from (or pushing to) any
// other address it reaches, and the Order says which field names which registry.
func TestOnlyAllowedRegistriesAreReached(t *testing.T) {
	f := newFixture(t)
	source := strings.SplitN(strings.TrimPrefix(f.chartURL, "oci://"), "/", 2)[0]
	cfg := config.Config{BundledRegistry: "bundled.kokumi-system:5000", AllowedRegistries: []string{"ghcr.io", "*.example.com"}}
	b := builder()
	b.Allowed = cfg.RegistryAllowed
	_, err := b.Build(context.Background(), f.input())
	var be *build.Error
	if !errors.As(err, &be) || be.Reason != build.ReasonRegistryNotAllowed || !strings.Contains(err.Error(), "spec.source.url") || !strings.Contains(err.Error(), source) {
		t.Fatalf("a source on a registry not allowed: %v", err)
	}
	// The source's registry allowed, the images (on the same registry here, and the init image)
	// are checked one by one.
	cfg.AllowedRegistries = []string{source}
	b.Allowed = cfg.RegistryAllowed
	if _, err := b.Build(context.Background(), f.input()); err != nil {
		t.Fatalf("everything on an allowed registry: %v", err)
	}
	in := f.input()
	in.Render.Values["initImage"] = "docker.io/library/busybox:1.37"
	_, err = b.Build(context.Background(), in)
	if !errors.As(err, &be) || be.Reason != build.ReasonRegistryNotAllowed || !strings.Contains(err.Error(), "image docker.io/library/busybox:1.37") || !strings.Contains(err.Error(), "registry docker.io ") {
		t.Fatalf("an image on a registry not allowed: %v", err)
	}
	in = f.input()
	in.VendorRegistry = "10.0.0.1:5000"
	if _, err = b.Build(context.Background(), in); !errors.As(err, &be) || be.Reason != build.ReasonRegistryNotAllowed || !strings.Contains(err.Error(), "spec.images.registry") {
		t.Fatalf("a vendor registry not allowed: %v", err)
	}
	for host, want := range map[string]bool{"GHCR.io": true, "ghcr.io:443": false, "registry.example.com": true, "registry.example.com:5000": true, "example.com": false, "bundled.kokumi-system:5000": true, "10.0.0.1": false} {
		cfg.AllowedRegistries = []string{"ghcr.io", "*.example.com"}
		if got := cfg.RegistryAllowed(host); got != want {
			t.Errorf("RegistryAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}
