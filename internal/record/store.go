package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// Annotations cosign writes on the layers of its attestation image.
const (
	// AnnotationSignature is the base64 signature of a simple-signing layer; cosign writes it
	// empty on attestation layers (the signature is inside the envelope) and fails to read a
	// layer without it.
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// AnnotationPredicateType is the predicate type of the statement in the envelope.
	AnnotationPredicateType = "predicateType"
)

const (
	// maxEnvelope is the largest envelope Kokumi reads back.
	maxEnvelope = 4 << 20
	// maxLayers is the most layers cosign reads from an attestation image; it refuses more.
	maxLayers = 1000
	// maxCache bounds the verification cache; it starts afresh when full.
	maxCache = 8192
	// attachAttempts is how often Attach writes the attestation image when another writer
	// replaced it at the same time.
	attachAttempts = 3
	// KeepPerEnvironment is how many records of each Environment (of one Order, signed by one
	// key) compaction keeps, the newest, before Attach adds its own: as many as a Preparation's
	// status lists.
	KeepPerEnvironment = 32
)

// Store reads and writes records in registries. The zero value with a Client is ready; it is
// safe for concurrent use.
type Store struct {
	// Client gives the registry credentials and the hosts reached over plain HTTP.
	Client *oci.Client

	mu    sync.Mutex
	cache map[cacheKey]Record
}

// cacheKey is what a verification depends on: the envelope (by digest), the artifact and the
// trusted keys.
type cacheKey struct {
	layer, artifact, keys string
}

// AttestationTag is cosign's tag for the attestations of an artifact: sha256-<hex>.att.
func AttestationTag(artifactDigest string) (string, error) {
	hexPart, err := splitDigest(artifactDigest)
	if err != nil {
		return "", err
	}
	return "sha256-" + hexPart + ".att", nil
}

// Attach signs a statement for the artifact repository@artifactDigest (repository is host/path,
// no scheme; artifactDigest is sha256:...) and appends it to the artifact's attestation image,
// creating that image if needed. It returns the record digest (the layer digest). A record
// already attached (the same statement signed by the same key) is not added again.
func (s *Store) Attach(ctx context.Context, repository, artifactDigest string, signer *Signer, p Predicate) (string, error) {
	envelope, err := Envelope(ctx, repository, artifactDigest, signer, p)
	if err != nil {
		return "", err
	}
	return s.AttachEnvelope(ctx, repository, artifactDigest, PredicateType, envelope)
}

// AttachEnvelope appends a signed DSSE envelope of an in-toto Statement about the artifact
// repository@artifactDigest, whose predicate type is predicateType, to the artifact's
// attestation image (cosign's layout), creating that image if needed, and returns its digest
// (the layer digest). An envelope already attached is not added again.
func (s *Store) AttachEnvelope(ctx context.Context, repository, artifactDigest, predicateType string, envelope []byte) (string, error) {
	digest, _, err := s.attach(ctx, repository, artifactDigest, predicateType, envelope)
	return digest, err
}

// attachStatement signs an in-toto Statement about the artifact with the predicate type and
// predicate (SignStatement) and attaches it (attach); what names it in errors.
func (s *Store) attachStatement(ctx context.Context, repository, artifactDigest string, signer *Signer, predicateType, what string, predicate any) (string, bool, error) {
	envelope, err := SignStatement(ctx, repository, artifactDigest, signer, predicateType, predicate)
	if err != nil {
		return "", false, fmt.Errorf("sign %s: %w", what, err)
	}
	return s.attach(ctx, repository, artifactDigest, predicateType, envelope)
}

// attach is AttachEnvelope, and says whether the envelope was added (false: it was attached
// already).
func (s *Store) attach(ctx context.Context, repository, artifactDigest, predicateType string, envelope []byte) (string, bool, error) {
	layer := static.NewLayer(envelope, MediaTypeEnvelope)
	ld, err := layer.Digest()
	if err != nil {
		return "", false, fmt.Errorf("attach record to %s@%s: %w", repository, artifactDigest, err)
	}
	repo, opts, err := s.remote(ctx, repository)
	if err != nil {
		return "", false, err
	}
	if _, err := remote.Head(repo.Digest(artifactDigest), opts...); err != nil {
		return "", false, fmt.Errorf("attach record to %s@%s: find the artifact: %w", repository, artifactDigest, err)
	}
	tagName, _ := AttestationTag(artifactDigest)
	tag := repo.Tag(tagName)
	for attempt := 1; ; attempt++ {
		base, err := s.attestations(tag, opts)
		if err != nil {
			return "", false, err
		}
		m, err := base.Manifest()
		if err != nil {
			return "", false, fmt.Errorf("read %s: %w", tag, err)
		}
		if hasLayer(m, ld) {
			return ld.String(), attempt > 1, nil
		}
		if len(m.Layers) >= maxLayers {
			if base, err = compact(base, m); err != nil {
				return "", false, fmt.Errorf("attach record to %s@%s: compact %s: %w", repository, artifactDigest, tag, err)
			}
			if m, err = base.Manifest(); err != nil {
				return "", false, fmt.Errorf("read %s: %w", tag, err)
			}
			if len(m.Layers) >= maxLayers {
				return "", false, fmt.Errorf("attach record to %s@%s: %s holds %d attestations, the most cosign reads, and none of them is an older record of an Environment", repository, artifactDigest, tag, len(m.Layers))
			}
		}
		img, err := mutate.Append(base, mutate.Addendum{
			Layer:       layer,
			Annotations: map[string]string{AnnotationSignature: "", AnnotationPredicateType: predicateType},
			MediaType:   MediaTypeEnvelope,
		})
		if err != nil {
			return "", false, fmt.Errorf("attach record to %s@%s: %w", repository, artifactDigest, err)
		}
		if err := remote.Write(tag, img, opts...); err != nil {
			return "", false, fmt.Errorf("attach record to %s@%s: write %s: %w", repository, artifactDigest, tag, err)
		}
		// Another writer may have replaced the tag between the read and the write: check that
		// the record is there, and append it again if not.
		after, err := s.attestations(tag, opts)
		if err != nil {
			return "", false, err
		}
		if am, err := after.Manifest(); err == nil && hasLayer(am, ld) {
			return ld.String(), true, nil
		}
		if attempt == attachAttempts {
			return "", false, fmt.Errorf("attach record to %s@%s: %s kept changing while it was written", repository, artifactDigest, tag)
		}
	}
}

// compact returns the attestation image base (whose manifest is m) without the records older than
// the newest KeepPerEnvironment of each Environment: the records are grouped by what says who
// made them (the namespace, Order and Environment of their predicate, and the key ids of their
// signatures) and, in each group, the newest (attached last) are kept, in their order. Layers
// that are not Kokumi records, or that do not read, are all kept. The newest verified record of
// an Environment, which the promotion gate takes, is the newest of its group under a trusted key,
// so compaction never changes what the gate reads while a group keeps at least one.
func compact(base v1.Image, m *v1.Manifest) (v1.Image, error) {
	keep := make([]bool, len(m.Layers))
	seen := map[string]int{}
	for i := len(m.Layers) - 1; i >= 0; i-- { // newest first
		l := m.Layers[i]
		group, ok := "", false
		if l.MediaType == MediaTypeEnvelope && l.Size <= maxEnvelope {
			envelope, err := fetch(base, l.Digest)
			if err != nil {
				return nil, fmt.Errorf("read record %s: %w", l.Digest, err)
			}
			group, ok = recordGroup(envelope)
		}
		if !ok {
			keep[i] = true
			continue
		}
		seen[group]++
		keep[i] = seen[group] <= KeepPerEnvironment
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	var adds []mutate.Addendum
	for i, l := range m.Layers {
		if !keep[i] {
			continue
		}
		layer, err := base.LayerByDigest(l.Digest)
		if err != nil {
			return nil, fmt.Errorf("read layer %s: %w", l.Digest, err)
		}
		adds = append(adds, mutate.Addendum{Layer: layer, Annotations: l.Annotations, MediaType: l.MediaType})
	}
	out, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func hasLayer(m *v1.Manifest, d v1.Hash) bool {
	for _, l := range m.Layers {
		if l.Digest == d {
			return true
		}
	}
	return false
}

// attestations fetches the attestation image at tag, or an empty one (OCI media types, as
// cosign makes it) when there is none.
func (s *Store) attestations(tag name.Tag, opts []remote.Option) (v1.Image, error) {
	img, err := remote.Image(tag, opts...)
	if err == nil {
		return img, nil
	}
	if !isNotFound(err) {
		return nil, fmt.Errorf("read %s: %w", tag, err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	return mutate.ConfigMediaType(base, types.OCIConfigJSON), nil
}

// Records fetches every record attached to the artifact repository@artifactDigest and verifies
// each with keys (signature, statement type, predicate type, subject digest). An artifact
// without attestations has no records. Attestations that are not Kokumi records are listed,
// unverified, without being fetched; SLSA provenance (ProvenancePredicateType), which every
// render attaches, revocations and roll-out failures (Attestations reads them) are left out.
func (s *Store) Records(ctx context.Context, repository, artifactDigest string, keys TrustedKeys) ([]Record, error) {
	a, err := s.Attestations(ctx, repository, artifactDigest, keys)
	return a.Records, err
}

// Attested is what Attestations reads of an artifact: its records, as Records lists them, its
// revocations and its roll-out failures, each verified; Evidence adds its provenance's changes.
type Attested struct {
	Records     []Record
	Revocations []Revocation
	Failures    []Failure
	Changes     []Change
}

// Attestations fetches the records, the revocations and the roll-out failures attached to the
// artifact repository@artifactDigest, and verifies each with keys.
func (s *Store) Attestations(ctx context.Context, repository, artifactDigest string, keys TrustedKeys) (Attested, error) {
	return s.read(ctx, repository, artifactDigest, keys, false)
}

// Evidence is Attestations, and reads when the artifact's render started from each SLSA
// provenance attached to it (Changes): all a delivery measure needs of an artifact.
func (s *Store) Evidence(ctx context.Context, repository, artifactDigest string, keys TrustedKeys) (Attested, error) {
	return s.read(ctx, repository, artifactDigest, keys, true)
}

// read fetches and verifies what Attestations and Evidence read.
func (s *Store) read(ctx context.Context, repository, artifactDigest string, keys TrustedKeys, provenance bool) (Attested, error) {
	tagName, err := AttestationTag(artifactDigest)
	if err != nil {
		return Attested{}, fmt.Errorf("read records of %s: %w", repository, err)
	}
	repo, opts, err := s.remote(ctx, repository)
	if err != nil {
		return Attested{}, err
	}
	tag := repo.Tag(tagName)
	img, err := remote.Image(tag, opts...)
	if isNotFound(err) {
		return Attested{Records: []Record{}}, nil
	}
	if err != nil {
		return Attested{}, fmt.Errorf("read records of %s@%s: %w", repository, artifactDigest, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return Attested{}, fmt.Errorf("read records of %s@%s: %w", repository, artifactDigest, err)
	}
	keyIDs := keys.Set()
	out := Attested{Records: make([]Record, 0, len(m.Layers))}
	for _, l := range m.Layers {
		if l.MediaType != MediaTypeEnvelope {
			out.Records = append(out.Records, Record{Digest: l.Digest.String(), Problem: fmt.Sprintf("not a Kokumi record (media type %q)", l.MediaType)})
			continue
		}
		pt, annotated := l.Annotations[AnnotationPredicateType]
		switch {
		case pt == ProvenancePredicateType && provenance && l.Size <= maxEnvelope:
			envelope, err := fetch(img, l.Digest)
			if err != nil {
				return Attested{}, fmt.Errorf("read provenance %s of %s@%s: %w", l.Digest, repository, artifactDigest, err)
			}
			out.Changes = append(out.Changes, VerifyChange(envelope, artifactDigest, keys))
			continue
		case pt == ProvenancePredicateType:
			continue // a render's provenance, no record
		case pt == FailurePredicateType && l.Size <= maxEnvelope:
			envelope, err := fetch(img, l.Digest)
			if err != nil {
				return Attested{}, fmt.Errorf("read roll-out failure %s of %s@%s: %w", l.Digest, repository, artifactDigest, err)
			}
			out.Failures = append(out.Failures, VerifyFailure(envelope, artifactDigest, keys))
			continue
		case pt == RevocationPredicateType && l.Size <= maxEnvelope:
			envelope, err := fetch(img, l.Digest)
			if err != nil {
				return Attested{}, fmt.Errorf("read revocation %s of %s@%s: %w", l.Digest, repository, artifactDigest, err)
			}
			out.Revocations = append(out.Revocations, VerifyRevocation(envelope, artifactDigest, keys))
			continue
		case annotated && pt != PredicateType:
			out.Records = append(out.Records, Record{Digest: l.Digest.String(), Problem: fmt.Sprintf("not a Kokumi record (predicate type %q)", pt)})
			continue
		case l.Size > maxEnvelope:
			out.Records = append(out.Records, Record{Digest: l.Digest.String(), Problem: fmt.Sprintf("envelope of %d bytes is larger than %d", l.Size, maxEnvelope)})
			continue
		}
		key := cacheKey{layer: l.Digest.String(), artifact: artifactDigest, keys: keyIDs}
		if r, ok := s.cached(key); ok {
			out.Records = append(out.Records, r)
			continue
		}
		envelope, err := fetch(img, l.Digest)
		if err != nil {
			return Attested{}, fmt.Errorf("read record %s of %s@%s: %w", l.Digest, repository, artifactDigest, err)
		}
		r := Verify(envelope, artifactDigest, keys)
		s.remember(key, r)
		out.Records = append(out.Records, r)
	}
	return out, nil
}

// fetch reads a layer of img; remote layers check their digest as they are read.
func fetch(img v1.Image, d v1.Hash) ([]byte, error) {
	l, err := img.LayerByDigest(d)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, maxEnvelope+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxEnvelope {
		return nil, fmt.Errorf("larger than %d bytes", maxEnvelope)
	}
	return data, nil
}

func (s *Store) cached(k cacheKey) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.cache[k]
	return r, ok
}

func (s *Store) remember(k cacheKey, r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cache == nil || len(s.cache) >= maxCache {
		s.cache = map[cacheKey]Record{}
	}
	s.cache[k] = r
}

// remote parses a repository (host/path) and makes the go-containerregistry options that reach
// it as the oci.Client does: its credentials, and plain HTTP only for the hosts it reaches
// over plain HTTP.
func (s *Store) remote(ctx context.Context, repository string) (name.Repository, []remote.Option, error) {
	c := s.Client
	if c == nil {
		c = &oci.Client{}
	}
	repo, err := name.NewRepository(repository)
	if err != nil {
		return name.Repository{}, nil, fmt.Errorf("parse repository %q: %w", repository, err)
	}
	plain := c.UsesPlainHTTP(repo.RegistryStr())
	if plain {
		if repo, err = name.NewRepository(repository, name.Insecure); err != nil {
			return name.Repository{}, nil, fmt.Errorf("parse repository %q: %w", repository, err)
		}
	}
	base := remote.DefaultTransport
	if c.HTTPClient != nil && c.HTTPClient.Transport != nil {
		base = c.HTTPClient.Transport
	}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(oci.Keychain{Credentials: c.Credentials}),
		remote.WithTransport(&schemeRule{base: base, plain: c.UsesPlainHTTP}),
		remote.WithUserAgent("kokumi"),
	}
	return repo, opts, nil
}

// schemeRule reaches each host with the one scheme the oci.Client uses for it.
// go-containerregistry otherwise races HTTPS against HTTP for loopback and private (RFC 1918)
// addresses: HTTP would be used for private hosts the Client reaches over HTTPS, and the HTTPS
// attempt leaves a half-open connection on plain-HTTP registries.
type schemeRule struct {
	base  http.RoundTripper
	plain func(host string) bool
}

// RoundTrip implements http.RoundTripper.
func (t *schemeRule) RoundTrip(req *http.Request) (*http.Response, error) {
	plain := t.plain(req.URL.Host)
	switch {
	case req.URL.Scheme == "http" && !plain:
		return nil, fmt.Errorf("refusing plain HTTP to %s: it is not a loopback or listed plain-HTTP host", req.URL.Host)
	case req.URL.Scheme == "https" && plain:
		return nil, fmt.Errorf("%s is reached over plain HTTP", req.URL.Host)
	}
	return t.base.RoundTrip(req)
}

// isNotFound says whether err means the registry has no such repository, tag or manifest.
func isNotFound(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	if te.StatusCode == http.StatusNotFound {
		return true
	}
	for _, d := range te.Errors {
		switch d.Code {
		case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
			return true
		}
	}
	return false
}
