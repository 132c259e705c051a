// Package provenance writes the provenance of a render: an in-toto Statement v1 whose subject is
// the Preparation's artifact and whose predicate is SLSA Provenance v1
// (https://slsa.dev/provenance/v1) — the builder (Kokumi's version, commit and the digest of its
// executable), the render's parameters, and what it was made of (the source's digest, the values'
// digest, every image before and after pinning, and how the Product's verification found each
// input). It is signed as a DSSE envelope with Kokumi's signing key and attached to the artifact
// in cosign's attestation layout, as deployment records are, so that stock cosign verifies it:
//
//	cosign verify-attestation --key kokumi.pub --insecure-ignore-tlog \
//	  --type slsaprovenance1 <host>/<repo>@sha256:<hex>
package provenance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
	"github.com/kokumi-dev/kokumi/internal/version"
)

const (
	// PredicateType is SLSA Provenance v1, which `cosign verify-attestation --type
	// slsaprovenance1` selects.
	PredicateType = record.ProvenancePredicateType
	// BuildType says how to read the build definition: a Kokumi render.
	BuildType = "https://kokumi.dev/render/v1"
	// BuilderID names the builder: Kokumi's controller.
	BuilderID = "https://kokumi.dev/controller"
)

// Render is what a render was asked and what it read.
type Render struct {
	// Namespace, Order and Product name who asked for the render.
	Namespace, Order, Product string
	// SourceURL (oci://…) and Version are the Product's source; SourceDigest what the version
	// resolved to.
	SourceURL, Version, SourceDigest string
	// Values are the Helm values; only their digest is written.
	Values map[string]any
	// ReleaseName, TargetNamespace and IncludeCRDs are the render's parameters.
	ReleaseName, TargetNamespace string
	IncludeCRDs                  bool
	// VendorRegistry is where images were copied to; empty when they were pinned in place.
	VendorRegistry string
	// Images are the images of the manifests, before (Original) and after (Pinned) pinning.
	Images []images.Pin
	// ParentDigest is the artifact of the Preparation this one follows.
	ParentDigest string
	// Verify are the key ConfigMaps the Product's spec.verify named; nil when it asked none.
	Verify []string
	// Verified are the results of that verification, one per input.
	Verified []sourcesig.Result
	// StartedOn is when the render started (written to the second, in UTC); zero writes none.
	StartedOn time.Time
}

// Predicate is a SLSA Provenance v1 predicate.
type Predicate struct {
	BuildDefinition BuildDefinition `json:"buildDefinition"`
	RunDetails      RunDetails      `json:"runDetails"`
}

// BuildDefinition is what was built and how.
type BuildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   ExternalParameters   `json:"externalParameters"`
	ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies"`
}

// ExternalParameters are the render's parameters, as the Order and Product asked.
type ExternalParameters struct {
	Namespace       string `json:"namespace"`
	Order           string `json:"order"`
	Product         string `json:"product"`
	Source          string `json:"source"`
	Version         string `json:"version,omitempty"`
	ValuesDigest    string `json:"valuesDigest"`
	ReleaseName     string `json:"releaseName,omitempty"`
	TargetNamespace string `json:"targetNamespace"`
	IncludeCRDs     bool   `json:"includeCRDs,omitempty"`
	VendorRegistry  string `json:"vendorRegistry,omitempty"`
	ParentDigest    string `json:"parentDigest,omitempty"`
	// Verify names the key ConfigMaps the Product trusted; absent when it asked no verification.
	Verify []string `json:"verify,omitempty"`
}

// ResourceDescriptor is one input of the render.
type ResourceDescriptor struct {
	Name   string            `json:"name"`
	URI    string            `json:"uri"`
	Digest map[string]string `json:"digest"`
	// Annotations: "pinned" (an image's reference after pinning), "verified" ("true" when a
	// trusted key signed it, absent when no verification was asked) and "keyID".
	Annotations map[string]string `json:"annotations,omitempty"`
}

// RunDetails say who built it.
type RunDetails struct {
	Builder  Builder  `json:"builder"`
	Metadata Metadata `json:"metadata"`
}

// Builder is Kokumi.
type Builder struct {
	ID      string            `json:"id"`
	Version map[string]string `json:"version"`
	// BuilderDependencies holds Kokumi's executable, by digest.
	BuilderDependencies []ResourceDescriptor `json:"builderDependencies,omitempty"`
}

// Metadata identifies the run.
type Metadata struct {
	InvocationID string `json:"invocationId"`
	// StartedOn is when the render started: when Kokumi took up the change it renders. The
	// delivery measures count a change's lead time from it (docs/metrics.md).
	StartedOn *time.Time `json:"startedOn,omitempty"`
}

// Of is the predicate of a render.
func Of(r Render) (Predicate, error) {
	values, err := json.Marshal(r.Values) // maps marshal with their keys sorted
	if err != nil {
		return Predicate{}, fmt.Errorf("provenance: marshal values: %w", err)
	}
	vsum := sha256.Sum256(values)
	verified := map[string]sourcesig.Result{}
	for _, v := range r.Verified {
		verified[v.Repository+"@"+v.Digest] = v
	}
	annotate := func(d *ResourceDescriptor, repository, digest string) {
		if r.Verify == nil {
			return
		}
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		v, ok := verified[repository+"@"+digest]
		d.Annotations["verified"] = fmt.Sprint(ok && v.Verified())
		if ok && v.KeyID != "" {
			d.Annotations["keyID"] = v.KeyID
		}
	}
	source := ResourceDescriptor{Name: "source", URI: r.SourceURL + "@" + r.SourceDigest, Digest: digestMap(r.SourceDigest)}
	annotate(&source, strings.TrimPrefix(r.SourceURL, "oci://"), r.SourceDigest)
	deps := []ResourceDescriptor{source}
	for _, p := range r.Images {
		digest := p.Pinned[strings.LastIndex(p.Pinned, "@")+1:]
		d := ResourceDescriptor{Name: "image", URI: p.Original, Digest: digestMap(digest), Annotations: map[string]string{"pinned": p.Pinned}}
		annotate(&d, repositoryOf(p.Original), digest)
		deps = append(deps, d)
	}
	b := Builder{ID: BuilderID, Version: map[string]string{"kokumi": version.Version}}
	if version.Commit != "" {
		b.Version["commit"] = version.Commit
	}
	if exe, err := executableDigest(); err == nil {
		b.BuilderDependencies = []ResourceDescriptor{{Name: "kokumi", URI: "file://kokumi", Digest: digestMap(exe)}}
	}
	md := Metadata{InvocationID: r.Namespace + "/" + r.Order + "@" + r.SourceDigest}
	if !r.StartedOn.IsZero() {
		t := r.StartedOn.UTC().Truncate(time.Second)
		md.StartedOn = &t
	}
	return Predicate{
		BuildDefinition: BuildDefinition{
			BuildType: BuildType,
			ExternalParameters: ExternalParameters{
				Namespace: r.Namespace, Order: r.Order, Product: r.Product, Source: r.SourceURL, Version: r.Version,
				ValuesDigest: "sha256:" + hex.EncodeToString(vsum[:]), ReleaseName: r.ReleaseName, TargetNamespace: r.TargetNamespace,
				IncludeCRDs: r.IncludeCRDs, VendorRegistry: r.VendorRegistry, ParentDigest: r.ParentDigest, Verify: slices.Clone(r.Verify),
			},
			ResolvedDependencies: deps,
		},
		RunDetails: RunDetails{Builder: b, Metadata: md},
	}, nil
}

// Attach signs the provenance of a render that pushed repository@artifactDigest and attaches it
// to the artifact; it returns the envelope's digest. The same render signed by the same key is
// attached once.
func Attach(ctx context.Context, store *record.Store, signer *record.Signer, repository, artifactDigest string, r Render) (string, error) {
	p, err := Of(r)
	if err != nil {
		return "", err
	}
	envelope, err := record.SignStatement(ctx, repository, artifactDigest, signer, PredicateType, p)
	if err != nil {
		return "", fmt.Errorf("provenance of %s@%s: %w", repository, artifactDigest, err)
	}
	digest, err := store.AttachEnvelope(ctx, repository, artifactDigest, PredicateType, envelope)
	if err != nil {
		return "", fmt.Errorf("provenance of %s@%s: %w", repository, artifactDigest, err)
	}
	return digest, nil
}

// digestMap is an in-toto digest set of a sha256:<hex> digest.
func digestMap(d string) map[string]string {
	algo, hexPart, ok := strings.Cut(d, ":")
	if !ok {
		return map[string]string{}
	}
	return map[string]string{algo: hexPart}
}

// repositoryOf is the repository (host/path) of an image reference, as sourcesig reads it.
func repositoryOf(ref string) string {
	repo, err := sourcesig.Repository(ref)
	if err != nil {
		return ref
	}
	return repo
}

var (
	exeOnce   sync.Once
	exeDigest string
	exeErr    error
)

// executableDigest is the sha256 digest of Kokumi's running executable, read once.
func executableDigest() (string, error) {
	exeOnce.Do(func() {
		path, err := os.Executable()
		if err != nil {
			exeErr = err
			return
		}
		f, err := os.Open(path)
		if err != nil {
			exeErr = err
			return
		}
		defer func() { _ = f.Close() }()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			exeErr = err
			return
		}
		exeDigest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	})
	return exeDigest, exeErr
}
