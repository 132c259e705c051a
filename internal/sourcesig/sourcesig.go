// Package sourcesig verifies the publishers' signatures of what a render reads — the Product's
// chart or bundle and every image the render pins — in cosign's signature layout, with
// public keys an admin trusts:
//
//   - the tag sha256-<hex>.sig of the input's repository holds an image manifest;
//   - each of its layers is a simple-signing payload (media type
//     application/vnd.dev.cosign.simplesigning.v1+json) naming the signed digest in
//     critical.image.docker-manifest-digest;
//   - the layer's annotation dev.cosignproject.cosign/signature is the base64 ASN.1 ECDSA
//     signature of the SHA-256 of the payload.
//
// That is what `cosign sign --key` writes (v2, and v3 with --new-bundle-format=false). An
// input verifies when one layer names its digest and a trusted key made that layer's
// signature. A result is cached per input digest, signature manifest digest and key set:
// checking an unchanged, already verified input costs one request (the signature tag's digest),
// and a signature removed or replaced is seen at the next check.
package sourcesig

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	"oras.land/oras-go/v2/content"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// MediaTypeSimpleSigning is the media type of a cosign signature layer.
const MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"

// AnnotationSignature holds a layer's base64 signature.
const AnnotationSignature = record.AnnotationSignature

// signatureType is the type cosign writes in a simple-signing payload.
const signatureType = "cosign container image signature"

const (
	// maxManifest is the largest signature manifest read.
	maxManifest = 4 << 20
	// maxPayload is the largest simple-signing payload read.
	maxPayload = 64 << 10
	// maxLayers is the most signature layers read.
	maxLayers = 64
	// maxCache bounds the cache; it starts afresh when full.
	maxCache = 16384
)

// Result is what the check of one input found.
type Result struct {
	// Input is what was checked: "source <repository>" or "image <reference>".
	Input string
	// Repository is where its signatures are looked for (host/path).
	Repository string
	// Digest is the digest checked (sha256:...).
	Digest string
	// KeyID is the trusted key that signed it; empty when none did.
	KeyID string
	// Reason is empty when it verified, else SignatureMissing, SignatureInvalid or
	// UntrustedSigner.
	Reason string
	// Problem says why it did not verify, short and human.
	Problem string
}

// Verified says whether a trusted key signed the input.
func (r Result) Verified() bool { return r.Reason == "" && r.KeyID != "" }

// Verifier checks signatures and remembers what it found. The zero value is ready; it is safe
// for concurrent use.
type Verifier struct {
	mu    sync.Mutex
	cache map[cacheKey]Result
	// fetches counts the signature manifests read (cache misses), for tests.
	fetches int
}

// cacheKey is what a result depends on: the input's digest, the signature manifest's digest
// (its content, and so its payloads and signatures) and the trusted keys.
type cacheKey struct {
	digest, signatures, keys string
}

// SignatureTag is cosign's tag for the signatures of digest: sha256-<hex>.sig.
func SignatureTag(digest string) (string, error) {
	hexPart, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexPart) != 64 {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex digits>", digest)
	}
	return "sha256-" + hexPart + ".sig", nil
}

// Verify checks that a key of keys signed repository@digest in cosign's layout. input names it
// in the result. An error is returned only when the registry could not be read (the check
// says nothing then); a missing or bad signature is a Result with its Reason.
func (v *Verifier) Verify(ctx context.Context, c *oci.Client, input, repository, digest string, keys record.TrustedKeys) (Result, error) {
	res := Result{Input: input, Repository: repository, Digest: digest}
	tag, err := SignatureTag(digest)
	if err != nil {
		return res, fmt.Errorf("verify %s: %w", input, err)
	}
	repo, err := c.Repository(repository)
	if err != nil {
		return res, fmt.Errorf("verify %s: %w", input, err)
	}
	desc, err := repo.Resolve(ctx, tag)
	if oci.IsNotFound(err) {
		return missing(res, fmt.Sprintf("%s has no signature (no tag %s in %s)", digest, tag, repository)), nil
	}
	if err != nil {
		return res, fmt.Errorf("verify %s: read %s:%s: %w", input, repository, tag, err)
	}
	key := cacheKey{digest: digest, signatures: desc.Digest.String(), keys: keys.Set()}
	if r, ok := v.cached(key); ok {
		r.Input = input
		return r, nil
	}
	if desc.Size > maxManifest {
		return res, fmt.Errorf("verify %s: %s:%s is %d bytes, more than %d", input, repository, tag, desc.Size, maxManifest)
	}
	data, err := content.FetchAll(ctx, repo, desc)
	if err != nil {
		return res, fmt.Errorf("verify %s: read %s:%s: %w", input, repository, tag, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return v.remember(key, invalid(res, fmt.Sprintf("%s:%s is not an image manifest: %v", repository, tag, err))), nil
	}
	layers := 0
	var problems []string
	for _, l := range m.Layers {
		if l.MediaType != MediaTypeSimpleSigning {
			continue
		}
		layers++
		if layers > maxLayers {
			break
		}
		if l.Size > maxPayload {
			problems = append(problems, fmt.Sprintf("payload %s is larger than %d bytes", l.Digest, maxPayload))
			continue
		}
		rc, err := repo.Blobs().Fetch(ctx, l)
		if err != nil {
			return res, fmt.Errorf("verify %s: read signature %s: %w", input, l.Digest, err)
		}
		payload, err := content.ReadAll(io.NopCloser(rc), l)
		_ = rc.Close()
		if err != nil {
			return res, fmt.Errorf("verify %s: read signature %s: %w", input, l.Digest, err)
		}
		keyID, problem := check(payload, l.Annotations[AnnotationSignature], digest, keys)
		if problem == "" {
			res.KeyID = keyID
			return v.remember(key, res), nil
		}
		problems = append(problems, problem)
	}
	if layers == 0 {
		return v.remember(key, missing(res, fmt.Sprintf("%s:%s holds no cosign signature", repository, tag))), nil
	}
	// A signature about another digest, or one that does not read, was tampered with (or
	// moved onto this input); otherwise each is well formed and names this digest, and no
	// trusted key made it.
	for _, p := range problems {
		if !strings.HasPrefix(p, untrusted) {
			return v.remember(key, invalid(res, p)), nil
		}
	}
	res.Reason = v1.ReasonUntrustedSigner
	res.Problem = fmt.Sprintf("%s is signed, but by none of the %d trusted keys (%s)", digest, keys.Len(), keys.Set())
	return v.remember(key, res), nil
}

// untrusted starts the problem of a well-formed signature no trusted key made.
const untrusted = "signed by no trusted key"

// check verifies one simple-signing payload and its base64 signature for digest, and returns
// the id of the key that made it, or the problem.
func check(payload []byte, sigB64, digest string, keys record.TrustedKeys) (keyID, problem string) {
	sig, err := base64.StdEncoding.DecodeString(sigB64)
	if err != nil || len(sig) == 0 {
		return "", "a signature layer has no base64 signature in " + AnnotationSignature
	}
	var p struct {
		Critical struct {
			Image struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return "", fmt.Sprintf("a signature's payload is not JSON: %v", err)
	}
	if p.Critical.Type != signatureType {
		return "", fmt.Sprintf("a signature's payload has type %q, not %q", p.Critical.Type, signatureType)
	}
	if p.Critical.Image.Digest != digest {
		return "", fmt.Sprintf("a signature is about %s, not %s (copied from another artifact, or tampered with)", p.Critical.Image.Digest, digest)
	}
	id, ok := keys.VerifySignature(payload, sig)
	if !ok {
		return "", untrusted
	}
	return id, ""
}

func missing(r Result, problem string) Result {
	r.Reason, r.Problem = v1.ReasonSignatureMissing, problem
	return r
}

func invalid(r Result, problem string) Result {
	r.Reason, r.Problem = v1.ReasonSignatureInvalid, problem
	return r
}

func (v *Verifier) cached(k cacheKey) (Result, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.cache[k]
	return r, ok
}

// remember caches r under k and returns it.
func (v *Verifier) remember(k cacheKey, r Result) Result {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.fetches++
	if v.cache == nil || len(v.cache) >= maxCache {
		v.cache = map[cacheKey]Result{}
	}
	v.cache[k] = r
	return r
}

// Fetches is how many signature manifests were read rather than taken from the cache.
func (v *Verifier) Fetches() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.fetches
}

// Repository is the repository (host/path) an image reference's signatures are in: the
// repository it names, normalised as registries name it (nginx is index.docker.io/library/nginx).
func Repository(image string) (string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", image, err)
	}
	return ref.Context().Name(), nil
}

// TrustedKeys reads the public keys of the ConfigMaps names of namespace (Kokumi's): only
// ConfigMaps an admin labelled v1.TrustedKeysLabel=true count, so that a tenant
// can name no key of its own; each *.pub entry is a PEM ECDSA public key. field names what
// asked for them (spec.verify.publicKeys of Product x) in the errors, which say the fix.
func TrustedKeys(ctx context.Context, reader client.Reader, namespace, field string, names []string) (record.TrustedKeys, error) {
	var pems [][]byte
	for _, n := range names {
		what := fmt.Sprintf("%s names ConfigMap %s/%s", field, namespace, n)
		var cm corev1.ConfigMap
		if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: n}, &cm); err != nil {
			return record.TrustedKeys{}, fmt.Errorf("%s: %w: ask an admin to create it, or fix the name", what, err)
		}
		if cm.Labels[v1.TrustedKeysLabel] != "true" {
			return record.TrustedKeys{}, fmt.Errorf("%s, which is not labelled %s=true: only ConfigMaps an admin marks hold keys to trust", what, v1.TrustedKeysLabel)
		}
		entries := make([]string, 0, len(cm.Data))
		for k := range cm.Data {
			if strings.HasSuffix(k, ".pub") {
				entries = append(entries, k)
			}
		}
		if len(entries) == 0 {
			return record.TrustedKeys{}, fmt.Errorf("%s, which has no *.pub entry: ask an admin to add the publisher's public key", what)
		}
		slices.Sort(entries)
		for _, k := range entries {
			pems = append(pems, []byte(cm.Data[k]))
		}
	}
	keys, err := record.ParseTrustedKeys(pems...)
	if err != nil {
		return record.TrustedKeys{}, fmt.Errorf("%s: %w: each *.pub entry must be a PEM ECDSA public key", field, err)
	}
	return keys, nil
}
