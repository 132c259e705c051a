// Package build builds what a Preparation records: it pulls a Product's source, renders
// it, pins or vendors its images, packs the manifests into one deterministic layer and pushes
// it as an OCI artifact Argo CD syncs. It talks to registries, never to the API server.
package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/kokumi-dev/kokumi/internal/manifests"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// Annotations on a Preparation's artifact, besides the OCI ones.
const (
	// AnnotationParentDigest is the artifact digest of the Preparation this one follows.
	AnnotationParentDigest = "delivery.kokumi.dev/parent-digest"
	// AnnotationConfigHash is the Preparation's config hash.
	AnnotationConfigHash = "delivery.kokumi.dev/config-hash"
	// AnnotationTargetNamespace is the namespace the manifests render into.
	AnnotationTargetNamespace = "delivery.kokumi.dev/target-namespace"
)

// Reason says which step failed, as the Order's Ready reason.
type Reason string

// Reasons a build fails for: the Order's Ready reasons.
const (
	// ReasonSourceNotFound: the source or its version cannot be pulled.
	ReasonSourceNotFound Reason = v1.ReasonSourceNotFound
	// ReasonRenderFailed: the chart or bundle did not render.
	ReasonRenderFailed Reason = v1.ReasonRenderFailed
	// ReasonImageResolutionFailed: an image could not be pinned or vendored.
	ReasonImageResolutionFailed Reason = v1.ReasonImageResolutionFailed
	// ReasonPushFailed: the artifact could not be pushed.
	ReasonPushFailed Reason = v1.ReasonPushFailed
	// ReasonBudgetExceeded: the source went over one of the Builder's Budgets.
	ReasonBudgetExceeded Reason = v1.ReasonBudgetExceeded
	// ReasonRegistryNotAllowed: the source, an image or the vendor registry is on a registry
	// the Builder's Allowed refuses.
	ReasonRegistryNotAllowed Reason = v1.ReasonRegistryNotAllowed
	// ReasonRenderTimeout: the render did not end within the Builder's Budgets.Timeout.
	ReasonRenderTimeout Reason = v1.ReasonRenderTimeout
)

// Error is a failed build: the step, and a message that names what failed and how to fix it.
type Error struct {
	// Reason is the failed step.
	Reason Reason
	// Err is the cause, its message written for the user.
	Err error
}

// Error implements error.
func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func fail(reason Reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Input is everything a Preparation is built from.
type Input struct {
	// SourceURL is the oci:// reference of the chart or bundle.
	SourceURL string
	// Version is the tag or digest to pull; empty is latest.
	Version string
	// Render says how the source renders (release name, target namespace, values, CRDs).
	Render render.Options
	// VendorRegistry receives the images under the Vendor policy; empty pins them in place.
	VendorRegistry string
}

// registryOf is the host[:port] of a reference without scheme (registry/repository…).
func registryOf(ref string) string {
	host, _, _ := strings.Cut(ref, "/")
	return host
}

// Built is a rendered Preparation, not yet pushed.
type Built struct {
	// SourceDigest is the digest the version resolved to.
	SourceDigest string
	// Images are the images of the manifests, sorted by original reference.
	Images []images.Pin
	// Layer is the gzipped tar holding preparation.ManifestsFile.
	Layer []byte
	// Manifests is the content of preparation.ManifestsFile.
	Manifests []byte
	// ConfigHash identifies what was rendered: the same hash never makes a second Preparation.
	ConfigHash string
	// ConfigurationDigest identifies the render configuration (see ConfigurationDigest).
	ConfigurationDigest string
	// Hidden are the image references outside the pod specs Kokumi pins (see images.Hidden).
	Hidden images.Hidden
	// Objects counts the rendered objects.
	Objects int
}

// Builder pulls sources and resolves images.
type Builder struct {
	// Sources pulls Product sources.
	Sources *oci.Client
	// Images pins or vendors images.
	Images *images.Resolver
	// Budgets bound the pull, the render and the artifact; zero fields mean their defaults.
	Budgets config.RenderBudgets
	// Allowed says whether a registry (host[:port]) may be fetched from or pushed to; nil allows
	// any. It is asked before anything is sent there (config.Config.RegistryAllowed).
	Allowed func(host string) bool
	// Render renders the pulled source: render.Render in this process when nil; the controller
	// renders in a process of its own (internal/render/isolate), held to Budgets.Memory and
	// Budgets.Timeout.
	Render func(ctx context.Context, layers []oci.Layer, o render.Options) (*render.Result, error)
	// CheckSource, when set, is asked about the pulled source's digest before the source
	// renders: an error it returns ends the build there, so that what it refuses (an unsigned
	// chart) never reaches the renderer. An *Error keeps its Reason; any other error is
	// ReasonSourceNotFound.
	CheckSource func(ctx context.Context, sourceDigest string) error
}

// allowed fails with ReasonRegistryNotAllowed when the registry of what (a field, as the
// Product names it) may not be reached.
func (b *Builder) allowed(host, what string) error {
	if b.Allowed == nil || b.Allowed(host) {
		return nil
	}
	return fail(ReasonRegistryNotAllowed, "%s: registry %s is not one an admin allows Orders to reach (the controller's --allowed-registries): use an allowed registry, or ask an admin to add this one", what, host)
}

// Build pulls the source, renders it, pins or vendors every image, and packs the manifests.
// A failure is an *Error naming the step; going over a budget is ReasonBudgetExceeded.
func (b *Builder) Build(ctx context.Context, in Input) (*Built, error) {
	budgets := b.Budgets.WithDefaults()
	if err := b.allowed(registryOf(oci.TrimScheme(in.SourceURL)), "spec.source.url "+in.SourceURL); err != nil {
		return nil, err
	}
	if in.VendorRegistry != "" {
		if err := b.allowed(registryOf(in.VendorRegistry), "spec.images.registry "+in.VendorRegistry); err != nil {
			return nil, err
		}
	}
	// The pull is held to the render's time: a registry that trickles bytes does not hold a
	// render slot for longer.
	pullCtx, cancel := context.WithTimeout(ctx, budgets.Timeout)
	pulled, err := b.Sources.PullWithin(pullCtx, in.SourceURL, in.Version, pullLimits(budgets))
	slow := errors.Is(pullCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	if err != nil && slow {
		return nil, fail(ReasonRenderTimeout, "pulling %s did not end within %s: its registry answers too slowly; try again when it is faster, or have an admin raise the controller's --%s",
			sourceRef(in.SourceURL, in.Version), budgets.Timeout, config.FlagRenderTimeout)
	}
	if err != nil {
		if be := overBudget(err, sourceRef(in.SourceURL, in.Version)); be != nil {
			return nil, be
		}
		version := in.Version
		if version == "" {
			version = "latest"
		}
		if oci.IsNotFound(err) {
			return nil, fail(ReasonSourceNotFound, "version %s of %s does not exist: push it or fix spec.source.version of the Product (%v)", version, in.SourceURL, err)
		}
		return nil, fail(ReasonSourceNotFound, "cannot pull version %s of %s: check spec.source.url, that the registry is reachable from Kokumi, and spec.source.credentialsRef (%v)", version, in.SourceURL, err)
	}
	if b.CheckSource != nil {
		if err := b.CheckSource(ctx, pulled.Digest); err != nil {
			var be *Error
			if errors.As(err, &be) {
				return nil, be
			}
			return nil, &Error{Reason: ReasonSourceNotFound, Err: fmt.Errorf("check %s@%s: %w", in.SourceURL, pulled.Digest, err)}
		}
	}
	opts := in.Render
	opts.Limits = renderLimits(budgets)
	renderer := b.Render
	if renderer == nil {
		renderer = render.Render
	}
	res, err := renderer(ctx, pulled.Layers, opts)
	if err != nil {
		if be := overBudget(err, in.SourceURL+"@"+pulled.Digest); be != nil {
			return nil, be
		}
		if te := timedOut(err, in.SourceURL+"@"+pulled.Digest); te != nil {
			return nil, te
		}
		return nil, fail(ReasonRenderFailed, "render %s@%s: %v: fix the chart or bundle, or the Product's spec.render", in.SourceURL, pulled.Digest, err)
	}
	refs := images.Find(res.Objects)
	for _, ref := range refs {
		if err := b.allowed(images.Registry(ref), "image "+ref+" of the rendered manifests"); err != nil {
			return nil, err
		}
	}
	hidden := images.FindHidden(res.Objects)
	pins, err := b.Images.Resolve(ctx, refs, in.VendorRegistry)
	if err != nil {
		var ie *images.Error
		if errors.As(err, &ie) {
			action := "push it or fix the image in the chart or the Product's values"
			if in.VendorRegistry != "" {
				action = "check that the image exists and that the vendor registry " + in.VendorRegistry + " accepts pushes"
			}
			return nil, fail(ReasonImageResolutionFailed, "image %s: %v: %s", ie.Image, ie.Err, action)
		}
		return nil, fail(ReasonImageResolutionFailed, "resolve images: %v", err)
	}
	mapping := make(map[string]string, len(pins))
	for _, p := range pins {
		mapping[p.Original] = p.Pinned
	}
	images.Rewrite(res.Objects, mapping)
	manifests, err := manifests.Marshal(res.Objects)
	if err != nil {
		return nil, fail(ReasonRenderFailed, "write manifests: %v", err)
	}
	if err := checkOutput(budgets, manifests); err != nil {
		return nil, overBudget(err, in.SourceURL+"@"+pulled.Digest)
	}
	layer, err := oci.TarGz(map[string][]byte{preparation.ManifestsFile: manifests})
	if err != nil {
		return nil, fail(ReasonRenderFailed, "pack manifests: %v", err)
	}
	return &Built{
		SourceDigest: pulled.Digest,
		Images:       pins,
		Layer:        layer,
		Manifests:    manifests,
		ConfigHash:   configHash(in.SourceURL, pulled.Digest, in.Render.TargetNamespace, layer),
		Objects:      len(res.Objects),

		ConfigurationDigest: ConfigurationDigest(in.Render),
		Hidden:              hidden,
	}, nil
}

// ConfigurationDigest identifies the render configuration a Product gives its Orders: the Helm
// values (as JSON, keys sorted; none is the same as {}) and whether the chart's CRDs render.
// What is each Order's own is left out: the release name and the target namespace. Two Orders
// of one Product, or of two Products with the same values, have the same digest; the stages
// whose requirement has match: Release compare it. "" when the values do not encode (never
// the case for values read from JSON), which no stage matches.
func ConfigurationDigest(o render.Options) string {
	values := o.Values
	if values == nil {
		values = map[string]any{}
	}
	b, err := json.Marshal(struct {
		Values      map[string]any `json:"values"`
		IncludeCRDs bool           `json:"includeCRDs"`
	}{values, o.IncludeCRDs})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// configHash hashes what makes a Preparation: the source and its digest, the target namespace
// and the rendered bytes (which hold the release name, values and image digests).
func configHash(url, sourceDigest, targetNamespace string, layer []byte) string {
	b, _ := json.Marshal([]string{url, sourceDigest, targetNamespace, digest.FromBytes(layer).String()})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Annotations are the artifact's annotations: the source (url, version, base name and
// digest), the config hash, the target namespace and, when there is one, the parent digest.
func Annotations(in Input, built *Built, parentDigest string) map[string]string {
	base := oci.TrimScheme(in.SourceURL)
	if strings.HasPrefix(in.Version, "sha256:") {
		base += "@" + in.Version
	} else if in.Version != "" {
		base += ":" + in.Version
	}
	a := map[string]string{
		ocispec.AnnotationSource:          in.SourceURL,
		ocispec.AnnotationVersion:         in.Version,
		ocispec.AnnotationBaseImageName:   base,
		ocispec.AnnotationBaseImageDigest: built.SourceDigest,
		AnnotationConfigHash:              built.ConfigHash,
		AnnotationTargetNamespace:         in.Render.TargetNamespace,
	}
	if in.Version == "" {
		delete(a, ocispec.AnnotationVersion)
	}
	if parentDigest != "" {
		a[AnnotationParentDigest] = parentDigest
	}
	return a
}

// Push pushes the built artifact to repository (host/path) with Annotations and returns its
// manifest digest. The same build and parent always give the same digest.
func (b *Builder) Push(ctx context.Context, repository string, in Input, built *Built, parentDigest string) (string, error) {
	d, err := b.Sources.PushArtifact(ctx, repository, built.Layer, Annotations(in, built, parentDigest))
	if err != nil {
		return "", fail(ReasonPushFailed, "push the artifact to %s: %v: check that the registry is running and accepts pushes", repository, err)
	}
	return d, nil
}
