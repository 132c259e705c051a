package orders

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/controller/registrycreds"
	"github.com/kokumi-dev/kokumi/internal/oci"
	ocibundled "github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// The bundled registry runs here as Kokumi ships it: authentication on, with the credentials
// the controller created at start. The tests play the attackers: a pod with no rights, Argo
// CD's read-only identity writing or deleting, and a tenant who names another namespace's
// artifacts in its Product.

// registryCredentials waits for the credentials the controller creates at start.
func registryCredentials(t *testing.T) oci.RegistryCredentials {
	t.Helper()
	var creds oci.RegistryCredentials
	eventually(t, "the bundled registry's credentials", func() (bool, string) {
		var s corev1.Secret
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: oci.RegistryCredentialsSecret}, &s); err != nil {
			return false, err.Error()
		}
		var err error
		creds, err = oci.ParseRegistryCredentials(s.Data)
		return err == nil, fmt.Sprint(err)
	})
	return creds
}

// bundledClient reaches the bundled registry as c (anonymously when c is empty).
func bundledClient(t *testing.T, c oci.Credential) *oci.Client {
	t.Helper()
	if c == (oci.Credential{}) {
		return &oci.Client{}
	}
	return &oci.Client{Credentials: oci.Credentials{bundled.Addr: c}}
}

// headAs reads ref (host/repo@digest) with go-containerregistry as c.
func headAs(t *testing.T, ref string, c oci.Credential) error {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	a := authn.Anonymous
	if c != (oci.Credential{}) {
		a = &authn.Basic{Username: c.Username, Password: c.Password}
	}
	_, err = remote.Head(r, remote.WithAuth(a))
	return err
}

// inBundled says whether ref is in the bundled registry, read as the puller.
func inBundled(t *testing.T, ref string) bool {
	t.Helper()
	return headAs(t, ref, registryCredentials(t).Puller) == nil
}

func TestControllerCreatesTheRegistryCredentialsAndArgoCDsAtStart(t *testing.T) {
	ctx := context.Background()
	creds := registryCredentials(t)
	if creds.Pusher.Username != oci.DefaultPusher || creds.Puller.Username != oci.DefaultPuller ||
		len(creds.Pusher.Password) < 40 || len(creds.Puller.Password) < 40 || creds.Pusher.Password == creds.Puller.Password {
		t.Errorf("credentials: pusher %q (%d characters), puller %q (%d characters): want two users with distinct long random passwords",
			creds.Pusher.Username, len(creds.Pusher.Password), creds.Puller.Username, len(creds.Puller.Password))
	}
	// The API server's puller, alone in a Secret of Kokumi's namespace.
	var puller corev1.Secret
	eventually(t, "the puller's Secret", func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: ocibundled.PullerSecret}, &puller)
		return err == nil, fmt.Sprint(err)
	})
	if string(puller.Data["username"]) != creds.Puller.Username || string(puller.Data["password"]) != creds.Puller.Password || len(puller.Data) != 2 {
		t.Errorf("the puller's Secret holds %d keys, username %q: want the puller alone", len(puller.Data), puller.Data["username"])
	}

	// No credential template is left in Argo CD's namespace: Argo CD gives a template to an
	// Application of any AppProject (each Serving's repository Secret, scoped to its project,
	// is test/serving's). Those of earlier versions, one for every namespace and one per
	// namespace, are deleted on upgrade.
	legacy := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: registrycreds.LegacyArgoCDSecret, Namespace: cfg.ArgoCDNamespace, Labels: map[string]string{"argocd.argoproj.io/secret-type": "repo-creds"}},
		StringData: map[string]string{"type": "oci", "url": "oci://" + bundled.Addr + "/", "username": creds.Puller.Username, "password": creds.Puller.Password},
	}
	ns := newNamespace(t)
	perNamespace := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "kokumi-bundled-registry-" + ns, Namespace: cfg.ArgoCDNamespace, Labels: map[string]string{
			"argocd.argoproj.io/secret-type": "repo-creds", "app.kubernetes.io/managed-by": "kokumi", registrycreds.LabelPullNamespace: ns,
		}},
		StringData: map[string]string{"type": "oci", "url": "oci://" + bundled.Addr + "/kokumi/" + ns + "/", "username": "pull-" + ns, "password": creds.NamespacePuller(ns).Password},
	}
	for _, s := range []*corev1.Secret{legacy, perNamespace} {
		if err := env.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// A controller that starts again keeps the credentials the registry already signs in.
	keeper := &registrycreds.Keeper{Client: env.Client, Reader: env.Client, Config: cfg}
	again, err := keeper.Ensure(ctx)
	if err != nil || again != creds {
		t.Errorf("a second start gave other credentials (%v)", err)
	}
	var all corev1.SecretList
	if err := env.Client.List(ctx, &all, client.InNamespace(cfg.ArgoCDNamespace), client.MatchingLabels{"argocd.argoproj.io/secret-type": "repo-creds"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range all.Items {
		t.Errorf("Argo CD's credential template %s (url %q, user %q) is left: any AppProject's Application would sign in with it", s.Name, s.Data["url"], s.Data["username"])
	}

	// Once they are gone, the minute's check writes nothing: a quiet hub costs no write request,
	// not even a delete answered 404.
	var writes atomic.Int64
	admin, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	counting := interceptor.NewClient(admin, interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			writes.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
	})
	quiet := &registrycreds.Keeper{Client: counting, Reader: env.Client, Config: cfg}
	if _, err := quiet.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if n := writes.Load(); n != 0 {
		t.Errorf("the credentials' check made %d delete requests on a hub with nothing to delete, want 0", n)
	}
}

func TestAttackersCannotReadPushOrDeleteInTheBundledRegistry(t *testing.T) {
	ctx := context.Background()
	creds := registryCredentials(t)
	src := newSource(t)
	ns := newNamespace(t)
	prep := vendoredPreparation(t, src, ns, "secret", "token: s3cr3t")
	repository, digest, _ := strings.Cut(oci.TrimScheme(prep.Spec.Artifact.Ref), "@")
	vendored := prep.Spec.Images[0].Pinned
	anonymous := oci.Credential{}

	// A pod with no rights reads neither the rendered manifests nor a vendored image.
	if _, err := bundledClient(t, anonymous).Pull(ctx, repository, digest); ocitest.Status(err) != http.StatusUnauthorized {
		t.Errorf("an anonymous client pulled the Preparation %s: %v, want 401", prep.Spec.Artifact.Ref, err)
	}
	if err := headAs(t, vendored, anonymous); ocitest.Status(err) != http.StatusUnauthorized {
		t.Errorf("an anonymous client read the vendored image %s: %v, want 401", vendored, err)
	}
	if err := headAs(t, vendored, oci.Credential{Username: creds.Puller.Username, Password: creds.Pusher.Password}); ocitest.Status(err) != http.StatusUnauthorized {
		t.Errorf("the puller with the pusher's password read %s: %v, want 401", vendored, err)
	}

	// Argo CD's puller reads them, and writes nothing.
	if pulled, err := bundledClient(t, creds.Puller).Pull(ctx, repository, digest); err != nil || pulled.Digest != digest {
		t.Errorf("the puller could not pull the Preparation: %v", err)
	}
	if err := headAs(t, vendored, creds.Puller); err != nil {
		t.Errorf("the puller could not read the vendored image: %v", err)
	}
	if _, err := bundledClient(t, creds.Puller).PushArtifact(ctx, repository, []byte("evil"), nil); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("the puller pushed to %s: %v, want 403", repository, err)
	}

	// Argo CD's puller deletes nothing (the controller, as the pusher, deletes only the
	// Preparations it collects: gc_test.go).
	for who, c := range map[string]oci.Credential{"the puller": creds.Puller} {
		repo, err := bundledClient(t, c).Repository(repository)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := repo.Resolve(ctx, digest)
		if err != nil {
			t.Fatal(err)
		}
		if err := repo.Delete(ctx, desc); ocitest.Status(err) != http.StatusForbidden {
			t.Errorf("%s deleted the Preparation: %v, want 403", who, err)
		}
		r, err := name.ParseReference(vendored)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Delete(r, remote.WithAuth(&authn.Basic{Username: c.Username, Password: c.Password})); ocitest.Status(err) != http.StatusForbidden {
			t.Errorf("%s deleted the vendored image: %v, want 403", who, err)
		}
	}
	if !inBundled(t, repository+"@"+digest) || !inBundled(t, vendored) {
		t.Error("the Preparation or its vendored image is gone")
	}

	// The namespace's puller, which Argo CD signs in as for the namespace's Servings, reads its
	// Preparation; another namespace's reads neither it nor its vendored image, knowing their
	// digests.
	ownPuller := creds.NamespacePuller(ns)
	if err := headAs(t, repository+"@"+digest, ownPuller); err != nil {
		t.Errorf("the namespace's puller could not read its Preparation: %v", err)
	}
	if err := headAs(t, vendored, ownPuller); err != nil {
		t.Errorf("the namespace's puller could not read its vendored image: %v", err)
	}
	other := newNamespace(t)
	otherPuller := creds.NamespacePuller(other)
	if _, err := bundledClient(t, otherPuller).Pull(ctx, repository, digest); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("namespace %s's puller pulled %s's Preparation: %v, want 403", other, ns, err)
	}
	if err := headAs(t, vendored, otherPuller); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("namespace %s's puller read %s's vendored image: %v, want 403", other, ns, err)
	}
}

func TestAnOrderReadsNoOtherNamespacesArtifactsFromTheBundledRegistry(t *testing.T) {
	ctx := context.Background()
	src := newSource(t)
	victim := newNamespace(t)
	prep := vendoredPreparation(t, src, victim, "app", "password: hunter2")
	repository, digest, _ := strings.Cut(oci.TrimScheme(prep.Spec.Artifact.Ref), "@")
	attacker := newNamespace(t)

	// The victim's Preparation as the attacker's source: the controller would pull it as the
	// pusher and render the victim's manifests into the attacker's Preparation.
	steal := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: attacker},
		Spec: v1.ProductSpec{Source: v1.ProductSource{URL: "oci://" + repository, Version: digest}}}
	if err := env.Client.Create(ctx, steal); err != nil {
		t.Fatal(err)
	}
	order(t, attacker, "steal", "steal", "", v1.PromotionManual)
	o := waitReady(t, attacker, "steal", v1.ReasonSourceNotFound)
	if !strings.Contains(readyMessage(o), "belongs to namespace "+victim) {
		t.Errorf("the attacker's Order says %q, want a refusal naming the victim's namespace", readyMessage(o))
	}

	// The victim's vendored image (pulled with the victim's own registry credentials) as an
	// image of the attacker's bundle, copied into the attacker's namespace.
	vendored := prep.Spec.Images[0].Pinned
	bundle := "oci://" + ocitest.Repo(src.reg, "bundles/steal")
	ocitest.PushBundle(t, oci.TrimScheme(bundle), "v1", map[string]string{
		"deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: steal}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: c, image: " + vendored + "}\n",
	})
	copyImage := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: attacker},
		Spec: v1.ProductSpec{Source: v1.ProductSource{URL: bundle, Version: "v1"}, Images: v1.ImageSpec{Policy: v1.ImagePolicyVendor}}}
	if err := env.Client.Create(ctx, copyImage); err != nil {
		t.Fatal(err)
	}
	order(t, attacker, "copy", "copy", "", v1.PromotionManual)
	o = waitReady(t, attacker, "copy", v1.ReasonImageResolutionFailed)
	if !strings.Contains(readyMessage(o), "belongs to namespace "+victim) {
		t.Errorf("the attacker's Order says %q, want a refusal naming the victim's namespace", readyMessage(o))
	}
	if n := len(preparations(t, attacker, "steal")) + len(preparations(t, attacker, "copy")); n != 0 {
		t.Errorf("the attacker got %d Preparations", n)
	}
}

// vendoredPreparation renders an Order name of a Product name that vendors its images into the
// bundled registry, with message in its values, and returns its Preparation.
func vendoredPreparation(t *testing.T, src *source, ns, name, message string) v1.Preparation {
	t.Helper()
	p := src.product(t, ns, name, "", src.values(message))
	p.Spec.Images.Policy = v1.ImagePolicyVendor
	if err := env.Client.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	order(t, ns, name, name, "", v1.PromotionManual)
	var prep v1.Preparation
	eventually(t, "a vendored Preparation pushed with authentication on", func() (bool, string) {
		for _, p := range preparations(t, ns, name) {
			if p.Spec.ImagesInBundledRegistry {
				prep = p
				return true, ""
			}
		}
		return false, readyMessage(getOrder(t, ns, name))
	})
	return prep
}
