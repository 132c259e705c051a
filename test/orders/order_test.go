package orders

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// source is a registry on loopback holding the podinfo-like chart, a bundle and images.
type source struct {
	reg           *registry.Registry
	chartURL      string
	podinfoRepo   string
	podinfoDigest string
	initImage     string
	initDigest    string
}

func newSource(t *testing.T) *source {
	t.Helper()
	s := &source{reg: ocitest.Start(t)}
	s.podinfoRepo = ocitest.Repo(s.reg, "stefanprodan/podinfo")
	s.podinfoDigest = ocitest.PushImage(t, s.podinfoRepo+":6.14.1", 2)
	s.initImage = ocitest.Repo(s.reg, "library/busybox:1.37")
	s.initDigest = ocitest.PushImage(t, s.initImage, 1)
	s.chartURL = "oci://" + ocitest.Repo(s.reg, "charts/podinfo")
	ocitest.PushChart(t, oci.TrimScheme(s.chartURL), "6.14.1", "podinfo", "6.14.1", ocitest.PodinfoChart(t))
	return s
}

// values are the Helm values that point the chart at the loopback images.
func (s *source) values(message string) map[string]any {
	return map[string]any{
		"image":     map[string]any{"repository": s.podinfoRepo},
		"initImage": s.initImage,
		"ui":        map[string]any{"message": message},
	}
}

var namespaces int

func newNamespace(t *testing.T) string {
	t.Helper()
	namespaces++
	ns := fmt.Sprintf("orders-%d", namespaces)
	if err := env.CreateNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns
}

func jsonValues(t *testing.T, v map[string]any) *apiextensionsv1.JSON {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return &apiextensionsv1.JSON{Raw: raw}
}

func (s *source) product(t *testing.T, ns, name, targetNamespace string, values map[string]any) *v1.Product {
	t.Helper()
	p := &v1.Product{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.ProductSpec{
			Source:          v1.ProductSource{URL: s.chartURL, Version: "6.14.1"},
			TargetNamespace: targetNamespace,
			Render:          &v1.RenderSpec{Helm: &v1.HelmRender{Values: jsonValues(t, values)}},
			Images:          v1.ImageSpec{Policy: v1.ImagePolicyPin},
		},
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func order(t *testing.T, ns, name, product, targetNamespace string, mode v1.PromotionMode) {
	t.Helper()
	o := &v1.Order{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.OrderSpec{
			ProductRef:      v1.LocalObjectReference{Name: product},
			EnvironmentRef:  v1.LocalObjectReference{Name: "edge"},
			TargetNamespace: targetNamespace,
			Promotion:       v1.Promotion{Mode: mode},
		},
	}
	if err := env.Client.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	eventuallyWithin(t, waitTimeout, what, cond)
}

func getOrder(t *testing.T, ns, name string) *v1.Order {
	t.Helper()
	var o v1.Order
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &o); err != nil {
		t.Fatal(err)
	}
	return &o
}

// editOrder changes an Order, again on a conflict with the controller's status writes.
func editOrder(t *testing.T, ns, name string, edit func(*v1.Order)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o := getOrder(t, ns, name)
		edit(o)
		return env.Client.Update(context.Background(), o)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func preparations(t *testing.T, ns, orderName string) []v1.Preparation {
	t.Helper()
	var list v1.PreparationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []v1.Preparation
	for _, p := range list.Items {
		if p.Spec.OrderRef.Name == orderName {
			out = append(out, p)
		}
	}
	return out
}

// waitReady waits for the Order's Ready condition with reason, set by a reconcile of the
// Order, and returns the Order.
func waitReady(t *testing.T, ns, name, reason string) *v1.Order {
	t.Helper()
	var o *v1.Order
	eventually(t, fmt.Sprintf("order %s Ready reason %s", name, reason), func() (bool, string) {
		o = getOrder(t, ns, name)
		c := meta.FindStatusCondition(o.Status.Conditions, v1.ConditionReady)
		if c == nil {
			return false, "no Ready condition"
		}
		if c.Reason != reason || c.ObservedGeneration < 1 {
			return false, fmt.Sprintf("%s %s (generation %d): %s", c.Status, c.Reason, c.ObservedGeneration, c.Message)
		}
		return true, ""
	})
	return o
}

// rendered makes a source, a namespace, a Product podinfo of the podinfo-like chart (target
// namespace productTarget, values message "one") and an Order name of it in mode, and waits
// for its first Preparation, whose name it returns.
func rendered(t *testing.T, name, productTarget string, mode v1.PromotionMode) (src *source, ns string, prod *v1.Product, first string) {
	t.Helper()
	src = newSource(t)
	ns = newNamespace(t)
	prod = src.product(t, ns, "podinfo", productTarget, src.values("one"))
	order(t, ns, name, "podinfo", "", mode)
	return src, ns, prod, waitReady(t, ns, name, v1.ReasonRendered).Status.LatestPreparation
}

func readyMessage(o *v1.Order) string {
	if c := meta.FindStatusCondition(o.Status.Conditions, v1.ConditionReady); c != nil {
		return c.Message
	}
	return ""
}

func servingOf(t *testing.T, ns, name string) *v1.Serving {
	t.Helper()
	var s v1.Serving
	eventually(t, "serving "+name, func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s)
		return err == nil, fmt.Sprint(err)
	})
	return &s
}

func TestAutomaticOrderRendersAPinnedPreparationAndPromotesIt(t *testing.T) {
	ctx := context.Background()
	src := newSource(t)
	ns := newNamespace(t)
	src.product(t, ns, "podinfo-fleet", "podinfo", src.values("Hello from the edge"))
	order(t, ns, "podinfo-edge", "podinfo-fleet", "", v1.PromotionAutomatic)

	o := waitReady(t, ns, "podinfo-edge", v1.ReasonRendered)
	preps := preparations(t, ns, "podinfo-edge")
	if len(preps) != 1 {
		t.Fatalf("%d Preparations, want 1", len(preps))
	}
	p := preps[0]
	if o.Status.LatestPreparation != p.Name || !strings.HasPrefix(p.Name, "podinfo-edge-") {
		t.Errorf("latestPreparation %q, Preparation %q: want <order>-<short digest>", o.Status.LatestPreparation, p.Name)
	}
	if p.Name != "podinfo-edge-"+strings.TrimPrefix(p.Spec.Artifact.Digest, "sha256:")[:10] {
		t.Errorf("name %s is not <order>-<short artifact digest %s>", p.Name, p.Spec.Artifact.Digest)
	}
	if !metav1.IsControlledBy(&p, o) {
		t.Error("the Preparation is not owned by the Order")
	}
	// It names who wrote the Order's and the Product's spec, as the admission policy stamped them:
	// a gate that asks separation refuses their approvals of its automatic promotion.
	if a := p.Annotations[preparation.AnnotationAuthors]; a != env.AdminName || o.Annotations[preparation.AnnotationSpecWrittenBy] != env.AdminName {
		t.Errorf("authors %q, the Order's writer %q: want %s", a, o.Annotations[preparation.AnnotationSpecWrittenBy], env.AdminName)
	}
	s := p.Spec
	if s.ReleaseName != "podinfo-edge" || s.TargetNamespace != "podinfo" || o.Status.TargetNamespace != "podinfo" {
		t.Errorf("release %q, target namespace %q (order status %q): want the Order's name and the Product's namespace", s.ReleaseName, s.TargetNamespace, o.Status.TargetNamespace)
	}
	if s.Source.URL != src.chartURL || s.Source.Version != "6.14.1" || !strings.HasPrefix(s.Source.Digest, "sha256:") {
		t.Errorf("source %+v", s.Source)
	}
	wantRef := "oci://" + bundled.Addr + "/kokumi/" + ns + "/podinfo-edge@" + s.Artifact.Digest
	if s.Artifact.Ref != wantRef {
		t.Errorf("artifact ref %s, want %s", s.Artifact.Ref, wantRef)
	}
	if !inBundled(t, strings.TrimPrefix(s.Artifact.Ref, "oci://")) {
		t.Errorf("artifact %s is not in the bundled registry", s.Artifact.Ref)
	}
	pins := map[string]string{}
	for _, img := range s.Images {
		pins[img.Original] = img.Pinned
	}
	if pins[src.podinfoRepo+":6.14.1"] != src.podinfoRepo+"@"+src.podinfoDigest || pins[src.initImage] != src.reg.Addr+"/library/busybox@"+src.initDigest || len(pins) != 2 {
		t.Errorf("images %+v", s.Images)
	}
	if s.ConfigHash == "" || s.ParentDigest != "" || s.ImagesInBundledRegistry {
		t.Errorf("config hash %q, parent %q, in bundled registry %v", s.ConfigHash, s.ParentDigest, s.ImagesInBundledRegistry)
	}
	if !meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionReady) {
		t.Error("the new Preparation is not Ready")
	}
	eventually(t, "serving promoted", func() (bool, string) {
		sv := servingOf(t, ns, "podinfo-edge")
		return sv.Spec.PreparationName == p.Name && sv.Spec.OrderRef.Name == "podinfo-edge", sv.Spec.PreparationName
	})

	// The Preparation never changes.
	p.Spec.TargetNamespace = "elsewhere"
	if err := env.Client.Update(ctx, &p); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("changing a Preparation: %v, want refused as immutable", err)
	}

	// A new Preparation is announced by an event.
	eventually(t, "a Rendered event", func() (bool, string) {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == v1.ReasonRendered && e.Regarding.Name == "podinfo-edge" && strings.Contains(e.Note, p.Name) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
}

func TestTargetNamespaceOrderThenProductThenOrderNamespace(t *testing.T) {
	src := newSource(t)
	ns := newNamespace(t)
	src.product(t, ns, "with-home", "podinfo", src.values("hi"))
	src.product(t, ns, "homeless", "", src.values("hi"))
	order(t, ns, "override", "with-home", "team-a", v1.PromotionManual)
	order(t, ns, "product-home", "with-home", "", v1.PromotionManual)
	order(t, ns, "own-namespace", "homeless", "", v1.PromotionManual)
	for name, want := range map[string]string{"override": "team-a", "product-home": "podinfo", "own-namespace": ns} {
		o := waitReady(t, ns, name, v1.ReasonRendered)
		preps := preparations(t, ns, name)
		if len(preps) != 1 || preps[0].Spec.TargetNamespace != want || o.Status.TargetNamespace != want {
			t.Errorf("order %s: want target namespace %s, got %d Preparations %+v, status %q", name, want, len(preps), preps, o.Status.TargetNamespace)
		}
		if len(preps) == 1 && preps[0].Spec.ReleaseName != name {
			t.Errorf("order %s: release name %q, want the Order's name", name, preps[0].Spec.ReleaseName)
		}
	}
}

func TestSameRenderMakesNoNewPreparationAndAChangeMakesOneWithItsParent(t *testing.T) {
	ctx := context.Background()
	src, ns, prod, first := rendered(t, "web", "podinfo", v1.PromotionAutomatic)
	var o *v1.Order

	// A value the chart does not read renders the same bytes; an Environment of the namespace
	// and its labels are not part of what is rendered.
	v := src.values("one")
	v["unused"] = "x"
	prod.Spec.Render.Helm.Values = jsonValues(t, v)
	if err := env.Client.Update(ctx, prod); err != nil {
		t.Fatal(err)
	}
	envObj := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns, Labels: map[string]string{"tier": "a"}},
		Spec: v1.EnvironmentSpec{Project: "default"}}
	if err := env.Client.Create(ctx, envObj); err != nil {
		t.Fatal(err)
	}
	envObj.Labels["tier"] = "b"
	if err := env.Client.Update(ctx, envObj); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the no-op edit reconciled", func() (bool, string) {
		o = getOrder(t, ns, "web")
		return strings.HasPrefix(readyMessage(o), "Up to date"), readyMessage(o)
	})
	if n := len(preparations(t, ns, "web")); n != 1 || o.Status.LatestPreparation != first {
		t.Fatalf("a no-op edit made %d Preparations (latest %s, was %s)", n, o.Status.LatestPreparation, first)
	}

	// A change of values makes a new one, whose parent is the first.
	prod.Spec.Render.Helm.Values = jsonValues(t, src.values("two"))
	if err := env.Client.Update(ctx, prod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a second Preparation", func() (bool, string) {
		o = getOrder(t, ns, "web")
		return o.Status.LatestPreparation != first, o.Status.LatestPreparation
	})
	preps := preparations(t, ns, "web")
	if len(preps) != 2 {
		t.Fatalf("%d Preparations, want 2", len(preps))
	}
	var firstPrep, second v1.Preparation
	for _, p := range preps {
		if p.Name == first {
			firstPrep = p
		} else {
			second = p
		}
	}
	if second.Spec.ParentDigest != firstPrep.Spec.Artifact.Digest {
		t.Errorf("parent digest %q, want the first artifact %s", second.Spec.ParentDigest, firstPrep.Spec.Artifact.Digest)
	}
	eventually(t, "serving follows the newest", func() (bool, string) {
		sv := servingOf(t, ns, "web")
		return sv.Spec.PreparationName == second.Name, sv.Spec.PreparationName
	})

	// An image tag that moves makes another on the next resync, pinned to the new digest.
	moved := ocitest.PushImage(t, src.podinfoRepo+":6.14.1", 1)
	eventually(t, "a Preparation with the moved tag's digest", func() (bool, string) {
		for _, p := range preparations(t, ns, "web") {
			for _, img := range p.Spec.Images {
				if img.Pinned == src.podinfoRepo+"@"+moved {
					return true, ""
				}
			}
		}
		return false, "none pinned to " + moved
	})

	// A change of the Order's target namespace makes another.
	editOrder(t, ns, "web", func(o *v1.Order) { o.Spec.TargetNamespace = "moved" })
	eventually(t, "a Preparation for the new target namespace", func() (bool, string) {
		for _, p := range preparations(t, ns, "web") {
			if p.Spec.TargetNamespace == "moved" {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(preparations(t, ns, "web")))
	})
}

func TestManualModeLeavesTheServingToAPerson(t *testing.T) {
	ctx := context.Background()
	src, ns, prod, first := rendered(t, "manual", "", v1.PromotionManual)
	sv := servingOf(t, ns, "manual")
	if sv.Spec.PreparationName != "" {
		t.Fatalf("Manual mode promoted %s", sv.Spec.PreparationName)
	}
	sv.Spec.PreparationName, sv.Spec.PromotedBy = first, env.AdminName
	if err := env.Client.Update(ctx, sv); err != nil {
		t.Fatal(err)
	}
	prod.Spec.Render.Helm.Values = jsonValues(t, src.values("two"))
	if err := env.Client.Update(ctx, prod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a second Preparation", func() (bool, string) {
		n := len(preparations(t, ns, "manual"))
		return n == 2, fmt.Sprint(n)
	})
	if got := servingOf(t, ns, "manual").Spec.PreparationName; got != first {
		t.Errorf("Manual mode moved the Serving to %q, want the person's %q", got, first)
	}
}

func TestFailuresSayWhatFailedAndKeepThePreviousPreparation(t *testing.T) {
	ctx := context.Background()
	src, ns, prod, good := rendered(t, "fails", "", v1.PromotionAutomatic)

	broken := map[string]string{}
	for k, v := range ocitest.PodinfoFiles {
		broken[k] = v
	}
	broken["templates/broken.yaml"] = "{{ if }}"
	ocitest.PushChart(t, oci.TrimScheme(src.chartURL), "6.15.0-broken", "podinfo", "6.15.0", ocitest.Chart(t, "podinfo", broken))

	for _, c := range []struct {
		name     string
		edit     func(p *v1.Product)
		reason   string
		mentions string
	}{
		{"unknown version", func(p *v1.Product) { p.Spec.Source.Version = "9.9.9" }, v1.ReasonSourceNotFound, "9.9.9"},
		{"bad chart", func(p *v1.Product) { p.Spec.Source.Version = "6.15.0-broken" }, v1.ReasonRenderFailed, "broken.yaml"},
		{"unresolvable image", func(p *v1.Product) {
			p.Spec.Source.Version = "6.14.1"
			v := src.values("one")
			v["initImage"] = src.reg.Addr + "/library/gone:1"
			p.Spec.Render.Helm.Values = jsonValues(t, v)
		}, v1.ReasonImageResolutionFailed, src.reg.Addr + "/library/gone:1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
				t.Fatal(err)
			}
			c.edit(prod)
			if err := env.Client.Update(ctx, prod); err != nil {
				t.Fatal(err)
			}
			o := waitReady(t, ns, "fails", c.reason)
			if !strings.Contains(readyMessage(o), c.mentions) {
				t.Errorf("message %q does not name %q", readyMessage(o), c.mentions)
			}
			if n := len(preparations(t, ns, "fails")); n != 1 || o.Status.LatestPreparation != good {
				t.Errorf("after a failure: %d Preparations, latest %s; want only %s", n, o.Status.LatestPreparation, good)
			}
			if sv := servingOf(t, ns, "fails"); sv.Spec.PreparationName != good {
				t.Errorf("the Serving moved to %q", sv.Spec.PreparationName)
			}
		})
	}
}

func TestMissingProductThenCreated(t *testing.T) {
	src := newSource(t)
	ns := newNamespace(t)
	order(t, ns, "early", "later", "", v1.PromotionManual)
	o := waitReady(t, ns, "early", v1.ReasonProductNotFound)
	if !strings.Contains(readyMessage(o), `"later"`) || !strings.Contains(readyMessage(o), "spec.productRef.name") {
		t.Errorf("message %q", readyMessage(o))
	}
	src.product(t, ns, "later", "", src.values("x"))
	waitReady(t, ns, "early", v1.ReasonRendered)
}

func TestManifestBundleRendersWithoutHelm(t *testing.T) {
	ctx := context.Background()
	src := newSource(t)
	ns := newNamespace(t)
	url := "oci://" + ocitest.Repo(src.reg, "bundles/web")
	ocitest.PushBundle(t, oci.TrimScheme(url), "v1", map[string]string{
		"deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: web, image: " + src.podinfoRepo + ":6.14.1}\n",
	})
	p := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "bundle", Namespace: ns},
		Spec: v1.ProductSpec{Source: v1.ProductSource{URL: url, Version: "v1"}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	order(t, ns, "bundle", "bundle", "", v1.PromotionManual)
	waitReady(t, ns, "bundle", v1.ReasonRendered)
	preps := preparations(t, ns, "bundle")
	if len(preps) != 1 || len(preps[0].Spec.Images) != 1 || preps[0].Spec.Images[0].Pinned != src.podinfoRepo+"@"+src.podinfoDigest {
		t.Fatalf("preparations %+v", preps)
	}
	pulled, err := bundledClient(t, registryCredentials(t).Puller).Pull(ctx, strings.Split(strings.TrimPrefix(preps[0].Spec.Artifact.Ref, "oci://"), "@")[0], preps[0].Spec.Artifact.Digest)
	if err != nil {
		t.Fatal(err)
	}
	files, err := oci.UntarGz(pulled.Layers[0].Data, true)
	if err != nil {
		t.Fatal(err)
	}
	if m := string(files[preparation.ManifestsFile]); !strings.Contains(m, "namespace: "+ns) || !strings.Contains(m, "@"+src.podinfoDigest) {
		t.Errorf("pushed manifests:\n%s", m)
	}
}

func TestVendorIntoTheBundledRegistry(t *testing.T) {
	ctx := context.Background()
	src := newSource(t)
	ns := newNamespace(t)
	p := src.product(t, ns, "vendored", "", src.values("v"))
	p.Spec.Images.Policy = v1.ImagePolicyVendor
	if err := env.Client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	order(t, ns, "vendored", "vendored", "", v1.PromotionManual)
	eventually(t, "a vendored Preparation", func() (bool, string) {
		preps := preparations(t, ns, "vendored")
		for _, p := range preps {
			if p.Spec.ImagesInBundledRegistry {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(preps))
	})
	for _, prep := range preparations(t, ns, "vendored") {
		if !prep.Spec.ImagesInBundledRegistry {
			continue
		}
		// Under the namespace's own path, by digest: vendor/<namespace>/<source host>/<path>@sha256:…
		for _, img := range prep.Spec.Images {
			path := strings.TrimPrefix(img.Original, src.reg.Addr+"/")
			path = path[:strings.LastIndex(path, ":")] // the tag
			want := bundled.Addr + "/vendor/" + ns + "/" + strings.ReplaceAll(src.reg.Addr, ":", "-") + "/" + path + "@sha256:"
			if !strings.HasPrefix(img.Pinned, want) || !inBundled(t, img.Pinned) {
				t.Errorf("image %s vendored to %s: want it in the bundled registry as %s…", img.Original, img.Pinned, want)
			}
		}
	}
}

// TestTheBundledRegistryDownFailsThePushAndLosesNothing stops the bundled registry, then starts it
// again (t.Cleanup starts it however the test ends, for the tests after it).
func TestTheBundledRegistryDownFailsThePushAndLosesNothing(t *testing.T) {
	ctx := context.Background()
	src, ns, prod, good := rendered(t, "down", "", v1.PromotionAutomatic)

	addr := bundled.Addr
	if err := bundled.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	// The tests after this one need the registry: it comes back however this one ends.
	t.Cleanup(func() {
		if restarted {
			return
		}
		var err error
		if bundled, err = startBundled(addr); err != nil {
			t.Errorf("start the bundled registry again: %v", err)
		}
	})
	prod.Spec.Render.Helm.Values = jsonValues(t, src.values("two"))
	if err := env.Client.Update(ctx, prod); err != nil {
		t.Fatal(err)
	}
	o := waitReady(t, ns, "down", v1.ReasonPushFailed)
	if !strings.Contains(readyMessage(o), addr) {
		t.Errorf("message %q does not name the registry %s", readyMessage(o), addr)
	}
	if n := len(preparations(t, ns, "down")); n != 1 || o.Status.LatestPreparation != good {
		t.Errorf("with the registry down: %d Preparations, latest %s", n, o.Status.LatestPreparation)
	}
	var evs eventsv1.EventList
	eventually(t, "a PushFailed event", func() (bool, string) {
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == v1.ReasonPushFailed && e.Type == "Warning" {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(evs.Items))
	})

	var err error
	if bundled, err = startBundled(addr); err != nil {
		t.Fatal(err)
	}
	restarted = true
	// The next retry renders it.
	eventually(t, "rendered once the registry is back", func() (bool, string) {
		o = getOrder(t, ns, "down")
		return o.Status.LatestPreparation != good, readyMessage(o)
	})
}

func TestCredentialsSecretSignsInToAPrivateRegistry(t *testing.T) {
	ctx := context.Background()
	private := ocitest.StartWithAuth(t, "robot", "s3cret")
	ns := newNamespace(t)
	image := ocitest.Repo(private, "team/app:1.0")
	digest := ocitest.PushImage(t, image, 1)
	url := "oci://" + ocitest.Repo(private, "bundles/app")
	ocitest.PushBundle(t, oci.TrimScheme(url), "1.0", map[string]string{
		"app.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: app, image: " + image + "}\n",
	})
	p := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "private", Namespace: ns},
		Spec: v1.ProductSpec{Source: v1.ProductSource{URL: url, Version: "1.0", CredentialsRef: &v1.LocalObjectReference{Name: "pull"}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	order(t, ns, "private", "private", "", v1.PromotionManual)
	o := waitReady(t, ns, "private", v1.ReasonSourceNotFound)
	if !strings.Contains(readyMessage(o), `"pull"`) || !strings.Contains(readyMessage(o), "spec.source.credentialsRef") {
		t.Errorf("without its Secret: %q", readyMessage(o))
	}

	cfg := fmt.Sprintf(`{"auths":{%q:{"username":"robot","password":"s3cret"}}}`, private.Addr)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: ns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(cfg)},
	}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ns, "private", v1.ReasonRendered)
	preps := preparations(t, ns, "private")
	if len(preps) != 1 || len(preps[0].Spec.Images) != 1 || preps[0].Spec.Images[0].Pinned != ocitest.Repo(private, "team/app@"+digest) {
		t.Errorf("preparations %+v", preps)
	}
}

func TestPromotionGateHoldsAutomaticPromotion(t *testing.T) {
	ctx := context.Background()
	src := newSource(t)
	ns := newNamespace(t)
	src.product(t, ns, "podinfo", "", src.values("one"))
	o := &v1.Order{
		ObjectMeta: metav1.ObjectMeta{Name: "gated", Namespace: ns, Annotations: map[string]string{annotationHold: "staging soaking 12m of 30m"}},
		Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "prod"},
			Promotion: v1.Promotion{Mode: v1.PromotionAutomatic}},
	}
	if err := env.Client.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	o = waitReady(t, ns, "gated", v1.ReasonAwaitingStage)
	if !strings.Contains(readyMessage(o), "staging soaking 12m of 30m; the Serving keeps running what it runs") {
		t.Errorf("Ready message %q does not say why promotion waits", readyMessage(o))
	}
	if sv := servingOf(t, ns, "gated"); sv.Spec.PreparationName != "" {
		t.Fatalf("the gate held, yet the Serving runs %s", sv.Spec.PreparationName)
	}
	editOrder(t, ns, "gated", func(o *v1.Order) { delete(o.Annotations, annotationHold) })
	eventually(t, "promotion once the gate passes", func() (bool, string) {
		sv := servingOf(t, ns, "gated")
		return sv.Spec.PreparationName == o.Status.LatestPreparation, sv.Spec.PreparationName
	})
}

// A crash between creating a Preparation and marking it Ready leaves it not Ready: the next
// render finds it and marks it, so that Automatic promotion goes on.
func TestAPreparationLeftNotReadyIsMadeReady(t *testing.T) {
	ctx := context.Background()
	src := newSource(t)
	ns := newNamespace(t)
	src.product(t, ns, "podinfo", "", src.values("crash"))
	order(t, ns, "crashed", "podinfo", "", v1.PromotionManual)
	o := waitReady(t, ns, "crashed", v1.ReasonRendered)
	var prep v1.Preparation
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.Status.LatestPreparation}, &prep); err != nil {
		t.Fatal(err)
	}
	prep.Status.Conditions = nil // as if the controller died before its status write
	if err := env.Client.Status().Update(ctx, &prep); err != nil {
		t.Fatal(err)
	}
	editOrder(t, ns, "crashed", func(o *v1.Order) { o.Spec.Promotion.Mode = v1.PromotionAutomatic })
	eventually(t, "the Preparation Ready again and promoted", func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&prep), &prep); err != nil {
			return false, err.Error()
		}
		sv := servingOf(t, ns, "crashed")
		return meta.IsStatusConditionTrue(prep.Status.Conditions, v1.ConditionReady) && sv.Spec.PreparationName == prep.Name,
			fmt.Sprintf("Preparation conditions %+v, Serving runs %q", prep.Status.Conditions, sv.Spec.PreparationName)
	})
}
