package images_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// countingTransport counts the requests for manifests that reach the registry.
type countingTransport struct{ manifests atomic.Int64 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.Path, "/manifests/") {
		c.manifests.Add(1)
	}
	return remote.DefaultTransport.RoundTrip(req)
}

// Fifty Orders pinning the same tag at the same moment, with the same credentials, ask the
// registry once.
func TestTagCacheResolvesATagOnceForOrdersAtTheSameTime(t *testing.T) {
	reg := ocitest.Start(t)
	ref := ocitest.Repo(reg, "team/app:1.0")
	digest := ocitest.PushImage(t, ref, 1)
	tags := images.NewTagCache(0)
	transport := &countingTransport{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			r := &images.Resolver{Tags: tags, Transport: transport}
			pins, err := r.Resolve(context.Background(), []string{ref}, "")
			if err != nil {
				t.Error(err)
				return
			}
			if want := strings.TrimSuffix(ref, ":1.0") + "@" + digest; pins[0].Pinned != want {
				t.Errorf("pinned %s, want %s", pins[0].Pinned, want)
			}
		})
	}
	wg.Wait()
	if got := transport.manifests.Load(); got != 1 {
		t.Errorf("the registry was asked for the tag's manifest %d times, want once", got)
	}
}

// A digest one tenant's credentials resolved is never another's answer: a resolver without
// them, or with other ones, asks the registry itself and is refused; one with the same
// credentials gets the answer kept.
func TestTagCacheNeverAnswersWithAnotherTenantsCredentials(t *testing.T) {
	reg := ocitest.StartWithAuth(t, "tenant-a", "secret-a")
	ref := ocitest.Repo(reg, "private/app:1.0")
	ocitest.PushImage(t, ref, 1)
	tags := images.NewTagCache(0)
	ctx := context.Background()
	a := oci.Credentials{reg.Addr: {Username: "tenant-a", Password: "secret-a"}}
	if _, err := (&images.Resolver{Tags: tags, Credentials: a}).Resolve(ctx, []string{ref}, ""); err != nil {
		t.Fatalf("with the credentials that read it: %v", err)
	}
	for name, creds := range map[string]oci.Credentials{
		"anonymous":         nil,
		"other credentials": {reg.Addr: {Username: "tenant-a", Password: "guess"}},
	} {
		transport := &countingTransport{}
		if pins, err := (&images.Resolver{Tags: tags, Credentials: creds, Transport: transport}).Resolve(ctx, []string{ref}, ""); err == nil {
			t.Errorf("%s got %v from the cache of another tenant's answer", name, pins)
		}
		if transport.manifests.Load() == 0 {
			t.Errorf("%s was not asked of the registry", name)
		}
	}
	transport := &countingTransport{}
	if _, err := (&images.Resolver{Tags: tags, Credentials: a, Transport: transport}).Resolve(ctx, []string{ref}, ""); err != nil {
		t.Fatal(err)
	}
	if got := transport.manifests.Load(); got != 0 {
		t.Errorf("the same credentials asked the registry %d times, want the kept answer", got)
	}
}

// The cache is asked after Allow: a repository Allow refuses is refused even when another
// resolver, which may read it, has its tag in the cache.
func TestTagCacheKeepsAllow(t *testing.T) {
	reg := ocitest.Start(t)
	ref := ocitest.Repo(reg, "vendor/team-b/app:1.0")
	ocitest.PushImage(t, ref, 1)
	tags := images.NewTagCache(0)
	ctx := context.Background()
	if _, err := (&images.Resolver{Tags: tags}).Resolve(ctx, []string{ref}, ""); err != nil {
		t.Fatal(err)
	}
	refuse := func(string) error { return errors.New("refused") }
	if _, err := (&images.Resolver{Tags: tags, Allow: refuse}).Resolve(ctx, []string{ref}, ""); err == nil {
		t.Error("a repository Allow refuses was answered from the cache")
	}
}
