package server

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// The server promotes a Preparation by patching the Serving's spec.preparationName.
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

// promotionOf lists the Preparations of the Serving's Order, newest first.
func (s *Server) promotionOf(ctx context.Context, sv *v1.Serving) (*Promotion, error) {
	var order v1.Order
	mode := ""
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: sv.Namespace, Name: sv.Spec.OrderRef.Name}, &order); err == nil {
		mode = string(order.Spec.Promotion.Mode)
		if mode == "" {
			mode = string(v1.PromotionManual) // the Order's default
		}
	} else if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	var list v1.PreparationList
	if err := s.client.List(ctx, &list, client.InNamespace(sv.Namespace)); err != nil {
		return nil, err
	}
	p := &Promotion{Mode: mode, Preparations: []PreparationSummary{}}
	for _, prep := range list.Items {
		if prep.Spec.OrderRef.Name != sv.Spec.OrderRef.Name {
			continue
		}
		p.Preparations = append(p.Preparations, PreparationSummary{
			Name: prep.Name, Created: prep.CreationTimestamp.Time, Digest: prep.Spec.Artifact.Digest,
			TargetNamespace: prep.Spec.TargetNamespace, Ready: readyOf(prep.Status.Conditions),
			Promoted: prep.Name == sv.Spec.PreparationName,
		})
	}
	sort.Slice(p.Preparations, func(i, j int) bool {
		a, b := p.Preparations[i], p.Preparations[j]
		if !a.Created.Equal(b.Created) {
			return a.Created.After(b.Created)
		}
		return a.Name < b.Name
	})
	if n := len(p.Preparations); n > MaxPreparations {
		p.Preparations, p.PreparationsOmitted = p.Preparations[:MaxPreparations], n-MaxPreparations
	}
	return p, nil
}

// promote points a Serving of a Manual Order at one of the Order's Ready Preparations, as
// `kubectl patch serving … spec.preparationName` does.
func (s *Server) promote(w http.ResponseWriter, r *http.Request) {
	var req PromoteRequest
	if !readJSON(w, r, &req) {
		return
	}
	ctx := r.Context()
	var sv v1.Serving
	key := client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	if err := s.client.Get(ctx, key, &sv); err != nil {
		writeAPIError(w, "get Serving "+key.String(), err)
		return
	}
	var order v1.Order
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: sv.Namespace, Name: sv.Spec.OrderRef.Name}, &order); err != nil {
		writeAPIError(w, "get the Serving's Order", err)
		return
	}
	if order.Spec.Promotion.Mode == v1.PromotionAutomatic {
		writeError(w, http.StatusConflict, fmt.Sprintf("Order %s promotes automatically and would undo this: set its spec.promotion.mode to Manual first", order.Name))
		return
	}
	if req.Preparation == "" {
		writeFieldError(w, FieldError{"preparation", "name one of the Order's Ready Preparations"})
		return
	}
	var prep v1.Preparation
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: sv.Namespace, Name: req.Preparation}, &prep); err != nil {
		if client.IgnoreNotFound(err) == nil {
			writeFieldError(w, FieldError{"preparation", fmt.Sprintf("no Preparation %q in %s", req.Preparation, sv.Namespace)})
			return
		}
		writeAPIError(w, "get Preparation "+req.Preparation, err)
		return
	}
	if prep.Spec.OrderRef.Name != order.Name {
		writeFieldError(w, FieldError{"preparation", fmt.Sprintf("%s belongs to Order %s, not %s", prep.Name, prep.Spec.OrderRef.Name, order.Name)})
		return
	}
	if c := apimeta.FindStatusCondition(prep.Status.Conditions, v1.ConditionReady); c == nil || c.Status != "True" {
		why := "it has not been checked yet"
		if c != nil {
			why = c.Reason + ": " + c.Message
		}
		writeFieldError(w, FieldError{"preparation", fmt.Sprintf("%s is not Ready (%s)", prep.Name, why)})
		return
	}
	patch := client.MergeFrom(sv.DeepCopy())
	sv.Spec.PreparationName = prep.Name
	if err := s.client.Patch(ctx, &sv, patch); err != nil {
		writeAPIError(w, "promote "+prep.Name, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"serving": sv.Name, "preparation": prep.Name})
}

// writeFieldError answers 422, naming the field and how to fix it.
func writeFieldError(w http.ResponseWriter, errs ...FieldError) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": errs[0].Field + ": " + errs[0].Message, "fields": errs})
}
