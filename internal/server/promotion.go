package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/kokumi-dev/kokumi/internal/stages"

	"github.com/kokumi-dev/kokumi/internal/view"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/rollout"
)

// The server promotes a Preparation by patching the Serving's spec.preparationName: as the
// person who asks (with their own token), or with its own ServiceAccount for the admin token.
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=servings,verbs=patch

// MaxPreparations caps the Preparations the Serving page offers, newest first.
const MaxPreparations = 20

// MaxDeployments caps the deployments a Preparation's summary lists, newest first.
const MaxDeployments = 10

// RollbackRequest is the body of POST /api/v1/namespaces/{ns}/servings/{name}/rollback: To
// names the Preparation to go back to; empty picks the one that ran before (view.Promotion's
// RollbackTo).
type RollbackRequest struct {
	To string `json:"to"`
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
	return promotion.OrderPreparations(list.Items, sv.Spec.OrderRef.Name), nil
}

// promotionOf shows the Order's mode (empty when the Order is gone), its Preparations, newest
// first (preps are), and what a rollback would deploy.
func promotionOf(sv *v1.Serving, order *v1.Order, preps []v1.Preparation) *view.Promotion {
	p := &view.Promotion{Preparations: []view.PreparationSummary{}}
	if order != nil {
		p.Mode = string(order.Spec.Promotion.Mode)
		if p.Mode == "" {
			p.Mode = string(v1.PromotionManual) // the Order's default
		}
	}
	runs := view.RunsOf(sv, preps)
	p.Current = runs.Current
	for _, prep := range preps {
		if len(p.Preparations) == MaxPreparations {
			p.PreparationsOmitted++
			continue
		}
		p.Preparations = append(p.Preparations, view.PreparationSummary{
			Name: prep.Name, Created: prep.CreationTimestamp.Time, Digest: prep.Spec.Artifact.Digest,
			TargetNamespace: prep.Spec.TargetNamespace, Ready: view.ReadyOf(prep.Status.Conditions),
			Promoted: prep.Name == sv.Spec.PreparationName, Running: runs.Clusters[prep.Name], Label: runs.Label(prep.Name),
			Deployments: deploymentsOf(&prep),
			Custody:     view.Custody(prep.Spec.Provenance),
		})
	}
	if order != nil {
		p.Environment = order.Spec.EnvironmentRef.Name
	}
	if prev, err := promotion.RollbackTarget(preps, sv.Spec.PreparationName); err == nil {
		p.RollbackTo = prev.Name
	}
	return p
}

// blockPromotion marks the Preparation whose stages the pipeline checked, when they refuse it:
// its Promote is refused with that message, which the page shows on the disabled button rather
// than offer what cannot succeed. The others are not checked, and stay offered.
func blockPromotion(p *view.Promotion, pl *view.Pipeline) {
	if p == nil || pl == nil || pl.Allowed || pl.Error != "" || pl.Preparation == "" {
		return
	}
	for i := range p.Preparations {
		if p.Preparations[i].Name == pl.Preparation && !p.Preparations[i].Promoted {
			p.Preparations[i].Blocked = pl.Message
		}
	}
}

// deploymentsOf lists the deployment records of prep's status, newest first, at most
// MaxDeployments.
func deploymentsOf(prep *v1.Preparation) []view.DeploymentSummary {
	out := make([]view.DeploymentSummary, 0, min(len(prep.Status.DeploymentRecords), MaxDeployments))
	for _, r := range prep.Status.DeploymentRecords {
		out = append(out, view.DeploymentSummary{Environment: r.Environment, Clusters: r.Clusters, Time: r.Time.Time})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	if len(out) > MaxDeployments {
		out = out[:MaxDeployments]
	}
	return out
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
	s.promoteTo(w, r, "preparation", func(*v1.Serving, *v1.Order) (string, error) { return req.Preparation, nil })
}

// rollback promotes, with promote's checks, the Preparation named "to", or, when it is empty,
// the one that ran before the deployed one (promotion.RollbackTarget), as `kubectl kokumi
// rollback` does.
func (s *Server) rollback(w http.ResponseWriter, r *http.Request) {
	var req RollbackRequest
	if !readJSON(w, r, &req) {
		return
	}
	s.promoteTo(w, r, "to", func(sv *v1.Serving, order *v1.Order) (string, error) {
		current := sv.Spec.PreparationName
		target := req.To
		if target == "" {
			preps, err := s.preparationsOf(r.Context(), sv)
			if err != nil {
				return "", &promotion.LookupError{What: "list the Order's Preparations", Err: err}
			}
			prev, err := promotion.RollbackTarget(preps, current)
			if err != nil {
				return "", &promotion.Refusal{Message: "nothing to roll back to: " + err.Error() + `: name one with "to"`}
			}
			target = prev.Name
		}
		if target == current {
			return "", &promotion.Refusal{Message: fmt.Sprintf("Serving %s already deploys %s: name another of the Order's Preparations", sv.Name, current)}
		}
		return target, nil
	})
}

// promoteTo points the Serving of the request at the Preparation pick names, once promotion's
// rule allows it, naming the writer in spec.promotedBy, as the person who asks (who must be allowed to patch the Serving before
// anything of it is read), and answers the Serving, the Preparation and the one it replaced. A
// refusal names field; one of an Automatic Order, which would undo the promotion, is 409 and
// comes before pick is asked.
func (s *Server) promoteTo(w http.ResponseWriter, r *http.Request, field string, pick func(*v1.Serving, *v1.Order) (string, error)) {
	ctx := r.Context()
	var sv v1.Serving
	key, as, ok := s.servingWriter(w, r)
	if !ok {
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
	if err := promotion.CheckMode(&order); err != nil {
		writePromotionError(w, field, err)
		return
	}
	name, err := pick(&sv, &order)
	if err != nil {
		writePromotionError(w, field, err)
		return
	}
	rule := stages.Manual{Client: s.client, Stages: s.pipeline, StagesTimeout: registryTimeout}
	prep, err := rule.Check(ctx, &order, name)
	if err != nil {
		writePromotionError(w, field, err)
		return
	}
	// The promotion names its writer (spec.promotedBy), as the admission policy
	// kokumi-serving-approval asks: an approval that must come from someone else reads it.
	by, err := s.writerName(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	from := sv.Spec.PreparationName
	patch := client.MergeFrom(sv.DeepCopy())
	sv.Spec.PreparationName, sv.Spec.PromotedBy = prep.Name, by
	if err := as.Patch(ctx, &sv, patch); err != nil {
		writeAPIError(w, "promote "+prep.Name, err)
		return
	}
	next := ""
	var env v1.Environment
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: sv.Namespace, Name: order.Spec.EnvironmentRef.Name}, &env); err == nil {
		preps, err := s.preparationsOf(ctx, &sv)
		if err == nil {
			next = nextAfterPromotion(&env, view.RunsOf(&sv, preps), prep.Name)
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"serving": sv.Name, "preparation": prep.Name, "from": from, "next": next})
}

// nextAfterPromotion says what happens once the Serving is pointed at target: nothing more
// when every cluster runs it already; else, before any cluster takes it, the approvals the
// Environment's gate asks for; then the waves of its roll-out policy, or every cluster at once.
func nextAfterPromotion(env *v1.Environment, runs view.Runs, target string) string {
	if runs.Current == target && len(runs.Clusters) == 1 {
		return "every cluster runs it already: no approval or wave waits"
	}
	rollsOut := "the clusters roll it out"
	if env.Spec.Rollout != nil && len(env.Spec.Rollout.Waves) > 0 {
		rollsOut = "the clusters take it wave by wave"
	}
	if n := rollout.Required(env.Spec.Approval); n > 0 {
		approvals := "1 approval"
		if n > 1 {
			approvals = fmt.Sprintf("%d approvals", n)
		}
		return fmt.Sprintf("it waits for %s of Environment %s (from people bound to kokumi-approver) before any cluster takes it; then %s", approvals, env.Name, rollsOut)
	}
	return rollsOut
}

// writePromotionError answers a promotion the rule refused (409 for an Automatic Order, 422
// naming field otherwise), or a read that failed while checking it.
func writePromotionError(w http.ResponseWriter, field string, err error) {
	var refusal *promotion.Refusal
	var lookup *promotion.LookupError
	switch {
	case errors.As(err, &refusal) && refusal.Automatic:
		writeError(w, http.StatusConflict, refusal.Message)
	case errors.As(err, &refusal):
		writeFieldError(w, FieldError{field, refusal.Message})
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

// servingWriter answers who may patch the Serving of the request's path: its key and a client
// of the person who asks, once RBAC says they may patch it (before anything of it is read); ok
// is false when the answer was written already.
func (s *Server) servingWriter(w http.ResponseWriter, r *http.Request) (key client.ObjectKey, as client.Client, ok bool) {
	key = client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	if !s.authorize(w, r, access{verb: "patch", group: deliveryGroup, resource: "servings", namespace: key.Namespace, name: key.Name}) {
		return key, nil, false
	}
	as, err := s.clientFor(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return key, nil, false
	}
	return key, as, true
}
