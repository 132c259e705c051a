package registry_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
)

// The tests below play the attacker against the bundled registry on loopback: a pod with no
// credentials, Argo CD's read-only identity trying to write or delete, and the pusher trying
// to delete a blob.

func ggcrAuth(c oci.Credential) remote.Option {
	if c == (oci.Credential{}) {
		return remote.WithAuth(authn.Anonymous)
	}
	return remote.WithAuth(&authn.Basic{Username: c.Username, Password: c.Password})
}

func raw(t *testing.T, method, url string, c oci.Credential) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Username != "" {
		req.SetBasicAuth(c.Username, c.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}

func TestBundledRegistryLetsThePusherPushAndDeleteManifestsThePullerPullAndNobodyElseIn(t *testing.T) {
	ctx := context.Background()
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	reg := ocitest.StartWithCredentials(t, creds)
	anonymous := oci.Credential{}
	wrong := oci.Credential{Username: creds.Pusher.Username, Password: creds.Puller.Password}
	client := func(c oci.Credential) *oci.Client {
		if c == anonymous {
			return &oci.Client{}
		}
		return &oci.Client{Credentials: oci.Credentials{reg.Addr: c}}
	}

	// The pusher (oras) pushes a Preparation-like artifact; go-containerregistry a vendored image.
	repo := ocitest.Repo(reg, "kokumi/team-a/podinfo")
	layer, err := oci.TarGz(map[string][]byte{"manifests.yaml": []byte("kind: Secret\n")})
	if err != nil {
		t.Fatal(err)
	}
	artifact, err := client(creds.Pusher).PushArtifact(ctx, repo, layer, nil)
	if err != nil {
		t.Fatalf("the pusher could not push: %v", err)
	}
	image := ocitest.Repo(reg, "vendor/team-a/ghcr.io/app")
	imageDigest := ocitest.PushImage(t, image+":1", 1)
	imageRef, err := name.ParseReference(image + "@" + imageDigest)
	if err != nil {
		t.Fatal(err)
	}

	// The /v2/ ping challenges a client without credentials, as registry clients expect.
	resp := raw(t, http.MethodGet, "http://"+reg.Addr+"/v2/", anonymous)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Basic realm="kokumi-registry"` ||
		resp.Header.Get("Docker-Distribution-API-Version") != "registry/2.0" {
		t.Errorf("anonymous ping: %d, WWW-Authenticate %q, API version %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), resp.Header.Get("Docker-Distribution-API-Version"))
	}
	if resp := raw(t, http.MethodGet, "http://"+reg.Addr+"/v2/", creds.Puller); resp.StatusCode != http.StatusOK {
		t.Errorf("the puller's ping: %d, want 200", resp.StatusCode)
	}
	if resp := raw(t, http.MethodGet, "http://"+reg.Addr+registry.HealthPath, anonymous); resp.StatusCode != http.StatusOK {
		t.Errorf("the health check: %d, want 200 without credentials", resp.StatusCode)
	}

	// Nobody without the right password reads anything.
	for who, c := range map[string]oci.Credential{"anonymous": anonymous, "a wrong password": wrong} {
		if _, err := client(c).Pull(ctx, repo, artifact); ocitest.Status(err) != http.StatusUnauthorized {
			t.Errorf("%s pulled the artifact with oras: %v, want 401", who, err)
		}
		if _, err := remote.Head(imageRef, ggcrAuth(c)); ocitest.Status(err) != http.StatusUnauthorized {
			t.Errorf("%s read the vendored image with go-containerregistry: %v, want 401", who, err)
		}
		if resp := raw(t, http.MethodGet, "http://"+reg.Addr+"/v2/_catalog", c); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s listed the catalog: %d, want 401", who, resp.StatusCode)
		}
	}

	// The puller reads (both clients sign in after the challenge) and writes nothing.
	if pulled, err := client(creds.Puller).Pull(ctx, repo, artifact); err != nil || pulled.Digest != artifact {
		t.Errorf("the puller could not pull with oras: %v", err)
	}
	if _, err := remote.Image(imageRef, ggcrAuth(creds.Puller)); err != nil {
		t.Errorf("the puller could not pull with go-containerregistry: %v", err)
	}
	if _, err := client(creds.Puller).PushArtifact(ctx, repo, []byte("evil"), nil); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("the puller pushed with oras: %v, want 403", err)
	}
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(imageRef.Context().Tag("evil"), img, ggcrAuth(creds.Puller)); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("the puller pushed with go-containerregistry: %v, want 403", err)
	}

	// Nobody but the pusher deletes: anonymous and a wrong password are not signed in, the
	// puller is refused; and the pusher deletes manifests only, never a blob.
	manifestURL := "http://" + reg.Addr + "/v2/kokumi/team-a/podinfo/manifests/" + artifact
	for who, want := range map[string]struct {
		c      oci.Credential
		status int
	}{"anonymous": {anonymous, http.StatusUnauthorized}, "a wrong password": {wrong, http.StatusUnauthorized}, "the puller": {creds.Puller, http.StatusForbidden}} {
		if resp := raw(t, http.MethodDelete, manifestURL, want.c); resp.StatusCode != want.status {
			t.Errorf("DELETE of the manifest as %s: %d, want %d", who, resp.StatusCode, want.status)
		}
	}
	pullerRepo, err := client(creds.Puller).Repository(repo)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := pullerRepo.Resolve(ctx, artifact)
	if err != nil {
		t.Fatal(err)
	}
	if err := pullerRepo.Manifests().Delete(ctx, desc); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("the puller deleted the artifact with oras: %v, want 403", err)
	}
	if err := remote.Delete(imageRef, ggcrAuth(creds.Puller)); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("the puller deleted the vendored image with go-containerregistry: %v, want 403", err)
	}
	layerURL := "http://" + reg.Addr + "/v2/kokumi/team-a/podinfo/blobs/" + digest.FromBytes(layer).String()
	if resp := raw(t, http.MethodDelete, layerURL, creds.Pusher); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE of a blob as the pusher: %d, want 405", resp.StatusCode)
	}
	if resp := raw(t, http.MethodDelete, layerURL, creds.Puller); resp.StatusCode != http.StatusForbidden {
		t.Errorf("DELETE of a blob as the puller: %d, want 403", resp.StatusCode)
	}
	if resp := raw(t, http.MethodGet, layerURL, creds.Puller); resp.StatusCode != http.StatusOK {
		t.Errorf("the layer is gone after the attempts to delete it: %d", resp.StatusCode)
	}
	if pulled, err := client(creds.Puller).Pull(ctx, repo, artifact); err != nil || pulled.Digest != artifact {
		t.Errorf("the artifact is gone after the attempts to delete it: %v", err)
	}
	if _, err := remote.Head(imageRef, ggcrAuth(creds.Puller)); err != nil {
		t.Errorf("the vendored image is gone after the attempts to delete it: %v", err)
	}

	// The pusher, Kokumi's controller, deletes a manifest; then nobody pulls it.
	pusherRepo, err := client(creds.Pusher).Repository(repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := pusherRepo.Manifests().Delete(ctx, desc); err != nil {
		t.Fatalf("the pusher could not delete the artifact: %v", err)
	}
	if _, err := client(creds.Puller).Pull(ctx, repo, artifact); !oci.IsNotFound(err) {
		t.Errorf("the deleted artifact pulled: %v, want not found", err)
	}
	if err := pusherRepo.Manifests().Delete(ctx, desc); !oci.IsNotFound(err) {
		t.Errorf("deleting the artifact again: %v, want not found", err)
	}
}

func TestBundledRegistrySignsInNewCredentialsWithoutARestart(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.StartWithOptions("127.0.0.1:0", registry.Options{Dir: t.TempDir(), Credentials: func() (oci.RegistryCredentials, error) {
		mu.Lock()
		defer mu.Unlock()
		return creds, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Stop() })
	repo := ocitest.Repo(reg, "kokumi/team-a/app")
	push := func(c oci.Credential) error {
		_, err := (&oci.Client{Credentials: oci.Credentials{reg.Addr: c}}).PushArtifact(ctx, repo, []byte("layer"), nil)
		return err
	}
	old := creds.Pusher
	if err := push(old); err != nil {
		t.Fatal(err)
	}
	rotated, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	creds = rotated
	mu.Unlock()
	time.Sleep(1100 * time.Millisecond) // a failed sign-in reads them again, at most once a second
	if err := push(rotated.Pusher); err != nil {
		t.Errorf("the new pusher could not push: %v", err)
	}
	if err := push(old); ocitest.Status(err) != http.StatusUnauthorized {
		t.Errorf("the old pusher pushed after the rotation: %v, want 401", err)
	}
}

func TestBundledRegistryNeedsCredentialsAndRefusesDeleteEvenWithoutThem(t *testing.T) {
	if _, err := registry.StartWithOptions("127.0.0.1:0", registry.Options{Dir: t.TempDir()}); err == nil {
		t.Fatal("a registry started without credentials and without NoAuth")
	}
	reg := ocitest.Start(t) // NoAuth, as tests run it
	digest := ocitest.PushBundle(t, ocitest.Repo(reg, "kokumi/ns/o"), "v1", map[string]string{"a.yaml": "kind: ConfigMap\n"})
	if resp := raw(t, http.MethodDelete, "http://"+reg.Addr+"/v2/kokumi/ns/o/manifests/"+digest, oci.Credential{}); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE without authentication: %d, want 405: without credentials nobody is the pusher", resp.StatusCode)
	}
}

func TestSignInSignsInOnceTheCredentialExists(t *testing.T) {
	ctx := context.Background()
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	reg := ocitest.StartWithCredentials(t, creds)
	var mu sync.Mutex
	var have *oci.Credential
	c := &oci.Client{HTTPClient: &http.Client{Transport: &oci.SignIn{Host: reg.Addr, Credential: func(context.Context) (oci.Credential, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if have == nil {
			return oci.Credential{}, false, nil
		}
		return *have, true, nil
	}}}}
	repo := ocitest.Repo(reg, "kokumi/team-a/app")
	if _, err := c.PushArtifact(ctx, repo, []byte("layer"), nil); ocitest.Status(err) != http.StatusUnauthorized {
		t.Fatalf("pushed before the credential existed: %v, want 401", err)
	}
	mu.Lock()
	have = &creds.Pusher
	mu.Unlock()
	if _, err := c.PushArtifact(ctx, repo, []byte("layer"), nil); err != nil {
		t.Errorf("the client does not sign in once the credential exists: %v", err)
	}
}

func TestBundledRegistryLetsANamespacesPullerReadOnlyItsOwnNamespace(t *testing.T) {
	ctx := context.Background()
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	reg := ocitest.StartWithCredentials(t, creds)
	pusher := &oci.Client{Credentials: oci.Credentials{reg.Addr: creds.Pusher}}
	artifacts := map[string]string{}
	images := map[string]string{}
	for _, ns := range []string{"team-a", "team-b"} {
		repo := ocitest.Repo(reg, "kokumi/"+ns+"/app")
		d, err := pusher.PushArtifact(ctx, repo, []byte("kind: Secret # of "+ns+"\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		artifacts[ns] = repo + "@" + d
		image := ocitest.Repo(reg, "vendor/"+ns+"/ghcr.io/app")
		images[ns] = image + "@" + ocitest.PushImage(t, image+":1", 1)
	}
	chart := ocitest.Repo(reg, "charts/shared")
	chartDigest, err := pusher.PushArtifact(ctx, chart, []byte("a chart an admin pushed"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := creds.NamespacePuller("team-a"), creds.NamespacePuller("team-b")
	if a.Username != "pull-team-a" || a.Password == b.Password || len(a.Password) < 40 {
		t.Fatalf("namespace pullers %q and %q: want pull-<namespace> with distinct long passwords", a.Username, b.Username)
	}
	head := func(ref string, c oci.Credential) error {
		t.Helper()
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = remote.Head(r, ggcrAuth(c))
		return err
	}

	// Namespace A's puller reads its own namespace's artifact and vendored image.
	if err := head(artifacts["team-a"], a); err != nil {
		t.Errorf("team-a's puller could not read its artifact: %v", err)
	}
	if err := head(images["team-a"], a); err != nil {
		t.Errorf("team-a's puller could not read its vendored image: %v", err)
	}
	if resp := raw(t, http.MethodGet, "http://"+reg.Addr+"/v2/", a); resp.StatusCode != http.StatusOK {
		t.Errorf("team-a's puller's ping: %d, want 200", resp.StatusCode)
	}

	// It reads nothing of namespace B, knowing the digests, nor a chart no namespace owns,
	// nor the catalog; and it writes and deletes nothing, even in its own namespace.
	for what, ref := range map[string]string{"team-b's artifact": artifacts["team-b"], "team-b's vendored image": images["team-b"], "a shared chart": chart + "@" + chartDigest} {
		if err := head(ref, a); ocitest.Status(err) != http.StatusForbidden {
			t.Errorf("team-a's puller read %s %s: %v, want 403", what, ref, err)
		}
	}
	repoB, digestB, _ := strings.Cut(artifacts["team-b"], "@")
	if _, err := (&oci.Client{Credentials: oci.Credentials{reg.Addr: a}}).Pull(ctx, repoB, digestB); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("team-a's puller pulled team-b's artifact with oras: %v, want 403", err)
	}
	for _, path := range []string{
		"/v2/_catalog",
		"/v2/kokumi/team-b/app/tags/list",
		"/v2/kokumi/team-a/../team-b/app/manifests/" + digestB,
		"/v2/kokumi/team-a/%2e%2e/team-b/app/manifests/" + digestB,
		"/v2/kokumi/team-b/app/manifests/" + digestB,
		"/v2/vendor/team-b/ghcr.io/app/tags/list",
	} {
		if resp := raw(t, http.MethodGet, "http://"+reg.Addr+path, a); resp.StatusCode == http.StatusOK {
			t.Errorf("GET %s as team-a's puller: %d, want a refusal", path, resp.StatusCode)
		}
	}
	repoA, _, _ := strings.Cut(artifacts["team-a"], "@")
	if _, err := (&oci.Client{Credentials: oci.Credentials{reg.Addr: a}}).PushArtifact(ctx, repoA, []byte("evil"), nil); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("team-a's puller pushed to its own namespace: %v, want 403", err)
	}
	manifestA := "http://" + reg.Addr + "/v2/" + strings.TrimPrefix(repoA, reg.Addr+"/") + "/manifests/" + strings.SplitN(artifacts["team-a"], "@", 2)[1]
	if resp := raw(t, http.MethodDelete, manifestA, a); resp.StatusCode != http.StatusForbidden {
		t.Errorf("DELETE of its own artifact as team-a's puller: %d, want 403", resp.StatusCode)
	}

	// A forged namespace puller: team-b's name with team-a's password, or a password keyed
	// with another key, signs in nowhere.
	other, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	for who, c := range map[string]oci.Credential{
		"team-b's name with team-a's password": {Username: b.Username, Password: a.Password},
		"a password of another key":            other.NamespacePuller("team-b"),
		"no namespace":                         {Username: oci.NamespacePullerPrefix, Password: creds.NamespacePuller("").Password},
	} {
		if err := head(artifacts["team-b"], c); ocitest.Status(err) != http.StatusUnauthorized {
			t.Errorf("%s read team-b's artifact: %v, want 401", who, err)
		}
	}

	// The pusher deletes manifests only in a namespace's repositories, never a shared chart.
	if resp := raw(t, http.MethodDelete, "http://"+reg.Addr+"/v2/charts/shared/manifests/"+chartDigest, creds.Pusher); resp.StatusCode != http.StatusForbidden {
		t.Errorf("DELETE of a shared chart as the pusher: %d, want 403", resp.StatusCode)
	}
	// The catalog names every namespace's repositories: the pusher (the controller's collector)
	// alone lists it.
	for who, c := range map[string]oci.Credential{"team-a's puller": a, "Kokumi's puller": creds.Puller} {
		if resp := raw(t, http.MethodGet, "http://"+reg.Addr+"/v2/_catalog", c); resp.StatusCode != http.StatusForbidden {
			t.Errorf("the catalog as %s: %d, want 403", who, resp.StatusCode)
		}
	}
	if resp := raw(t, http.MethodGet, "http://"+reg.Addr+"/v2/_catalog", creds.Pusher); resp.StatusCode != http.StatusOK {
		t.Errorf("the catalog as the pusher: %d, want 200", resp.StatusCode)
	}
	// Kokumi's own puller reads every namespace.
	for _, ref := range []string{artifacts["team-a"], artifacts["team-b"], images["team-b"]} {
		if err := head(ref, creds.Puller); err != nil {
			t.Errorf("Kokumi's puller could not read %s: %v", ref, err)
		}
	}
}

// The controller renders an Order of a namespace as that namespace's pusher: it writes only
// that namespace's Preparations and vendored images, reads those and the charts of no
// namespace, and neither reads, writes, mounts from nor deletes another namespace's, so that a
// render's isolation lives in the registry too, not only in Kokumi's client.
func TestANamespacesPusherWritesAndReadsOnlyItsOwnNamespace(t *testing.T) {
	ctx := context.Background()
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	reg := ocitest.StartWithCredentials(t, creds)
	pusher := &oci.Client{Credentials: oci.Credentials{reg.Addr: creds.Pusher}}
	repoB := ocitest.Repo(reg, "kokumi/team-b/app")
	digestB, err := pusher.PushArtifact(ctx, repoB, []byte("kind: Secret # of team-b\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	chart := ocitest.Repo(reg, "charts/shared")
	chartDigest, err := pusher.PushArtifact(ctx, chart, []byte("a chart an admin pushed"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := creds.NamespacePusher("team-a")
	if a.Username != "push-team-a" || a.Password == creds.NamespacePuller("team-a").Password || len(a.Password) < 40 {
		t.Fatalf("team-a's pusher %q: want push-<namespace> with its own long password", a.Username)
	}
	asA := &oci.Client{Credentials: oci.Credentials{reg.Addr: a}}

	// Its own namespace: it pushes a Preparation and a vendored image, and reads them back;
	// it reads a chart of no namespace.
	repoA := ocitest.Repo(reg, "kokumi/team-a/app")
	digestA, err := asA.PushArtifact(ctx, repoA, []byte("kind: ConfigMap # of team-a\n"), nil)
	if err != nil {
		t.Fatalf("team-a's pusher could not push its Preparation: %v", err)
	}
	if _, err := asA.Pull(ctx, repoA, digestA); err != nil {
		t.Errorf("team-a's pusher could not read its Preparation: %v", err)
	}
	if _, err := asA.PushArtifact(ctx, ocitest.Repo(reg, "vendor/team-a/ghcr.io/app"), []byte("an image"), nil); err != nil {
		t.Errorf("team-a's pusher could not vendor into its namespace: %v", err)
	}
	if _, err := asA.Pull(ctx, chart, chartDigest); err != nil {
		t.Errorf("team-a's pusher could not read a chart of no namespace: %v", err)
	}

	// Another namespace's: no read, no write, no delete; nor a chart of no namespace written.
	if _, err := asA.Pull(ctx, repoB, digestB); ocitest.Status(err) != http.StatusForbidden {
		t.Errorf("team-a's pusher pulled team-b's Preparation: %v, want 403", err)
	}
	for what, repo := range map[string]string{"team-b's Preparations": repoB, "team-b's vendored images": ocitest.Repo(reg, "vendor/team-b/ghcr.io/app"), "a shared chart": chart} {
		if _, err := asA.PushArtifact(ctx, repo, []byte("evil"), nil); ocitest.Status(err) != http.StatusForbidden {
			t.Errorf("team-a's pusher pushed to %s: %v, want 403", what, err)
		}
	}
	manifestB := "http://" + reg.Addr + "/v2/kokumi/team-b/app/manifests/" + digestB
	if resp := raw(t, http.MethodDelete, manifestB, a); resp.StatusCode != http.StatusForbidden {
		t.Errorf("DELETE of team-b's Preparation as team-a's pusher: %d, want 403", resp.StatusCode)
	}
	if resp := raw(t, http.MethodDelete, "http://"+reg.Addr+"/v2/kokumi/team-a/app/manifests/"+digestA, a); resp.StatusCode != http.StatusForbidden {
		t.Errorf("DELETE of its own Preparation as team-a's pusher: %d, want 403 (only the collector deletes)", resp.StatusCode)
	}
	// Mounting team-b's blobs into its own repository would read them by digest.
	blob := "sha256:" + strings.TrimPrefix(digestB, "sha256:")
	mount := "http://" + reg.Addr + "/v2/kokumi/team-a/app/blobs/uploads/?mount=" + blob + "&from=kokumi/team-b/app"
	if resp := raw(t, http.MethodPost, mount, a); resp.StatusCode != http.StatusForbidden {
		t.Errorf("mounting from team-b's repository as team-a's pusher: %d, want 403", resp.StatusCode)
	}
	for _, path := range []string{"/v2/_catalog", "/v2/kokumi/team-b/app/tags/list"} {
		if resp := raw(t, http.MethodGet, "http://"+reg.Addr+path, a); resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s as team-a's pusher: %d, want 403", path, resp.StatusCode)
		}
	}
	// A forged one signs in nowhere.
	forged := oci.Credential{Username: "push-team-b", Password: a.Password}
	if _, err := (&oci.Client{Credentials: oci.Credentials{reg.Addr: forged}}).PushArtifact(ctx, repoB, []byte("evil"), nil); ocitest.Status(err) != http.StatusUnauthorized {
		t.Errorf("team-b's pusher name with team-a's password pushed: %v, want 401", err)
	}
}
