package order

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	deliveryv1alpha1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
)

// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=configmaps,verbs=get

// verifySources checks, when the Product asks for it (spec.verify), that a key it trusts signed
// the source at sourceDigest and every image pinned (docs/verified-sources.md). It returns the
// results, or the failure of the first input that did not verify: its Reason names why, its
// message the input and its digest. A Product that asks nothing gets no results and no failure.
func (r *Reconciler) verifySources(ctx context.Context, sources *oci.Client, product *deliveryv1alpha1.Product,
	sourceURL, sourceDigest string, pins []images.Pin) ([]sourcesig.Result, *failure) {
	if product.Spec.Verify == nil {
		return nil, nil
	}
	keys, f := r.trustedKeys(ctx, product)
	if f != nil {
		return nil, f
	}
	type input struct{ what, repository, digest string }
	inputs := []input{{"source " + sourceURL, oci.TrimScheme(sourceURL), sourceDigest}}
	for _, p := range pins {
		repository, err := sourcesig.Repository(p.Original)
		if err != nil {
			return nil, &failure{deliveryv1alpha1.ReasonSignatureInvalid, err.Error()}
		}
		inputs = append(inputs, input{"image " + p.Original, repository, refDigest(p.Pinned)})
	}
	results := make([]sourcesig.Result, 0, len(inputs))
	for _, in := range inputs {
		res, err := r.verifier.Verify(ctx, sources, in.what, in.repository, in.digest, keys)
		if err != nil {
			return nil, &failure{deliveryv1alpha1.ReasonRenderFailed, fmt.Sprintf(
				"spec.verify of Product %s: cannot read the signatures of %s@%s: %v", product.Name, in.what, in.digest, err)}
		}
		if !res.Verified() {
			return nil, &failure{res.Reason, fmt.Sprintf(
				"spec.verify of Product %s: %s (%s) is refused: %s: %s; sign it with a key listed in %s, or change the input",
				product.Name, in.what, in.digest, res.Reason, res.Problem, strings.Join(product.Spec.Verify.PublicKeys, ", "))}
		}
		results = append(results, res)
	}
	return results, nil
}

// trustedKeys reads the public keys of the ConfigMaps spec.verify names from Kokumi's
// namespace: only those an admin labelled as trusted keys count, so that a tenant can name
// no key of its own.
func (r *Reconciler) trustedKeys(ctx context.Context, product *deliveryv1alpha1.Product) (record.TrustedKeys, *failure) {
	var reader client.Reader = r.Client
	if r.APIReader != nil {
		reader = r.APIReader
	}
	var pems [][]byte
	for _, n := range product.Spec.Verify.PublicKeys {
		fix := fmt.Sprintf("spec.verify.publicKeys of Product %s names ConfigMap %s/%s", product.Name, r.Config.Namespace, n)
		var cm corev1.ConfigMap
		if err := reader.Get(ctx, client.ObjectKey{Namespace: r.Config.Namespace, Name: n}, &cm); err != nil {
			return record.TrustedKeys{}, &failure{deliveryv1alpha1.ReasonTrustedKeysInvalid, fmt.Sprintf("%s: %v: ask an admin to create it, or fix the name", fix, err)}
		}
		if cm.Labels[deliveryv1alpha1.TrustedKeysLabel] != "true" {
			return record.TrustedKeys{}, &failure{deliveryv1alpha1.ReasonTrustedKeysInvalid, fmt.Sprintf(
				"%s, which is not labelled %s=true: only ConfigMaps an admin marks hold keys a Product may trust", fix, deliveryv1alpha1.TrustedKeysLabel)}
		}
		entries := make([]string, 0, len(cm.Data))
		for k := range cm.Data {
			if strings.HasSuffix(k, ".pub") {
				entries = append(entries, k)
			}
		}
		if len(entries) == 0 {
			return record.TrustedKeys{}, &failure{deliveryv1alpha1.ReasonTrustedKeysInvalid, fix + ", which has no *.pub entry: ask an admin to add the publisher's public key"}
		}
		slices.Sort(entries)
		for _, k := range entries {
			pems = append(pems, []byte(cm.Data[k]))
		}
	}
	keys, err := record.ParseTrustedKeys(pems...)
	if err != nil {
		return record.TrustedKeys{}, &failure{deliveryv1alpha1.ReasonTrustedKeysInvalid, fmt.Sprintf(
			"spec.verify.publicKeys of Product %s: %v: each *.pub entry must be a PEM ECDSA public key", product.Name, err)}
	}
	return keys, nil
}

// pinsOf are the images a Preparation pinned.
func pinsOf(prep *deliveryv1alpha1.Preparation) []images.Pin {
	pins := make([]images.Pin, len(prep.Spec.Images))
	for i, p := range prep.Spec.Images {
		pins[i] = images.Pin{Original: p.Original, Pinned: p.Pinned}
	}
	return pins
}
