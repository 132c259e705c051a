// Package oci pulls and pushes OCI artifacts (oras-go v2), and holds what the bundled registry's
// clients and server share: its credentials (a pusher and a puller per namespace), the
// repository layout of Kokumi's artifacts, the sign-in, and the limits of what is pulled. The
// registry server itself is oci/registry, apart so that what only pulls or pushes links none.
package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// Media types Kokumi reads and writes.
const (
	// MediaTypeHelmChart is the layer `helm push` writes.
	MediaTypeHelmChart = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	// MediaTypeHelmConfig is the config `helm push` writes.
	MediaTypeHelmConfig = "application/vnd.cncf.helm.config.v1+json"
	// MediaTypeLayerTarGzip is a gzipped tar layer: the one layer of a Preparation.
	MediaTypeLayerTarGzip = ocispec.MediaTypeImageLayerGzip
	// MediaTypeLayerTar is a plain tar layer.
	MediaTypeLayerTar = ocispec.MediaTypeImageLayer
	// ArtifactTypePreparation is the artifactType of a Preparation's manifest.
	ArtifactTypePreparation = "application/vnd.kokumi.preparation.v1"
)

// maxBlob is the largest layer Kokumi pulls.
const maxBlob = 128 << 20

// maxManifest is the largest manifest Kokumi pulls: the size the OCI distribution spec asks
// registries to accept at least.
const maxManifest = 4 << 20

// Client reaches OCI registries.
type Client struct {
	// Credentials sign in to registries; hosts without one are reached anonymously.
	Credentials Credentials
	// PlainHTTP lists hosts reached over plain HTTP besides loopback ones (the bundled registry).
	PlainHTTP []string
	// HTTPClient sends the requests; nil means Go's default client bounded by ResponseTimeout.
	HTTPClient *http.Client
	// Allow, when set, is asked before a repository (host/path) is opened; its error refuses
	// the repository.
	Allow func(repository string) error
}

// ResponseTimeout is how long a registry may take to start answering one request once it is
// sent: a registry that accepts connections and never answers fails the pull or push instead of
// holding a render until its timeout. A large blob is not bounded by it: it counts until the
// first byte of the answer.
const ResponseTimeout = 20 * time.Second

// defaultHTTPClient is Go's default client, bounded by ResponseTimeout.
var defaultHTTPClient = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = ResponseTimeout
	return &http.Client{Transport: t}
}()

// UsesPlainHTTP says whether a host[:port] is reached over plain HTTP: loopback hosts and
// the ones listed in PlainHTTP.
func (c *Client) UsesPlainHTTP(host string) bool {
	for _, h := range c.PlainHTTP {
		if h == host {
			return true
		}
	}
	hostname := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		hostname = h
	}
	if hostname == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(hostname, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Repository opens a repository named host/path (no oci:// scheme, no tag).
func (c *Client) Repository(name string) (*remote.Repository, error) {
	repo, err := remote.NewRepository(name)
	if err != nil {
		return nil, fmt.Errorf("parse repository %q: %w", name, err)
	}
	if c.Allow != nil {
		if err := c.Allow(repo.Reference.Registry + "/" + repo.Reference.Repository); err != nil {
			return nil, err
		}
	}
	repo.PlainHTTP = c.UsesPlainHTTP(repo.Reference.Registry)
	httpClient := c.HTTPClient
	if httpClient == nil {
		httpClient = defaultHTTPClient
	}
	repo.Client = &auth.Client{
		Client: httpClient,
		Cache:  auth.NewCache(),
		Credential: func(_ context.Context, host string) (auth.Credential, error) {
			cred, ok := c.Credentials.Lookup(host)
			if !ok {
				return auth.EmptyCredential, nil
			}
			if cred.Username == "" {
				return auth.Credential{AccessToken: cred.Password}, nil
			}
			return auth.Credential{Username: cred.Username, Password: cred.Password}, nil
		},
	}
	return repo, nil
}

// TrimScheme turns oci://host/path into host/path.
func TrimScheme(url string) string {
	return strings.TrimPrefix(url, "oci://")
}

// Layer is one layer of a pulled artifact.
type Layer struct {
	// MediaType of the layer.
	MediaType string
	// Title is the org.opencontainers.image.title annotation (a file name), if any.
	Title string
	// Data is the layer's content.
	Data []byte
}

// Pulled is an artifact pulled by tag or digest.
type Pulled struct {
	// Digest is the manifest digest the version resolved to.
	Digest string
	// ConfigMediaType is the media type of the manifest's config.
	ConfigMediaType string
	// Layers in manifest order.
	Layers []Layer
}

// PullLimits bound what a pull reads; a zero field means no limit of its own. Whatever the
// limits, no manifest larger than 4 MiB and no layer larger than 128 MiB is read.
type PullLimits struct {
	// Bytes is the most bytes pulled in all: the manifest and every layer.
	Bytes int64
	// Layers is the most layers the manifest may list.
	Layers int
}

// Pull resolves version (a tag or a sha256: digest; empty is latest) in the repository named
// by url (oci://host/path or host/path) and fetches the manifest and its layers.
func (c *Client) Pull(ctx context.Context, url, version string) (*Pulled, error) {
	return c.PullWithin(ctx, url, version, PullLimits{})
}

// PullWithin is Pull within limits. The layers' sizes the manifest declares are checked
// against the limits before any layer is fetched, and no layer is read past its declared size
// (more bytes fail its digest), so a pull over a limit fails with a *LimitError having read
// at most the manifest.
func (c *Client) PullWithin(ctx context.Context, url, version string, limits PullLimits) (*Pulled, error) {
	repo, err := c.Repository(TrimScheme(url))
	if err != nil {
		return nil, err
	}
	if version == "" {
		version = "latest"
	}
	manifestMax := int64(maxManifest)
	if limits.Bytes > 0 && limits.Bytes < manifestMax {
		manifestMax = limits.Bytes
	}
	desc, manifestBytes, err := oras.FetchBytes(ctx, repo, version, oras.FetchBytesOptions{MaxBytes: manifestMax})
	if err != nil {
		if errors.Is(err, errdef.ErrSizeExceedsLimit) && manifestMax == limits.Bytes {
			return nil, &LimitError{Limit: LimitPulledBytes, Max: limits.Bytes}
		}
		return nil, fmt.Errorf("fetch %s version %s: %w", url, version, err)
	}
	if desc.MediaType != ocispec.MediaTypeImageManifest && desc.MediaType != "application/vnd.docker.distribution.manifest.v2+json" {
		return nil, fmt.Errorf("%s version %s is a %s, not an image manifest", url, version, desc.MediaType)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(manifestBytes, &m); err != nil {
		return nil, fmt.Errorf("parse manifest of %s version %s: %w", url, version, err)
	}
	if limits.Layers > 0 && len(m.Layers) > limits.Layers {
		return nil, &LimitError{Limit: LimitLayers, Max: int64(limits.Layers), Seen: int64(len(m.Layers))}
	}
	total := int64(len(manifestBytes))
	for _, l := range m.Layers {
		if l.Size < 0 || l.Size > maxBlob {
			return nil, fmt.Errorf("layer %s of %s has size %d: layers of 0 to %d bytes are pulled", l.Digest, url, l.Size, maxBlob)
		}
		total += l.Size
	}
	if limits.Bytes > 0 && total > limits.Bytes {
		return nil, &LimitError{Limit: LimitPulledBytes, Max: limits.Bytes, Seen: total}
	}
	p := &Pulled{Digest: desc.Digest.String(), ConfigMediaType: m.Config.MediaType}
	for _, l := range m.Layers {
		// FetchAll reads exactly the declared size and checks the digest.
		data, err := content.FetchAll(ctx, repo, l)
		if err != nil {
			return nil, fmt.Errorf("fetch layer %s of %s: %w", l.Digest, url, err)
		}
		p.Layers = append(p.Layers, Layer{MediaType: l.MediaType, Title: l.Annotations[ocispec.AnnotationTitle], Data: data})
	}
	return p, nil
}

// Manifest builds the manifest of an artifact of one gzipped tar layer: artifactType
// ArtifactTypePreparation, the empty config, and the given annotations. The same layer and
// annotations always give the same bytes.
func Manifest(layer []byte, annotations map[string]string) ([]byte, error) {
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactTypePreparation,
		Config:       ocispec.DescriptorEmptyJSON,
		Layers: []ocispec.Descriptor{{
			MediaType: MediaTypeLayerTarGzip,
			Digest:    digest.FromBytes(layer),
			Size:      int64(len(layer)),
		}},
		Annotations: annotations,
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal manifest: %w", err)
	}
	return b, nil
}

// PushArtifact pushes an artifact of one gzipped tar layer (see Manifest) to the repository
// host/path and returns its manifest digest. Blobs the registry has are not sent again.
func (c *Client) PushArtifact(ctx context.Context, repository string, layer []byte, annotations map[string]string) (string, error) {
	repo, err := c.Repository(repository)
	if err != nil {
		return "", err
	}
	manifest, err := Manifest(layer, annotations)
	if err != nil {
		return "", err
	}
	for _, blob := range []struct {
		mediaType string
		data      []byte
	}{{ocispec.MediaTypeEmptyJSON, ocispec.DescriptorEmptyJSON.Data}, {MediaTypeLayerTarGzip, layer}} {
		if err := pushIfMissing(ctx, repo, blob.mediaType, blob.data); err != nil {
			return "", fmt.Errorf("push to %s: %w", repository, err)
		}
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, manifest)
	if err := repo.Push(ctx, desc, bytes.NewReader(manifest)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return "", fmt.Errorf("push manifest to %s: %w", repository, err)
	}
	return desc.Digest.String(), nil
}

func pushIfMissing(ctx context.Context, repo *remote.Repository, mediaType string, data []byte) error {
	desc := content.NewDescriptorFromBytes(mediaType, data)
	exists, err := repo.Exists(ctx, desc)
	if err != nil {
		return fmt.Errorf("check blob %s: %w", desc.Digest, err)
	}
	if exists {
		return nil
	}
	if err := repo.Push(ctx, desc, bytes.NewReader(data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return fmt.Errorf("push blob %s: %w", desc.Digest, err)
	}
	return nil
}

// RefusalStatus is the HTTP status a registry refused an oras call with, or 0. oras answers a
// Basic challenge it has no credential for with auth.ErrBasicCredentialNotFound ("basic
// credential not found"): that counts as 401.
func RefusalStatus(err error) int {
	if errors.Is(err, auth.ErrBasicCredentialNotFound) {
		return http.StatusUnauthorized
	}
	var resp *errcode.ErrorResponse
	if errors.As(err, &resp) {
		return resp.StatusCode
	}
	return 0
}

// Exists says whether the manifest digest is in repository (host/path), as the registry answers.
func (c *Client) Exists(ctx context.Context, repository, digest string) (bool, error) {
	repo, err := c.Repository(repository)
	if err != nil {
		return false, err
	}
	if _, err := repo.Resolve(ctx, digest); err != nil {
		if IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("look up %s@%s: %w", repository, digest, err)
	}
	return true, nil
}

// IsNotFound says whether err means the registry answered that the repository, tag or
// digest does not exist.
func IsNotFound(err error) bool {
	if errors.Is(err, errdef.ErrNotFound) {
		return true
	}
	var resp *errcode.ErrorResponse
	if errors.As(err, &resp) {
		if resp.StatusCode == http.StatusNotFound {
			return true
		}
		for _, e := range resp.Errors {
			switch e.Code {
			case errcode.ErrorCodeNameUnknown, errcode.ErrorCodeManifestUnknown:
				return true
			}
		}
	}
	return false
}
