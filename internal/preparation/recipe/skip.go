package recipe

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
)

// Preparations reads a Preparation by namespace and name (the Order reconciler's cache); a
// Preparation that cannot be read is an error.
type Preparations interface {
	Preparation(ctx context.Context, namespace, name string) (*v1.Preparation, error)
}

// Skip holds what the skip rule reads: the registries through the render's Builder, the bundled
// registry that holds the artifacts, and the Preparations.
type Skip struct {
	Builder         *build.Builder
	BundledRegistry string
	Preparations    Preparations
}

// Unchanged returns the Order's Preparation of one of candidates (preparation.Candidates) when a
// render would make it again, found without rendering: what the render reads hashes to the
// inputs hash of a render that made it (the source version resolving to the same digest: one
// HEAD request), every image tag of the Preparation still points to the digest it pinned (one
// HEAD request each), and the bundled registry holds its artifact. Each candidate is verified
// against the inputs now, so none can skip a render that is needed. It returns nil when nothing
// holds or a registry does not answer: the render that follows makes what is needed, or says
// what failed. It fails only when the bundled registry cannot tell whether it holds the
// artifact, which no render would change. The second result is the inputs hash that matched.
func (s Skip) Unchanged(ctx context.Context, order *v1.Order, product *v1.Product, in build.Input,
	candidates []preparation.Render) (*v1.Preparation, string, *preparation.Failure) {
	if len(candidates) == 0 {
		return nil, "", nil
	}
	sourceDigest, err := ResolveSource(ctx, s.Builder.Sources, in)
	if err != nil {
		return nil, "", nil
	}
	inputs := InputsHash(in, sourceDigest, product)
	for _, c := range candidates {
		if c.Inputs != inputs {
			continue
		}
		latest, f := s.stillCurrent(ctx, order, c.Preparation)
		if f != nil || latest != nil {
			return latest, inputs, f
		}
	}
	return nil, "", nil
}

// stillCurrent returns the Order's Preparation of that name when its images' tags still point to the
// digests it pinned and the bundled registry holds its artifact; nil when not (see Unchanged).
func (s Skip) stillCurrent(ctx context.Context, order *v1.Order, name string) (*v1.Preparation, *preparation.Failure) {
	latest, err := s.Preparations.Preparation(ctx, order.Namespace, name)
	if err != nil || !metav1.IsControlledBy(latest, order) {
		return nil, nil
	}
	originals := make([]string, len(latest.Spec.Images))
	for i, img := range latest.Spec.Images {
		originals[i] = img.Original
	}
	pins, err := s.Builder.Images.Resolve(ctx, originals, "")
	if err != nil {
		return nil, nil
	}
	for i, p := range pins {
		if RefDigest(p.Pinned) != RefDigest(latest.Spec.Images[i].Pinned) {
			return nil, nil
		}
	}
	present, err := ArtifactPresent(ctx, s.Builder.Sources, s.BundledRegistry, latest)
	if err != nil {
		return nil, &preparation.Failure{Reason: v1.ReasonPushFailed, Message: err.Error()}
	}
	if !present {
		return nil, nil
	}
	return latest, nil
}

// ResolveSource resolves the input's source version (a tag or a digest; empty is latest) to
// the digest a pull would get, with one HEAD request.
func ResolveSource(ctx context.Context, sources *oci.Client, in build.Input) (string, error) {
	repo, err := sources.Repository(oci.TrimScheme(in.SourceURL))
	if err != nil {
		return "", err
	}
	version := in.Version
	if version == "" {
		version = "latest"
	}
	desc, err := repo.Resolve(ctx, version)
	if err != nil {
		return "", fmt.Errorf("resolve version %s of %s: %w", version, in.SourceURL, err)
	}
	return desc.Digest.String(), nil
}

// RefDigest is the digest of an image reference by digest (after its @).
func RefDigest(ref string) string {
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		return ref[i+1:]
	}
	return ""
}

// ArtifactPresent says whether the bundled registry holds prep's artifact, at the address
// preparation.ArtifactLocation gives.
func ArtifactPresent(ctx context.Context, sources *oci.Client, bundledRegistry string, prep *v1.Preparation) (bool, error) {
	repository, digest := preparation.ArtifactLocation(bundledRegistry, prep)
	repo, err := sources.Repository(repository)
	if err != nil {
		return false, fmt.Errorf("the artifact of Preparation %s: %w", prep.Name, err)
	}
	if _, err := repo.Resolve(ctx, digest); err != nil {
		if oci.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("cannot tell whether the bundled registry holds the artifact %s@%s of Preparation %s (%w): check that the registry is running", repository, digest, prep.Name, err)
	}
	return true, nil
}
