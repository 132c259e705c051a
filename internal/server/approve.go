package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// ApproveRequest is the body of POST /api/v1/namespaces/{ns}/servings/{name}/approve: Wave
// names the wave to approve, empty (or "environment") the Environment's gate; Preparation,
// when set, must be the one the Serving rolls out now.
type ApproveRequest struct {
	Wave        string `json:"wave"`
	Preparation string `json:"preparation"`
}

// ApproveAnswer answers an approval: the Serving, the Preparation and wave approved, the
// people whose approvals of that gate count now and how many it asks.
type ApproveAnswer struct {
	Serving     string   `json:"serving"`
	Preparation string   `json:"preparation"`
	Wave        string   `json:"wave,omitempty"`
	Approvers   []string `json:"approvers"`
	Required    int      `json:"required"`
	// Next says what happens next (rollout.AfterApproval).
	Next string `json:"next"`
}

// approve adds the person's approval of a gate of the Serving's roll-out to its
// spec.approvals, as rollout.Approve makes it, as the person (who must be allowed to patch
// and to approve the Serving before anything of it is read), naming them as the API server
// knows them, which the admission policy kokumi-serving-approval checks. A refusal is 422
// naming its field, or 409; the API server's own (403) passes through with its message.
func (s *Server) approve(w http.ResponseWriter, r *http.Request) {
	var req ApproveRequest
	if !readOptionalJSON(w, r, &req) {
		return
	}
	ctx := r.Context()
	write, ok := s.servingToWrite(w, r, access{verb: "approve", group: deliveryGroup, resource: "servings"})
	if !ok {
		return
	}
	sv := write.serving
	env, err := s.environmentOf(ctx, sv)
	if err != nil {
		writeAPIError(w, "get the Environment of Serving "+write.key.String(), err)
		return
	}
	wave := view.GateWave(req.Wave)
	approvals, err := rollout.Approve(env, sv, wave, req.Preparation, write.by)
	if err != nil {
		writeRolloutError(w, err)
		return
	}
	if !write.patch(ctx, w, fmt.Sprintf("approve %s of Serving %s", rollout.GateName(wave), write.key), func(sv *v1.Serving) { sv.Spec.Approvals = approvals }) {
		return
	}
	policy := rollout.ApprovalGate(env, wave)
	approvers, _ := rollout.ApproversOf(sv, policy, wave)
	writeJSON(w, http.StatusOK, ApproveAnswer{Serving: sv.Name, Preparation: sv.Spec.PreparationName, Wave: wave,
		Approvers: approvers, Required: rollout.Required(policy), Next: rollout.AfterApproval(sv, len(approvers), rollout.Required(policy))})
}

// environmentOf gets the Environment the Serving's Order deploys to.
func (s *Server) environmentOf(ctx context.Context, sv *v1.Serving) (*v1.Environment, error) {
	order, err := s.orderOf(ctx, sv)
	if err != nil {
		return nil, err
	}
	if order == nil {
		return nil, apierrors.NewNotFound(v1.GroupVersion.WithResource("orders").GroupResource(), sv.Spec.OrderRef.Name)
	}
	var env v1.Environment
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: sv.Namespace, Name: order.Spec.EnvironmentRef.Name}, &env); err != nil {
		return nil, err
	}
	return &env, nil
}

// approvalOf shows the gate the Serving's roll-out waits at for approvals, and whether the
// person who asks may approve it (rollout.Approve's answer, after RBAC's for the verb
// approve); nil when no gate waits, or its Order or Environment is gone.
func (s *Server) approvalOf(ctx context.Context, sv *v1.Serving) (*view.Approval, view.Can, error) {
	if sv.Status.Rollout == nil || sv.Status.Rollout.Awaiting == "" {
		return nil, view.Can{}, nil
	}
	env, err := s.environmentOf(ctx, sv)
	if apierrors.IsNotFound(err) {
		return nil, view.Can{}, nil // the Order or the Environment is gone: the page says so elsewhere
	}
	if err != nil {
		return nil, view.Can{}, fmt.Errorf("get the Environment of Serving %s/%s: %w", sv.Namespace, sv.Name, err)
	}
	gate := sv.Status.Rollout.Awaiting
	wave := view.GateWave(gate)
	policy := rollout.ApprovalGate(env, wave)
	approvers, _ := rollout.ApproversOf(sv, policy, wave)
	a := &view.Approval{Gate: gate, Wave: wave, Preparation: sv.Spec.PreparationName, Required: rollout.Required(policy),
		Approvers: approvers, PromotedBy: sv.Spec.PromotedBy}
	if a.Approvers == nil {
		a.Approvers = []string{}
	}
	if policy != nil {
		a.SeparateFromPromoter = policy.SeparateFromPromoter
	}
	can, err := s.can(ctx, access{verb: "approve", group: deliveryGroup, resource: "servings", namespace: sv.Namespace, name: sv.Name})
	if err != nil || !can.Allowed {
		return a, can, err
	}
	by, err := s.writerName(ctx)
	if err != nil {
		return a, view.Can{}, err
	}
	if _, err := rollout.Approve(env, sv, wave, "", by); err != nil {
		var refusal *rollout.Refusal
		if !errors.As(err, &refusal) {
			return a, view.Can{}, err
		}
		return a, view.Can{Reason: refusal.Message}, nil
	}
	return a, can, nil
}
