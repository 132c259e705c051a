package orders

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/controller/gc"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// sweepFixture is a bundled registry of the test's own (the suite's holds other tests'
// artifacts), signed in as its pusher.
type sweepFixture struct {
	reg    *registry.Registry
	creds  oci.RegistryCredentials
	pusher *oci.Client
}

func newSweepFixture(t *testing.T) *sweepFixture {
	t.Helper()
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.StartWithOptions("127.0.0.1:0", registry.Options{Dir: t.TempDir(),
		Credentials: func() (oci.RegistryCredentials, error) { return creds, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Stop() })
	return &sweepFixture{reg: reg, creds: creds, pusher: &oci.Client{Credentials: oci.Credentials{reg.Addr: creds.Pusher}}}
}

// push pushes an artifact to path and returns its digest.
func (f *sweepFixture) push(t *testing.T, path, text string) string {
	t.Helper()
	data, err := oci.TarGz(map[string][]byte{preparation.ManifestsFile: []byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	digest, err := f.pusher.PushArtifact(context.Background(), f.reg.Addr+"/"+path, data, nil)
	if err != nil {
		t.Fatalf("push %s: %v", path, err)
	}
	return digest
}

// records pushes deployment records of path@artifact: a manifest tagged sha256-<hex>.att.
func (f *sweepFixture) records(t *testing.T, path, artifact string) string {
	t.Helper()
	tag, err := record.AttestationTag(artifact)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(f.reg.Addr + "/" + path + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, f.auth()); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d.String()
}

// index pushes an index of two platforms to path; it returns the index's digest and the
// platforms'.
func (f *sweepFixture) index(t *testing.T, path string) (string, []string) {
	t.Helper()
	idx, err := random.Index(64, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	ref, err := name.ParseReference(f.reg.Addr + "/" + path + "@" + d.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, f.auth()); err != nil {
		t.Fatal(err)
	}
	m, _ := idx.IndexManifest()
	var platforms []string
	for _, p := range m.Manifests {
		platforms = append(platforms, p.Digest.String())
	}
	return d.String(), platforms
}

func (f *sweepFixture) auth() remote.Option {
	return remote.WithAuth(&authn.Basic{Username: f.creds.Pusher.Username, Password: f.creds.Pusher.Password})
}

// exists says whether path@digest is there, read with a GET (the pusher's HEAD counts as a
// push).
func (f *sweepFixture) exists(t *testing.T, path, digest string) bool {
	t.Helper()
	repo, err := f.pusher.Repository(f.reg.Addr + "/" + path)
	if err != nil {
		t.Fatal(err)
	}
	_, rc, err := repo.FetchReference(context.Background(), digest)
	if oci.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Close()
	return true
}

// sweeper sweeps the fixture's registry with grace.
func (f *sweepFixture) sweeper(grace time.Duration, budget gc.SweepBudget, transport http.RoundTripper) *gc.Sweeper {
	c := cfg
	c.BundledRegistry = f.reg.Addr
	pusher := &oci.Client{Credentials: f.pusher.Credentials}
	if transport != nil {
		pusher.HTTPClient = &http.Client{Transport: transport}
	}
	return &gc.Sweeper{Reader: env.Client, Registry: pusher, Config: c, Grace: grace, Budget: budget}
}

// namingPreparation creates a Preparation of Order order (which need not exist) whose artifact is
// path@artifact and that pins images (host/path@digest).
func namingPreparation(t *testing.T, f *sweepFixture, ns, order, path, artifact string, images ...string) {
	t.Helper()
	var pins []v1.ImagePin
	for _, img := range images {
		pins = append(pins, v1.ImagePin{Original: "docker.io/library/nginx:1", Pinned: img})
	}
	p := &v1.Preparation{
		ObjectMeta: metav1.ObjectMeta{Name: preparation.Name(order, artifact), Namespace: ns, Labels: map[string]string{preparation.LabelOrder: order}},
		Spec: v1.PreparationSpec{OrderRef: v1.LocalObjectReference{Name: order}, ProductRef: v1.LocalObjectReference{Name: "absent"},
			Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: artifact},
			TargetNamespace: ns, Images: pins, ImagesInBundledRegistry: len(pins) > 0,
			Artifact: v1.Artifact{Ref: "oci://" + f.reg.Addr + "/" + path + "@" + artifact, Digest: artifact}, ConfigHash: artifact},
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// settle waits for HTTP dates (whole seconds) to tell the pushes so far from a pass that starts
// now with no grace.
func settle() { time.Sleep(1100 * time.Millisecond) }

// TestTheSweeperDeletesWhatNothingNames: the artifacts of a deleted Order and of a deleted
// namespace, with their deployment records, the records a newer record replaced, and the
// vendored images no Preparation pins are deleted; what a Preparation names (its artifact and
// its records, the images it pins and the platforms of a pinned index, even when its Order is
// gone) and what a Serving runs stay. Nothing goes within the grace after a push, and a pass
// deletes no more than its budget, the next going on.
func TestTheSweeperDeletesWhatNothingNames(t *testing.T) {
	ctx := context.Background()
	f := newSweepFixture(t)
	ns := newNamespace(t)
	deletedNS := "sweep-gone" // never created: a namespace deleted with everything in it
	kokumi := preparation.OwnArtifactPath
	nginx := "vendor/" + ns + "/docker.io/library/nginx"
	multi := "vendor/" + ns + "/docker.io/library/multi"

	gone := f.push(t, kokumi(ns, "gone"), "gone")
	goneRecords := f.records(t, kokumi(ns, "gone"), gone)
	live := f.push(t, kokumi(ns, "live"), "live")
	f.records(t, kokumi(ns, "live"), live)
	replaced := f.records(t, kokumi(ns, "live"), live) // pushed over by the next: no tag names it
	liveRecords := f.records(t, kokumi(ns, "live"), live)
	running := f.push(t, kokumi(ns, "running"), "running")
	pinned := f.push(t, nginx, "nginx 1")
	unpinned := f.push(t, nginx, "nginx 0")
	idx, platforms := f.index(t, multi)
	other := f.push(t, kokumi(deletedNS, "web"), "web")
	otherVendored := f.push(t, "vendor/"+deletedNS+"/docker.io/library/nginx", "nginx")
	shared := f.push(t, "charts/podinfo", "an admin's chart") // not Kokumi's: never swept

	// Order "live" is gone too (envtest has no garbage collector): its Preparation names its
	// artifact, and the images it pins, all the same.
	namingPreparation(t, f, ns, "live", kokumi(ns, "live"), live, f.reg.Addr+"/"+nginx+"@"+pinned, f.reg.Addr+"/"+multi+"@"+idx)
	s := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "running", Namespace: ns}, Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "running"}}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	s.Status.Revision = running
	if err := env.Client.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	settle()

	// Within the grace after the pushes, nothing goes.
	budget := gc.SweepBudget{Repositories: 100, Manifests: 1000, Deletions: 3}
	if swept, err := f.sweeper(time.Hour, budget, nil).Sweep(ctx); err != nil || len(swept.Deleted) != 0 {
		t.Fatalf("a pass within the grace after the pushes deleted %v (%v)", swept.Deleted, err)
	}

	sweeper := f.sweeper(0, budget, nil)
	var deleted []string
	for pass := 1; ; pass++ {
		swept, err := sweeper.Sweep(ctx)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		if len(swept.Deleted) > budget.Deletions {
			t.Fatalf("pass %d deleted %d manifests, over its budget of %d", pass, len(swept.Deleted), budget.Deletions)
		}
		deleted = append(deleted, swept.Deleted...)
		if !swept.Exhausted && len(swept.Deleted) == 0 {
			break
		}
		if pass > 10 {
			t.Fatalf("still deleting after %d passes: %v", pass, deleted)
		}
	}
	t.Logf("deleted %v", deleted)

	for _, c := range []struct {
		path, digest, what string
		kept               bool
	}{
		{kokumi(ns, "gone"), gone, "the artifact of a deleted Order", false},
		{kokumi(ns, "gone"), goneRecords, "the records of an artifact of a deleted Order", false},
		{kokumi(ns, "live"), replaced, "records a newer record replaced", false},
		{nginx, unpinned, "a vendored image no Preparation pins", false},
		{kokumi(deletedNS, "web"), other, "the artifact of a deleted namespace", false},
		{"vendor/" + deletedNS + "/docker.io/library/nginx", otherVendored, "an image vendored for a deleted namespace", false},
		{kokumi(ns, "live"), live, "the artifact a Preparation names", true},
		{kokumi(ns, "live"), liveRecords, "the records of the artifact a Preparation names", true},
		{kokumi(ns, "running"), running, "the artifact a Serving runs", true},
		{nginx, pinned, "an image a Preparation pins", true},
		{multi, idx, "an index a Preparation pins", true},
		{multi, platforms[0], "a platform of an index a Preparation pins", true},
		{multi, platforms[1], "a platform of an index a Preparation pins", true},
		{"charts/podinfo", shared, "a chart outside Kokumi's repositories", true},
	} {
		if got := f.exists(t, c.path, c.digest); got != c.kept {
			t.Errorf("%s (%s@%s): there %v, want %v", c.what, c.path, c.digest, got, c.kept)
		}
	}
}

// TestAManifestNamedWhileTheSweeperRunsIsKept lands a Preparation in the sweeper's pass: while it
// deletes the first of the vendored images nothing pinned when it decided, a render creates a
// Preparation pinning the others. They stay: what the namespace names is read from the API
// server again right before each deletion.
func TestAManifestNamedWhileTheSweeperRunsIsKept(t *testing.T) {
	ctx := context.Background()
	f := newSweepFixture(t)
	ns := newNamespace(t)
	nginx := "vendor/" + ns + "/docker.io/library/nginx"
	var digests []string
	for i := range 3 {
		digests = append(digests, f.push(t, nginx, fmt.Sprintf("nginx %d", i)))
	}
	web := preparation.OwnArtifactPath(ns, "web")
	artifact := f.push(t, web, "web")
	namingPreparation(t, f, ns, "web", web, artifact)
	settle()
	slices.Sort(digests) // the pass deletes in the order of digests
	render := func() {
		var pins []string
		for _, d := range digests[1:] {
			pins = append(pins, f.reg.Addr+"/"+nginx+"@"+d)
		}
		namingPreparation(t, f, ns, "web2", web, artifact, pins...)
	}
	sweeper := f.sweeper(0, gc.DefaultSweepBudget, &onFirstDelete{during: render})
	swept, err := sweeper.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range swept.Deleted {
		if !strings.HasSuffix(d, digests[0]) {
			t.Errorf("the pass deleted %s, which a Preparation made during it pins", d)
		}
	}
	if f.exists(t, nginx, digests[0]) {
		t.Errorf("%s, pinned by nothing, is still there", digests[0])
	}
	for _, d := range digests[1:] {
		if !f.exists(t, nginx, d) {
			t.Errorf("%s, pinned by a Preparation made during the pass, is gone", d)
		}
	}
	if !f.exists(t, web, artifact) {
		t.Errorf("the artifact %s, named by a Preparation, is gone", artifact)
	}
}
