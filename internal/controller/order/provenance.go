package order

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
	"github.com/kokumi-dev/kokumi/internal/provenance"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
)

// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=configmaps,verbs=get;create;update

// attachProvenance signs the render's SLSA provenance with Kokumi's key and attaches it to the
// artifact just pushed (docs/verified-sources.md), before the Preparation is made: a
// Preparation Kokumi renders always has one. It returns what the Preparation's
// spec.provenance says. started is when the render started: the provenance's startedOn, from
// which delivery measures count a change's lead time (internal/dora).
func (r *Reconciler) attachProvenance(ctx context.Context, b *build.Builder, order *v1.Order, product *v1.Product,
	in build.Input, built *build.Built, repository, artifactDigest, parent string, verified []sourcesig.Result, started time.Time) (*v1.PreparationProvenance, *failure) {
	keys := &record.Keys{Client: r.Client, Reader: r.APIReader, Namespace: r.Config.Namespace}
	signer, err := keys.Signer(ctx)
	if err != nil {
		return nil, &failure{Reason: v1.ReasonPushFailed, Message: fmt.Sprintf("sign the provenance of %s@%s: %v", repository, artifactDigest, err)}
	}
	render := provenance.Render{
		Namespace: order.Namespace, Order: order.Name, Product: product.Name,
		SourceURL: in.SourceURL, Version: in.Version, SourceDigest: built.SourceDigest,
		Values: in.Render.Values, ReleaseName: in.Render.ReleaseName, TargetNamespace: in.Render.TargetNamespace,
		IncludeCRDs: in.Render.IncludeCRDs, VendorRegistry: in.VendorRegistry, Images: built.Images,
		ParentDigest: parent, Verified: verified, StartedOn: started,
	}
	out := &v1.PreparationProvenance{KeyID: signer.KeyID(), Sources: v1.SourcesNotAsked}
	if v := product.Spec.Verify; v != nil {
		render.Verify = slices.Clone(v.PublicKeys)
		out.Sources = v1.SourcesVerified
		for _, res := range verified {
			if !slices.Contains(out.VerifiedBy, res.KeyID) {
				out.VerifiedBy = append(out.VerifiedBy, res.KeyID)
			}
		}
		slices.Sort(out.VerifiedBy)
	}
	store := &record.Store{Client: b.Sources}
	if out.Digest, err = provenance.Attach(ctx, store, signer, repository, artifactDigest, render); err != nil {
		return nil, &failure{Reason: v1.ReasonPushFailed, Message: err.Error()}
	}
	return out, nil
}
