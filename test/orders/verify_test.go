package orders

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"oras.land/oras-go/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
	"github.com/kokumi-dev/kokumi/internal/sourcesig/sigtest"
)

// trustedKeys creates a ConfigMap of public keys in Kokumi's namespace, as an admin does;
// labelled says whether the admin marks it as trusted keys.
func trustedKeys(t *testing.T, name string, labelled bool, keys ...sigtest.Key) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace}, Data: map[string]string{}}
	if labelled {
		cm.Labels = map[string]string{v1.TrustedKeysLabel: "true"}
	}
	for i, k := range keys {
		cm.Data[string(rune('a'+i))+".pub"] = string(k.Public)
	}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// digestOf resolves repository:tag on a registry on loopback.
func digestOf(t *testing.T, repository, tag string) string {
	t.Helper()
	repo, err := (&oci.Client{}).Repository(repository)
	if err != nil {
		t.Fatal(err)
	}
	d, err := repo.Resolve(context.Background(), tag)
	if err != nil {
		t.Fatalf("resolve %s:%s: %v", repository, tag, err)
	}
	return d.Digest.String()
}

func TestVerifiedSourcesRenderAndUnverifiedOnesAreRefused(t *testing.T) {
	ctx := context.Background()
	publisher, stranger := sigtest.NewKey(t), sigtest.NewKey(t)
	trustedKeys(t, "publishers", true, publisher)
	trustedKeys(t, "tenant-picked", false, stranger)

	src := newSource(t)
	chartRepo := oci.TrimScheme(src.chartURL)
	chart := digestOf(t, chartRepo, "6.14.1")
	initRepo := strings.TrimSuffix(src.initImage, ":1.37")
	sigtest.Sign(t, "cosign", publisher, chartRepo+"@"+chart)
	sigtest.Sign(t, "cosign-v3", publisher, src.podinfoRepo+"@"+src.podinfoDigest)
	sigtest.Sign(t, "cosign", publisher, initRepo+"@"+src.initDigest)

	// Unsigned, signed by a stranger, and tampered with (another chart under a signed chart's
	// signature) versions of the chart.
	files := func(extra string) map[string]string {
		f := map[string]string{}
		for k, v := range ocitest.PodinfoFiles {
			f[k] = v
		}
		f["templates/extra.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + extra + "\n"
		return f
	}
	unsigned := ocitest.PushChart(t, chartRepo, "6.15.0-unsigned", "podinfo", "6.15.0", ocitest.Chart(t, "podinfo", files("unsigned")))
	strangers := ocitest.PushChart(t, chartRepo, "6.15.0-stranger", "podinfo", "6.15.0", ocitest.Chart(t, "podinfo", files("stranger")))
	sigtest.Sign(t, "cosign", stranger, chartRepo+"@"+strangers)
	good := ocitest.PushChart(t, chartRepo, "6.15.0-good", "podinfo", "6.15.0", ocitest.Chart(t, "podinfo", files("good")))
	sigtest.Sign(t, "cosign", publisher, chartRepo+"@"+good)
	tampered := ocitest.PushChart(t, chartRepo, "6.15.0-tampered", "podinfo", "6.15.0", ocitest.Chart(t, "podinfo", files("tampered")))
	// An unsigned chart whose render fails: refused for its signature, it never renders (a
	// render would fail it with RenderFailed).
	bombFiles := files("bomb")
	bombFiles["templates/bomb.yaml"] = "{{ fail \"this chart must never render\" }}\n"
	bomb := ocitest.PushChart(t, chartRepo, "6.15.0-bomb", "podinfo", "6.15.0", ocitest.Chart(t, "podinfo", bombFiles))
	goodSig, _ := sourcesig.SignatureTag(good)
	tamperedSig, _ := sourcesig.SignatureTag(tampered)
	sigtest.Retag(t, chartRepo+":"+goodSig, chartRepo+":"+tamperedSig)

	ns := newNamespace(t)
	prod := src.product(t, ns, "podinfo", "", src.values("one"))
	editProduct := func(edit func(*v1.Product)) {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
			t.Fatal(err)
		}
		edit(prod)
		if err := env.Client.Update(ctx, prod); err != nil {
			t.Fatal(err)
		}
	}
	editProduct(func(p *v1.Product) { p.Spec.Verify = &v1.VerifySpec{PublicKeys: []string{"publishers"}} })
	order(t, ns, "signed", "podinfo", "", v1.PromotionAutomatic)
	first := waitReady(t, ns, "signed", v1.ReasonRendered).Status.LatestPreparation

	refused := func(t *testing.T, reason string, mentions ...string) {
		t.Helper()
		o := waitReady(t, ns, "signed", reason)
		for _, m := range mentions {
			if !strings.Contains(readyMessage(o), m) {
				t.Errorf("message %q does not name %q", readyMessage(o), m)
			}
		}
		if n := len(preparations(t, ns, "signed")); n != 1 || o.Status.LatestPreparation != first {
			t.Errorf("after a refusal: %d Preparations, latest %s; want only %s", n, o.Status.LatestPreparation, first)
		}
		if sv := servingOf(t, ns, "signed"); sv.Spec.PreparationName != first {
			t.Errorf("the Serving moved to %q", sv.Spec.PreparationName)
		}
	}
	for _, c := range []struct {
		version, digest, reason string
	}{
		{"6.15.0-unsigned", unsigned, v1.ReasonSignatureMissing},
		{"6.15.0-stranger", strangers, v1.ReasonUntrustedSigner},
		{"6.15.0-tampered", tampered, v1.ReasonSignatureInvalid},
		{"6.15.0-bomb", bomb, v1.ReasonSignatureMissing},
	} {
		t.Run(c.version, func(t *testing.T) {
			editProduct(func(p *v1.Product) { p.Spec.Source.Version = c.version })
			refused(t, c.reason, "source "+src.chartURL, c.digest)
			if m := readyMessage(getOrder(t, ns, "signed")); strings.Contains(m, "must never render") {
				t.Errorf("the unsigned chart rendered before its signature was checked: %q", m)
			}
		})
	}

	t.Run("a key ConfigMap no admin marked is not trusted", func(t *testing.T) {
		editProduct(func(p *v1.Product) {
			p.Spec.Source.Version = "6.15.0-stranger"
			p.Spec.Verify.PublicKeys = []string{"tenant-picked"}
		})
		refused(t, v1.ReasonTrustedKeysInvalid, "tenant-picked", v1.TrustedKeysLabel)
	})

	t.Run("signed by a trusted key renders", func(t *testing.T) {
		editProduct(func(p *v1.Product) {
			p.Spec.Source.Version = "6.15.0-good"
			p.Spec.Verify.PublicKeys = []string{"publishers"}
		})
		eventually(t, "a Preparation of the signed chart", func() (bool, string) {
			o := getOrder(t, ns, "signed")
			return o.Status.LatestPreparation != first && readyReason(o) == v1.ReasonRendered, readyMessage(o)
		})
		publisherID := trustedIDs(t, publisher)
		for _, p := range preparations(t, ns, "signed") {
			pv := p.Spec.Provenance
			if pv == nil || pv.Sources != v1.SourcesVerified || !slices.Equal(pv.VerifiedBy, []string{publisherID}) {
				t.Fatalf("Preparation %s: provenance %+v, want its sources verified by %s", p.Name, pv, publisherID)
			}
			provenanceAttached(t, &p)
		}
	})

	t.Run("a Product that asks no verification gets a provenance that says so", func(t *testing.T) {
		src.product(t, ns, "plain", "", src.values("plain"))
		order(t, ns, "plain", "plain", "", v1.PromotionManual)
		waitReady(t, ns, "plain", v1.ReasonRendered)
		preps := preparations(t, ns, "plain")
		if len(preps) != 1 || preps[0].Spec.Provenance == nil || preps[0].Spec.Provenance.Sources != v1.SourcesNotAsked || len(preps[0].Spec.Provenance.VerifiedBy) != 0 {
			t.Fatalf("Preparations %+v, want one whose provenance says its sources were not verified", preps)
		}
		provenanceAttached(t, &preps[0])
	})

	t.Run("an image that loses its signature is refused at the next render", func(t *testing.T) {
		latest := getOrder(t, ns, "signed").Status.LatestPreparation
		sigtest.Unsign(t, initRepo, src.initDigest)
		editProduct(func(p *v1.Product) { p.Spec.Render.Helm.Values = jsonValues(t, src.values("two")) })
		o := waitReady(t, ns, "signed", v1.ReasonSignatureMissing)
		if m := readyMessage(o); !strings.Contains(m, "image "+src.initImage) || !strings.Contains(m, src.initDigest) {
			t.Errorf("message %q does not name the image %s and its digest %s", m, src.initImage, src.initDigest)
		}
		if o.Status.LatestPreparation != latest {
			t.Errorf("latest Preparation %s, want %s kept", o.Status.LatestPreparation, latest)
		}
	})

	t.Run("keyless verification is refused at admission", func(t *testing.T) {
		p := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "keyless", Namespace: ns}, Spec: v1.ProductSpec{
			Source: v1.ProductSource{URL: src.chartURL},
			Verify: &v1.VerifySpec{PublicKeys: []string{"publishers"}, Keyless: jsonValues(t, map[string]any{"issuer": "https://accounts.example.com"})},
		}}
		err := env.Client.Create(ctx, p)
		if err == nil || !strings.Contains(err.Error(), "keyless") {
			t.Fatalf("a Product asking keyless verification: %v, want refused naming keyless", err)
		}
	})
}

// trustedIDs is the key id of a cosign key, as Kokumi names it.
func trustedIDs(t *testing.T, k sigtest.Key) string {
	t.Helper()
	keys, err := record.ParseTrustedKeys(k.Public)
	if err != nil {
		t.Fatal(err)
	}
	return keys.Set()
}

// provenanceAttached checks that the Preparation's artifact carries the provenance its spec
// names (a layer of its sha256-<hex>.att), signed by a key of kokumi-public-keys.
func provenanceAttached(t *testing.T, p *v1.Preparation) {
	t.Helper()
	ctx := context.Background()
	repository, digest := preparation.ArtifactLocation(cfg.BundledRegistry, p)
	keys, err := (&record.Keys{Client: env.Client, Namespace: cfg.Namespace}).Trusted(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(keys.IDs(), p.Spec.Provenance.KeyID) {
		t.Errorf("the provenance of %s is signed by %s, which kokumi-public-keys does not list (%v)", p.Name, p.Spec.Provenance.KeyID, keys.IDs())
	}
	repo, err := bundledClient(t, registryCredentials(t).Puller).Repository(repository)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := record.AttestationTag(digest)
	if err != nil {
		t.Fatal(err)
	}
	_, data, err := oras.FetchBytes(ctx, repo, tag, oras.DefaultFetchBytesOptions)
	if err != nil {
		t.Fatalf("read %s:%s: %v", repository, tag, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		if l.Digest.String() == p.Spec.Provenance.Digest && l.Annotations[record.AnnotationPredicateType] == record.ProvenancePredicateType {
			return
		}
	}
	t.Errorf("the artifact %s@%s carries no provenance %s", repository, digest, p.Spec.Provenance.Digest)
}

func TestAnOrderRefusedForItsSignerRendersOnceAnAdminTrustsTheKey(t *testing.T) {
	ctx := context.Background()
	publisher, other := sigtest.NewKey(t), sigtest.NewKey(t)
	trustedKeys(t, "rotating", true, other)
	src := newSource(t)
	chartRepo := oci.TrimScheme(src.chartURL)
	sigtest.Sign(t, "cosign", publisher, chartRepo+"@"+digestOf(t, chartRepo, "6.14.1"))
	sigtest.Sign(t, "cosign", publisher, src.podinfoRepo+"@"+src.podinfoDigest)
	sigtest.Sign(t, "cosign", publisher, strings.TrimSuffix(src.initImage, ":1.37")+"@"+src.initDigest)

	ns := newNamespace(t)
	prod := src.product(t, ns, "podinfo", "", src.values("one"))
	prod.Spec.Verify = &v1.VerifySpec{PublicKeys: []string{"rotating"}}
	if err := env.Client.Update(ctx, prod); err != nil {
		t.Fatal(err)
	}
	order(t, ns, "signed", "podinfo", "", v1.PromotionManual)
	// Refused until its render's backoff is long: what renders it next is the key's change,
	// not the next try.
	var notBefore time.Time
	eventually(t, "the Order refused four times in a row", func() (bool, string) {
		o := getOrder(t, ns, "signed")
		if readyReason(o) != v1.ReasonUntrustedSigner || o.Status.RenderRetry == nil || o.Status.RenderRetry.Failures < 4 {
			return false, readyMessage(o)
		}
		notBefore = o.Status.RenderRetry.NotBefore.Time
		return true, ""
	})
	var cm corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: "rotating"}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["publisher.pub"] = string(publisher.Public)
	if err := env.Client.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	eventuallyWithin(t, 8*time.Second, "the Order rendered once the admin trusts its publisher's key", func() (bool, string) {
		o := getOrder(t, ns, "signed")
		return readyReason(o) == v1.ReasonRendered, readyMessage(o)
	})
	if rendered := time.Now(); !rendered.Before(notBefore) {
		t.Errorf("rendered at %s, %s after the key was added: not before its next try (%s), so not for the key's change",
			rendered.Format(time.RFC3339), rendered.Sub(added), notBefore.Format(time.RFC3339))
	}
}
