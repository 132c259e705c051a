// Package recipe holds the rules of an Order's render that read the render's own types: the
// render input a Product gives, the inputs hash a render is known by, the shape of the
// Preparation a render makes, and the skip rule (a render that would make the Order's latest
// Preparation again is not run). It reads registries but no Kubernetes client: Preparations are
// read through the small Preparations interface the Order reconciler implements. The plain rules
// (names, the render backoff, the memory of last renders) are internal/preparation's.
package recipe

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
	"github.com/kokumi-dev/kokumi/internal/render"
	"github.com/kokumi-dev/kokumi/internal/shard"
)

// BuildFailure is the failure of a build or a push: the build's own reason when it gives one,
// RenderFailed otherwise.
func BuildFailure(err error) *preparation.Failure {
	var be *build.Error
	if errors.As(err, &be) {
		return &preparation.Failure{Reason: string(be.Reason), Message: be.Error()}
	}
	return &preparation.Failure{Reason: v1.ReasonRenderFailed, Message: err.Error()}
}

// Input gathers what is rendered for order from product; images vendored without a registry of
// their own go to bundledRegistry. The Environment is not part of it.
func Input(order *v1.Order, product *v1.Product, bundledRegistry string) (build.Input, *preparation.Failure) {
	in := build.Input{
		SourceURL: product.Spec.Source.URL,
		Version:   product.Spec.Source.Version,
		Render: render.Options{
			ReleaseName:     order.Name,
			TargetNamespace: render.TargetNamespace(order.Spec.TargetNamespace, product.Spec.TargetNamespace, order.Namespace),
		},
	}
	if product.Spec.Render != nil && product.Spec.Render.Helm != nil {
		h := product.Spec.Render.Helm
		in.Render.RequireChart = true
		in.Render.ReleaseName = render.ReleaseName(h.ReleaseName, order.Name)
		in.Render.IncludeCRDs = h.IncludeCRDs
		if h.Values != nil && len(h.Values.Raw) > 0 {
			if err := json.Unmarshal(h.Values.Raw, &in.Render.Values); err != nil {
				return in, &preparation.Failure{Reason: v1.ReasonRenderFailed, Message: fmt.Sprintf(
					"spec.render.helm.values of Product %s is not an object: %v", product.Name, err)}
			}
		}
	}
	if product.Spec.Images.Policy == v1.ImagePolicyVendor {
		in.VendorRegistry = product.Spec.Images.Registry
		if in.VendorRegistry == "" {
			in.VendorRegistry = bundledRegistry
		}
	}
	return in, nil
}

// InputsHash identifies what a render reads besides the images' tags: the input (source url
// and version, release name, target namespace, values, CRDs, vendor registry), the digest the
// source resolved to, and the Product's credentials Secret. Values hash as JSON, keys sorted.
// An input that does not hash gives "", which never matches.
func InputsHash(in build.Input, sourceDigest string, product *v1.Product) string {
	credentials := ""
	if ref := product.Spec.Source.CredentialsRef; ref != nil {
		credentials = ref.Name
	}
	b, err := json.Marshal(struct {
		Input        build.Input
		SourceDigest string
		Credentials  string
	}{in, sourceDigest, credentials})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Pushed is where a render's artifact went: its repository, its digest, and the digest of the
// Order's Preparation before it (its parent; empty for the first).
type Pushed struct {
	Repository, Digest, Parent string
}

// New is the Preparation order's render of in (from product) made, once built and pushed. Its
// images count as in the bundled registry when they were vendored into bundledRegistry.
func New(order *v1.Order, product *v1.Product, in build.Input, built *build.Built, pushed Pushed, bundledRegistry string) *v1.Preparation {
	pins := make([]v1.ImagePin, 0, len(built.Images))
	for _, p := range built.Images {
		pins = append(pins, v1.ImagePin{Original: p.Original, Pinned: p.Pinned})
	}
	releaseName := ""
	if in.Render.RequireChart || strings.Contains(string(built.Manifests), "helm.sh/chart") {
		releaseName = in.Render.ReleaseName
	}
	var annotations map[string]string
	if authors := preparation.AuthorsAnnotation(order, product); authors != "" {
		// Who wrote what it is made of: a gate that asks separation refuses their approvals.
		annotations = map[string]string{preparation.AnnotationAuthors: authors}
	}
	bundled := in.VendorRegistry != "" && in.VendorRegistry == bundledRegistry
	return &v1.Preparation{
		ObjectMeta: metav1.ObjectMeta{
			Name:        preparation.Name(order.Name, pushed.Digest),
			Namespace:   order.Namespace,
			Labels:      shard.Inherit(order, map[string]string{preparation.LabelOrder: order.Name, preparation.LabelProduct: product.Name}),
			Annotations: annotations,
		},
		Spec: v1.PreparationSpec{
			OrderRef:                v1.LocalObjectReference{Name: order.Name},
			ProductRef:              v1.LocalObjectReference{Name: product.Name},
			Source:                  v1.PreparationSource{URL: in.SourceURL, Version: in.Version, Digest: built.SourceDigest},
			ReleaseName:             releaseName,
			TargetNamespace:         in.Render.TargetNamespace,
			Images:                  pins,
			ImagesInBundledRegistry: bundled && len(pins) > 0,
			Artifact:                v1.Artifact{Ref: "oci://" + pushed.Repository + "@" + pushed.Digest, Digest: pushed.Digest},
			ConfigHash:              built.ConfigHash,
			ConfigurationDigest:     built.ConfigurationDigest,
			HiddenImages:            hiddenImages(built.Hidden),
			ParentDigest:            pushed.Parent,
		},
	}
}

// hiddenImages records the images found outside the pod specs Kokumi pins, if any.
func hiddenImages(h images.Hidden) *v1.HiddenImages {
	if len(h.Digests) == 0 && h.Pinned() {
		return nil
	}
	return &v1.HiddenImages{Digests: h.Digests, Unpinned: h.Unpinned, Omitted: int32(min(h.Omitted, math.MaxInt32))}
}
