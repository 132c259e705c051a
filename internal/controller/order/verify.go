package order

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
	"github.com/kokumi-dev/kokumi/internal/preparation/recipe"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
)

// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=configmaps,verbs=get

// verifySources checks, when the Product asks for it (spec.verify), that a key it trusts signed
// the source at sourceDigest and every image pinned (docs/verified-sources.md). It returns the
// results, or the failure of the first input that did not verify: its Reason names why, its
// message the input and its digest. A Product that asks nothing gets no results and no failure.
func (r *Reconciler) verifySources(ctx context.Context, sources *oci.Client, product *v1.Product,
	sourceURL, sourceDigest string, pins []images.Pin) ([]sourcesig.Result, *failure) {
	if product.Spec.Verify == nil {
		return nil, nil
	}
	keys, f := r.trustedKeys(ctx, product)
	if f != nil {
		return nil, f
	}
	imgs, f := imageInputs(pins)
	if f != nil {
		return nil, f
	}
	return r.verifyInputs(ctx, sources, product, keys, append([]signedInput{sourceInput(sourceURL, sourceDigest)}, imgs...))
}

// checkSourceFirst makes b check, when the Product asks for it (spec.verify), the source's
// signature as soon as its digest is known, before it renders: an unsigned or wrongly signed
// chart never reaches the render's process. It returns what checks the images the render
// pinned, which are known only after it, and returns the results of both; or the failure of
// the trusted keys, read once for both.
func (r *Reconciler) checkSourceFirst(ctx context.Context, b *build.Builder, product *v1.Product, sourceURL string) (
	checkImages func(ctx context.Context, pins []images.Pin) ([]sourcesig.Result, *failure), f *failure) {
	if product.Spec.Verify == nil {
		return func(context.Context, []images.Pin) ([]sourcesig.Result, *failure) { return nil, nil }, nil
	}
	keys, f := r.trustedKeys(ctx, product)
	if f != nil {
		return nil, f
	}
	var source []sourcesig.Result
	b.CheckSource = func(ctx context.Context, digest string) error {
		res, f := r.verifyInputs(ctx, b.Sources, product, keys, []signedInput{sourceInput(sourceURL, digest)})
		if f != nil {
			return &build.Error{Reason: build.Reason(f.Reason), Err: errors.New(f.Message)}
		}
		source = res
		return nil
	}
	return func(ctx context.Context, pins []images.Pin) ([]sourcesig.Result, *failure) {
		imgs, f := imageInputs(pins)
		if f != nil {
			return nil, f
		}
		res, f := r.verifyInputs(ctx, b.Sources, product, keys, imgs)
		if f != nil {
			return nil, f
		}
		return append(slices.Clone(source), res...), nil
	}, nil
}

// signedInput is an input whose signature is checked: what it is (as a message names it),
// where its signatures are, and its digest.
type signedInput struct{ what, repository, digest string }

// sourceInput is the Product's source at digest.
func sourceInput(sourceURL, digest string) signedInput {
	return signedInput{"source " + sourceURL, oci.TrimScheme(sourceURL), digest}
}

// imageInputs are the images a render pinned.
func imageInputs(pins []images.Pin) ([]signedInput, *failure) {
	inputs := make([]signedInput, 0, len(pins))
	for _, p := range pins {
		repository, err := sourcesig.Repository(p.Original)
		if err != nil {
			return nil, &failure{Reason: v1.ReasonSignatureInvalid, Message: err.Error()}
		}
		inputs = append(inputs, signedInput{"image " + p.Original, repository, recipe.RefDigest(p.Pinned)})
	}
	return inputs, nil
}

// verifyInputs checks that a key of keys signed each input, in order; it returns their results,
// or the failure of the first that did not verify.
func (r *Reconciler) verifyInputs(ctx context.Context, sources *oci.Client, product *v1.Product,
	keys record.TrustedKeys, inputs []signedInput) ([]sourcesig.Result, *failure) {
	results := make([]sourcesig.Result, 0, len(inputs))
	for _, in := range inputs {
		res, err := r.verifier.Verify(ctx, sources, in.what, in.repository, in.digest, keys)
		if err != nil {
			return nil, &failure{Reason: v1.ReasonRenderFailed, Message: fmt.Sprintf(
				"spec.verify of Product %s: cannot read the signatures of %s@%s: %v", product.Name, in.what, in.digest, err)}
		}
		if !res.Verified() {
			return nil, &failure{Reason: res.Reason, Message: fmt.Sprintf(
				"spec.verify of Product %s: %s (%s) is refused: %s: %s; sign it with a key listed in %s, or change the input",
				product.Name, in.what, in.digest, res.Reason, res.Problem, strings.Join(product.Spec.Verify.PublicKeys, ", "))}
		}
		results = append(results, res)
	}
	return results, nil
}

// trustedKeys reads the public keys of the ConfigMaps spec.verify names from Kokumi's
// namespace (sourcesig.TrustedKeys).
func (r *Reconciler) trustedKeys(ctx context.Context, product *v1.Product) (record.TrustedKeys, *failure) {
	var reader client.Reader = r.Client
	if r.APIReader != nil {
		reader = r.APIReader
	}
	keys, err := sourcesig.TrustedKeys(ctx, reader, r.Config.Namespace, "spec.verify.publicKeys of Product "+product.Name, product.Spec.Verify.PublicKeys)
	if err != nil {
		return record.TrustedKeys{}, &failure{Reason: v1.ReasonTrustedKeysInvalid, Message: err.Error()}
	}
	return keys, nil
}

// pinsOf are the images a Preparation pinned.
func pinsOf(prep *v1.Preparation) []images.Pin {
	pins := make([]images.Pin, len(prep.Spec.Images))
	for i, p := range prep.Spec.Images {
		pins[i] = images.Pin{Original: p.Original, Pinned: p.Pinned}
	}
	return pins
}
