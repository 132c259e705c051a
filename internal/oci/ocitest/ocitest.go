// Package ocitest runs the bundled registry on loopback for tests and pushes what tests need
// into it: Helm charts as `helm push` makes them, manifest bundles, and images.
package ocitest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
)

// Start runs a bundled registry on 127.0.0.1 with its content in a temporary directory,
// stopped when the test ends.
func Start(tb testing.TB) *registry.Registry {
	tb.Helper()
	reg, err := registry.Start("127.0.0.1:0", tb.TempDir(), false)
	if err != nil {
		tb.Fatalf("start registry: %v", err)
	}
	tb.Cleanup(func() {
		if err := reg.Stop(); err != nil {
			tb.Errorf("stop registry: %v", err)
		}
	})
	return reg
}

// credentials are the pushers of the registries StartWithCredentials started; the helpers
// below sign in with them.
var credentials = oci.Credentials{}

// StartWithAuth runs a registry like Start that only user with password may push to or pull
// from (and a puller of its own, whom no test knows).
func StartWithAuth(tb testing.TB, user, password string) *registry.Registry {
	tb.Helper()
	return StartWithCredentials(tb, oci.RegistryCredentials{
		Pusher: oci.Credential{Username: user, Password: password},
		Puller: oci.Credential{Username: user + "-puller", Password: password + "-puller"},
	})
}

// StartWithCredentials runs a registry like Start with authentication on, as the bundled
// registry runs: creds.Pusher pulls, pushes and deletes manifests, creds.Puller only pulls. The
// helpers below push as the pusher.
func StartWithCredentials(tb testing.TB, creds oci.RegistryCredentials) *registry.Registry {
	tb.Helper()
	reg, err := registry.StartWithOptions("127.0.0.1:0", registry.Options{
		Dir:         tb.TempDir(),
		Credentials: func() (oci.RegistryCredentials, error) { return creds, nil },
	})
	if err != nil {
		tb.Fatalf("start registry: %v", err)
	}
	credentials[reg.Addr] = creds.Pusher
	tb.Cleanup(func() {
		delete(credentials, reg.Addr)
		if err := reg.Stop(); err != nil {
			tb.Errorf("stop registry: %v", err)
		}
	})
	return reg
}

// SignIn makes the helpers below push to the registry at host (host:port) as pusher until the
// test ends: for a registry the test did not start, such as a local fleet's bundled registry.
func SignIn(tb testing.TB, host string, pusher oci.Credential) {
	tb.Helper()
	credentials[host] = pusher
	tb.Cleanup(func() { delete(credentials, host) })
}

// remoteOptions sign in to the registry of ref when StartWithAuth started it.
func remoteOptions(ref name.Reference) []remote.Option {
	if c, ok := credentials.Lookup(ref.Context().RegistryStr()); ok {
		return []remote.Option{remote.WithAuth(&authn.Basic{Username: c.Username, Password: c.Password})}
	}
	return nil
}

// Chart packs a chart's files (paths relative to the chart directory) into a .tgz under
// the directory name.
func Chart(tb testing.TB, name string, files map[string]string) []byte {
	tb.Helper()
	entries := map[string][]byte{}
	for path, text := range files {
		entries[name+"/"+path] = []byte(text)
	}
	tgz, err := oci.TarGz(entries)
	if err != nil {
		tb.Fatalf("pack chart: %v", err)
	}
	return tgz
}

// PushChart pushes a chart archive to host/repo:tag as `helm push` does and returns the
// manifest digest.
func PushChart(tb testing.TB, repository, tag, chartName, version string, archive []byte) string {
	tb.Helper()
	cfg, _ := json.Marshal(map[string]string{"apiVersion": "v2", "name": chartName, "version": version})
	return push(tb, repository, tag, oci.MediaTypeHelmConfig, cfg, []ocispec.Descriptor{
		content.NewDescriptorFromBytes(oci.MediaTypeHelmChart, archive),
	}, [][]byte{archive})
}

// PushBundle pushes YAML files (path → content) as one gzipped tar layer to host/repo:tag and
// returns the manifest digest.
func PushBundle(tb testing.TB, repository, tag string, files map[string]string) string {
	tb.Helper()
	entries := map[string][]byte{}
	for path, text := range files {
		entries[path] = []byte(text)
	}
	layer, err := oci.TarGz(entries)
	if err != nil {
		tb.Fatalf("pack bundle: %v", err)
	}
	return push(tb, repository, tag, ocispec.MediaTypeEmptyJSON, ocispec.DescriptorEmptyJSON.Data, []ocispec.Descriptor{
		content.NewDescriptorFromBytes(oci.MediaTypeLayerTarGzip, layer),
	}, [][]byte{layer})
}

// PushRaw pushes bytes as one layer of the given media type (no config) to host/repo:tag.
func PushRaw(tb testing.TB, repository, tag, mediaType string, data []byte) string {
	tb.Helper()
	return push(tb, repository, tag, ocispec.MediaTypeEmptyJSON, ocispec.DescriptorEmptyJSON.Data, []ocispec.Descriptor{
		content.NewDescriptorFromBytes(mediaType, data),
	}, [][]byte{data})
}

func push(tb testing.TB, repository, tag, configType string, config []byte, layers []ocispec.Descriptor, data [][]byte) string {
	tb.Helper()
	ctx := context.Background()
	c := &oci.Client{Credentials: credentials}
	repo, err := c.Repository(repository)
	if err != nil {
		tb.Fatal(err)
	}
	cfgDesc, err := oras.PushBytes(ctx, repo, configType, config)
	if err != nil {
		tb.Fatalf("push config to %s: %v", repository, err)
	}
	for i, l := range layers {
		if _, err := oras.PushBytes(ctx, repo, l.MediaType, data[i]); err != nil {
			tb.Fatalf("push layer to %s: %v", repository, err)
		}
	}
	manifest, _ := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: cfgDesc, Layers: layers,
	})
	desc, err := oras.TagBytes(ctx, repo, ocispec.MediaTypeImageManifest, manifest, tag)
	if err != nil {
		tb.Fatalf("push manifest to %s:%s: %v", repository, tag, err)
	}
	return desc.Digest.String()
}

// PushImage pushes a small random image to ref (host/repo:tag), a multi-platform index when
// platforms > 1, and returns its digest.
func PushImage(tb testing.TB, ref string, platforms int) string {
	tb.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		tb.Fatal(err)
	}
	if platforms > 1 {
		idx, err := random.Index(256, 1, int64(platforms))
		if err != nil {
			tb.Fatal(err)
		}
		if err := remote.WriteIndex(r, idx, remoteOptions(r)...); err != nil {
			tb.Fatalf("push index %s: %v", ref, err)
		}
		d, _ := idx.Digest()
		return d.String()
	}
	img, err := random.Image(256, 1)
	if err != nil {
		tb.Fatal(err)
	}
	if err := remote.Write(r, img, remoteOptions(r)...); err != nil {
		tb.Fatalf("push image %s: %v", ref, err)
	}
	d, _ := img.Digest()
	return d.String()
}

// Exists says whether ref (host/repo@digest or :tag) is in its registry.
func Exists(tb testing.TB, ref string) bool {
	tb.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = remote.Head(r, remoteOptions(r)...)
	return err == nil
}

// Index fetches ref as an index and returns how many manifests it lists.
func Index(tb testing.TB, ref string) int {
	tb.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		tb.Fatal(err)
	}
	idx, err := remote.Index(r, remoteOptions(r)...)
	if err != nil {
		tb.Fatalf("fetch index %s: %v", ref, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		tb.Fatal(err)
	}
	return len(m.Manifests)
}

// Repo is a repository name (host/path) on reg.
func Repo(reg *registry.Registry, path string) string {
	return reg.Addr + "/" + strings.TrimPrefix(path, "/")
}

// Status is the HTTP status a registry answered a failed oras or go-containerregistry call
// with, or 0. oras answers a Basic challenge it has no credential for with
// ErrBasicCredentialNotFound: that counts as 401.
func Status(err error) int {
	if status := oci.RefusalStatus(err); status != 0 {
		return status
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode
	}
	return 0
}
