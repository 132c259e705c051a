package server

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/promotion"
)

// The server promotes a Preparation by patching the Serving's spec.preparationName: as the
// person who asks (impersonating them), or with its own ServiceAccount for the admin token.
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=servings,verbs=patch

// MaxPreparations caps the Preparations the Serving page offers, newest first.
const MaxPreparations = 20

// Promotion is what the Serving page shows of its Order's promotion: the mode, and the Order's
// Preparations a person may promote.
type Promotion struct {
	// Mode is the Order's promotion mode; only Manual lets a person promote.
	Mode         string               `json:"mode"`
	Preparations []PreparationSummary `json:"preparations"`
	// PreparationsOmitted counts the older Preparations past MaxPreparations.
	PreparationsOmitted int `json:"preparationsOmitted,omitempty"`
}

// PreparationSummary is one Preparation of an Order.
type PreparationSummary struct {
	Name            string    `json:"name"`
	Created         time.Time `json:"created"`
	Digest          string    `json:"digest"`
	TargetNamespace string    `json:"targetNamespace"`
	Ready           Condition `json:"ready"`
	// Promoted is true for the Preparation the Serving deploys.
	Promoted bool `json:"promoted,omitempty"`
}

// PromoteRequest is the body of POST /api/v1/namespaces/{ns}/servings/{name}/promotion.
type PromoteRequest struct {
	Preparation string `json:"preparation"`
}

// orderOf gets the Serving's Order; nil when it is gone.
func (s *Server) orderOf(ctx context.Context, sv *v1.Serving) (*v1.Order, error) {
	var order v1.Order
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: sv.Namespace, Name: sv.Spec.OrderRef.Name}, &order); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &order, nil
}

// preparationsOf lists the Preparations of the Serving's Order, newest first.
func (s *Server) preparationsOf(ctx context.Context, sv *v1.Serving) ([]v1.Preparation, error) {
	var list v1.PreparationList
	if err := s.client.List(ctx, &list, client.InNamespace(sv.Namespace)); err != nil {
		return nil, err
	}
	var out []v1.Preparation
	for _, prep := range list.Items {
		if prep.Spec.OrderRef.Name == sv.Spec.OrderRef.Name {
			out = append(out, prep)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].CreationTimestamp.Time, out[j].CreationTimestamp.Time
		if !a.Equal(b) {
			return a.After(b)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// promotionOf shows the Order's mode (empty when the Order is gone) and its Preparations,
// newest first (preps are).
func promotionOf(sv *v1.Serving, order *v1.Order, preps []v1.Preparation) *Promotion {
	p := &Promotion{Preparations: []PreparationSummary{}}
	if order != nil {
		p.Mode = string(order.Spec.Promotion.Mode)
		if p.Mode == "" {
			p.Mode = string(v1.PromotionManual) // the Order's default
		}
	}
	for _, prep := range preps {
		if len(p.Preparations) == MaxPreparations {
			p.PreparationsOmitted++
			continue
		}
		p.Preparations = append(p.Preparations, PreparationSummary{
			Name: prep.Name, Created: prep.CreationTimestamp.Time, Digest: prep.Spec.Artifact.Digest,
			TargetNamespace: prep.Spec.TargetNamespace, Ready: readyOf(prep.Status.Conditions),
			Promoted: prep.Name == sv.Spec.PreparationName,
		})
	}
	return p
}

// promote points a Serving of a Manual Order at one of the Order's Ready Preparations that has
// passed the stages its Environment requires, as `kubectl patch serving …
// spec.preparationName` does, as the person who asks: one who may not patch the Serving is
// refused before anything of it is read, and the API server's RBAC decides the patch itself.
func (s *Server) promote(w http.ResponseWriter, r *http.Request) {
	var req PromoteRequest
	if !readJSON(w, r, &req) {
		return
	}
	ctx := r.Context()
	var sv v1.Serving
	key := client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	if !s.authorize(w, r, access{verb: "patch", group: deliveryGroup, resource: "servings", namespace: key.Namespace, name: key.Name}) {
		return
	}
	as, err := s.clientFor(ctx)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err := s.client.Get(ctx, key, &sv); err != nil {
		writeAPIError(w, "get Serving "+key.String(), err)
		return
	}
	var order v1.Order
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: sv.Namespace, Name: sv.Spec.OrderRef.Name}, &order); err != nil {
		writeAPIError(w, "get the Serving's Order", err)
		return
	}
	rule := promotion.Manual{Client: s.client, Stages: s.pipeline, StagesTimeout: registryTimeout}
	prep, err := rule.Check(ctx, &order, req.Preparation)
	if err != nil {
		writePromotionError(w, err)
		return
	}
	patch := client.MergeFrom(sv.DeepCopy())
	sv.Spec.PreparationName = prep.Name
	if err := as.Patch(ctx, &sv, patch); err != nil {
		writeAPIError(w, "promote "+prep.Name, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"serving": sv.Name, "preparation": prep.Name})
}

// writePromotionError answers a promotion the rule refused (409 for an Automatic Order, 422
// naming the field preparation otherwise), or a read that failed while checking it.
func writePromotionError(w http.ResponseWriter, err error) {
	var refusal *promotion.Refusal
	var lookup *promotion.LookupError
	switch {
	case errors.As(err, &refusal) && refusal.Automatic:
		writeError(w, http.StatusConflict, refusal.Message)
	case errors.As(err, &refusal):
		writeFieldError(w, FieldError{"preparation", refusal.Message})
	case errors.As(err, &lookup):
		writeAPIError(w, lookup.What, lookup.Err)
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// writeFieldError answers 422, naming the field and how to fix it.
func writeFieldError(w http.ResponseWriter, errs ...FieldError) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": errs[0].Field + ": " + errs[0].Message, "fields": errs})
}
