package registry_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
)

// gcRegistry runs the bundled registry with authentication on, its content in dir, collecting
// its garbage every period (0: only when asked) with grace.
func gcRegistry(t *testing.T, dir string, period, grace time.Duration) (*registry.Registry, oci.RegistryCredentials) {
	t.Helper()
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.StartWithOptions("127.0.0.1:0", registry.Options{
		Dir: dir, GCPeriod: period, GCGrace: grace, Credentials: func() (oci.RegistryCredentials, error) { return creds, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Stop(); err != nil {
			t.Errorf("stop registry: %v", err)
		}
	})
	return reg, creds
}

// artifact pushes a one-layer artifact to repository as the pusher and returns its digest and
// its layer's.
func artifact(t *testing.T, reg *registry.Registry, c oci.Credential, repository, text string) (manifest, layer string) {
	t.Helper()
	data, err := oci.TarGz(map[string][]byte{"manifests.yaml": []byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	manifest, err = (&oci.Client{Credentials: oci.Credentials{reg.Addr: c}}).PushArtifact(context.Background(), ocitest.Repo(reg, repository), data, nil)
	if err != nil {
		t.Fatalf("push %s: %v", repository, err)
	}
	return manifest, digest.FromBytes(data).String()
}

// deleteManifest deletes repository@manifest as c.
func deleteManifest(t *testing.T, reg *registry.Registry, c oci.Credential, repository, manifest string) {
	t.Helper()
	ctx := context.Background()
	repo, err := (&oci.Client{Credentials: oci.Credentials{reg.Addr: c}}).Repository(ocitest.Repo(reg, repository))
	if err != nil {
		t.Fatal(err)
	}
	desc, err := repo.Resolve(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Manifests().Delete(ctx, desc); err != nil {
		t.Fatalf("delete %s@%s: %v", repository, manifest, err)
	}
}

// blobStatus is the status of a GET of repository's blob as c.
func blobStatus(t *testing.T, reg *registry.Registry, c oci.Credential, repository, blob string) int {
	t.Helper()
	return raw(t, http.MethodGet, "http://"+reg.Addr+"/v2/"+repository+"/blobs/"+blob, c).StatusCode
}

// pulls says whether repository@manifest pulls whole (manifest and layers) as c.
func pulls(t *testing.T, reg *registry.Registry, c oci.Credential, repository, manifest string) error {
	t.Helper()
	_, err := (&oci.Client{Credentials: oci.Credentials{reg.Addr: c}}).Pull(context.Background(), ocitest.Repo(reg, repository), manifest)
	return err
}

func TestGarbageCollectionReclaimsTheBlobsOfDeletedManifestsAndKeepsTheRest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg, creds := gcRegistry(t, dir, 0, 0)
	if gc, err := reg.CollectGarbage(ctx); err != nil || gc.BlobBytesBefore != 0 {
		t.Fatalf("collecting an empty registry: %+v, %v", gc, err)
	}

	// Two artifacts of one repository, and one of another repository with the first's layer.
	oldDigest, oldLayer := artifact(t, reg, creds.Pusher, "kokumi/team-a/app", strings.Repeat("kind: ConfigMap # old\n", 4096))
	keptDigest, keptLayer := artifact(t, reg, creds.Pusher, "kokumi/team-a/app", "kind: ConfigMap # kept\n")
	sharedDigest, sharedLayer := artifact(t, reg, creds.Pusher, "kokumi/team-b/app", strings.Repeat("kind: ConfigMap # old\n", 4096))
	if sharedLayer != oldLayer {
		t.Fatal("the same files packed into different layers")
	}

	deleteManifest(t, reg, creds.Pusher, "kokumi/team-a/app", oldDigest)
	before := ocitest.BlobBytes(t, dir)
	gc, err := reg.CollectGarbage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after := ocitest.BlobBytes(t, dir); after != before || gc.BlobBytesBefore != before || gc.BlobBytesAfter != after {
		t.Errorf("a layer another repository references: blob store %d → %d bytes (collection says %+v), want it kept", before, after, gc)
	}
	if err := pulls(t, reg, creds.Puller, "kokumi/team-b/app", sharedDigest); err != nil {
		t.Errorf("the artifact sharing the deleted one's layer does not pull: %v", err)
	}

	deleteManifest(t, reg, creds.Pusher, "kokumi/team-b/app", sharedDigest)
	before = ocitest.BlobBytes(t, dir)
	if gc, err = reg.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
	after := ocitest.BlobBytes(t, dir)
	if after >= before || gc.BlobBytesBefore-gc.BlobBytesAfter != before-after {
		t.Errorf("blob store %d → %d bytes (collection says %+v): want the unreferenced layer reclaimed", before, after, gc)
	}
	for _, repository := range []string{"kokumi/team-a/app", "kokumi/team-b/app"} {
		if status := blobStatus(t, reg, creds.Puller, repository, oldLayer); status != http.StatusNotFound {
			t.Errorf("the collected layer in %s: %d, want 404", repository, status)
		}
	}
	if err := pulls(t, reg, creds.Puller, "kokumi/team-a/app", keptDigest); err != nil {
		t.Errorf("the kept artifact does not pull after the collection: %v", err)
	}
	if status := blobStatus(t, reg, creds.Puller, "kokumi/team-a/app", keptLayer); status != http.StatusOK {
		t.Errorf("the kept layer: %d, want 200", status)
	}

	// What was collected is pushed again as new.
	if again, _ := artifact(t, reg, creds.Pusher, "kokumi/team-a/app", strings.Repeat("kind: ConfigMap # old\n", 4096)); again != oldDigest {
		t.Errorf("pushed again as %s, want %s", again, oldDigest)
	}
	if err := pulls(t, reg, creds.Puller, "kokumi/team-a/app", oldDigest); err != nil {
		t.Errorf("the artifact pushed again after the collection does not pull: %v", err)
	}
}

// A collection waits for the writes in flight, refuses new ones with 503 and Retry-After
// until it ends, and lets reads go on; an upload that straddles it completes.
func TestGarbageCollectionWaitsForWritesInFlightAndHoldsNewOnes(t *testing.T) {
	ctx := context.Background()
	reg, creds := gcRegistry(t, t.TempDir(), 0, 0)
	keptDigest, _ := artifact(t, reg, creds.Pusher, "kokumi/team-a/app", "kind: ConfigMap\n")
	base := "http://" + reg.Addr
	do := func(c *http.Client, method, target string, body io.Reader, header http.Header) *http.Response {
		t.Helper()
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		if u, err = u.Parse(target); err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(method, u.String(), body)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth(creds.Pusher.Username, creds.Pusher.Password)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	startUpload := func() *http.Response {
		return do(http.DefaultClient, http.MethodPost, "/v2/kokumi/team-a/slow/blobs/uploads/", nil, nil)
	}

	// An upload whose data is still coming. With Expect: 100-continue the client sends the data
	// only once the registry's handler reads it: when the first part is taken, the write is in
	// flight.
	resp := startUpload()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("start an upload: %d", resp.StatusCode)
	}
	location := resp.Header.Get("Location")
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	patched := make(chan *http.Response, 1)
	slow := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Hour}}
	go func() {
		patched <- do(slow, http.MethodPatch, location, pr, http.Header{"Expect": {"100-continue"}, "Content-Type": {"application/octet-stream"}})
	}()
	data := []byte(strings.Repeat("layer data ", 10000))
	if _, err := pw.Write(data[:len(data)/2]); err != nil {
		t.Fatal(err)
	}

	collected := make(chan error, 1)
	go func() {
		_, err := reg.CollectGarbage(ctx)
		collected <- err
	}()
	// The collection waits for the upload; meanwhile a new write is refused, to try again.
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp := startUpload()
		if resp.StatusCode == http.StatusServiceUnavailable {
			if resp.Header.Get("Retry-After") == "" {
				t.Error("a write refused during the collection has no Retry-After")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes are still taken while a collection waits: %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-collected:
		t.Fatalf("the collection ran while an upload was in flight: %v", err)
	default:
	}
	if err := pulls(t, reg, creds.Puller, "kokumi/team-a/app", keptDigest); err != nil {
		t.Errorf("a pull during the collection: %v", err)
	}

	// The upload ends; then the collection runs, and the upload completes after it.
	if _, err := pw.Write(data[len(data)/2:]); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	resp = <-patched
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the upload in flight: %d, want 202", resp.StatusCode)
	}
	select {
	case err := <-collected:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the collection did not end once the upload had")
	}
	blob := digest.FromBytes(data).String()
	put, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	q := put.Query()
	q.Set("digest", blob)
	put.RawQuery = q.Encode()
	if resp := do(http.DefaultClient, http.MethodPut, put.String(), nil, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("completing the upload after the collection: %d, want 201", resp.StatusCode)
	}
	if status := blobStatus(t, reg, creds.Puller, "kokumi/team-a/slow", blob); status != http.StatusOK {
		t.Errorf("the blob uploaded across the collection: %d, want 200", status)
	}
	if resp := startUpload(); resp.StatusCode != http.StatusAccepted {
		t.Errorf("a write after the collection: %d, want 202", resp.StatusCode)
	}
}

// A push whose blobs were written within the grace keeps them across a collection, so that
// its manifest, pushed after, is taken; older unreferenced blobs go.
func TestGarbageCollectionKeepsTheBlobsWrittenWithinTheGrace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg, creds := gcRegistry(t, dir, 0, time.Hour)
	repo, err := (&oci.Client{Credentials: oci.Credentials{reg.Addr: creds.Pusher}}).Repository(ocitest.Repo(reg, "kokumi/team-a/app"))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := oci.TarGz(map[string][]byte{"manifests.yaml": []byte("kind: ConfigMap\n")})
	if err != nil {
		t.Fatal(err)
	}
	for _, blob := range []ocispec.Descriptor{ocispec.DescriptorEmptyJSON, content.NewDescriptorFromBytes(oci.MediaTypeLayerTarGzip, layer)} {
		data := layer
		if blob.Digest == ocispec.DescriptorEmptyJSON.Digest {
			data = ocispec.DescriptorEmptyJSON.Data
		}
		if err := repo.Push(ctx, blob, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	before := ocitest.BlobBytes(t, dir)
	if _, err := reg.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
	if after := ocitest.BlobBytes(t, dir); after != before {
		t.Errorf("blobs written within the grace: %d → %d bytes, want kept", before, after)
	}
	manifest, err := oci.Manifest(layer, nil)
	if err != nil {
		t.Fatal(err)
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, manifest)
	if err := repo.Push(ctx, desc, bytes.NewReader(manifest)); err != nil {
		t.Fatalf("the manifest pushed after a collection, its blobs pushed before: %v", err)
	}
	if err := pulls(t, reg, creds.Puller, "kokumi/team-a/app", desc.Digest.String()); err != nil {
		t.Errorf("the artifact pushed across a collection does not pull: %v", err)
	}
}

func TestGarbageCollectionRunsEveryPeriod(t *testing.T) {
	// A grace of seconds lets the pushes below finish between two collections.
	reg, creds := gcRegistry(t, t.TempDir(), 200*time.Millisecond, 3*time.Second)
	manifest, layer := artifact(t, reg, creds.Pusher, "kokumi/team-a/app", "kind: ConfigMap\n")
	deleteManifest(t, reg, creds.Pusher, "kokumi/team-a/app", manifest)
	deadline := time.Now().Add(60 * time.Second)
	for blobStatus(t, reg, creds.Puller, "kokumi/team-a/app", layer) != http.StatusNotFound {
		if time.Now().After(deadline) {
			t.Fatal("the layer of a deleted manifest is still there: the periodic collection did not run")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
