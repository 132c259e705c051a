package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// Plan is the answer of GET /api/v1/namespaces/{ns}/servings/{name}/plan[?preparation=NAME]:
// what promoting a Preparation (NAME, or one no cluster runs yet) to the Serving would roll out
// now, under its Environment's policy.
type Plan struct {
	// Environment is the Environment the Serving's Order deploys to.
	Environment string `json:"environment"`
	// Found is false when the Environment does not exist: nothing is deployed.
	Found bool `json:"found"`
	rollout.PlanPreview
}

// plan answers the roll-out plan of a Serving to a person who may read it. The server reads
// the Environment's Clusters with its own identity, as the Serving reconciler does, and shows
// of them only what the Serving page shows whoever reads the Serving (a row per cluster, held
// when it is not Ready): their names and whether they are Ready, never their labels, servers or
// probe errors.
func (s *Server) plan(w http.ResponseWriter, r *http.Request) {
	var sv v1.Serving
	key := client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	if !s.authorize(w, r, access{verb: "get", group: deliveryGroup, resource: "servings", namespace: key.Namespace, name: key.Name}) {
		return
	}
	if err := s.client.Get(r.Context(), key, &sv); err != nil {
		writeAPIError(w, "get Serving "+key.String(), err)
		return
	}
	order, err := s.orderOf(r.Context(), &sv)
	if err != nil {
		writeAPIError(w, "get the Serving's Order", err)
		return
	}
	if order == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("the Order %s of Serving %s is gone: it deploys nowhere", sv.Spec.OrderRef.Name, key))
		return
	}
	running, err := s.runningOf(r.Context(), &sv, r.URL.Query().Get("preparation"))
	if err != nil {
		writeAPIError(w, "get the Preparation to promote", err)
		return
	}
	p, err := s.planOf(r.Context(), sv.Namespace, order.Spec.EnvironmentRef.Name, order.Spec.RolloutPace, running, time.Now())
	if err != nil {
		writeAPIError(w, "read the roll-out plan", err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// runningOf is how many clusters of the Serving run the Preparation prep of its namespace
// (view.RunsOf), which a promotion would roll out: a rollback's runs on them already. 0 when
// prep is empty (a Preparation not named, as new).
func (s *Server) runningOf(ctx context.Context, sv *v1.Serving, prep string) (int, error) {
	if prep == "" {
		return 0, nil
	}
	var p v1.Preparation
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: sv.Namespace, Name: prep}, &p); err != nil {
		return 0, fmt.Errorf("get Preparation %s/%s: %w", sv.Namespace, prep, err)
	}
	return int(view.RunsOf(sv, []v1.Preparation{p}).Clusters[prep]), nil
}

// planOf previews a roll-out to the Environment name of namespace ns at now, of a Preparation
// running of its clusters run already.
func (s *Server) planOf(ctx context.Context, ns, name string, pace *v1.RolloutPace, running int, now time.Time) (*Plan, error) {
	var envt v1.Environment
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &envt); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get Environment %s/%s: %w", ns, name, err)
		}
		p := &Plan{Environment: name, PlanPreview: rollout.Preview(nil, nil, now)}
		p.Summary = []string{fmt.Sprintf("Environment %s does not exist in namespace %s: a promotion deploys nowhere until an admin creates it", name, ns)}
		if name == v1.LocalEnvironmentName {
			p.Summary = []string{"Environment local is the cluster Kokumi runs in, when an admin enabled it: a promotion deploys there at once"}
		}
		return p, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(&envt.Spec.ClusterSelector)
	if err != nil {
		p := &Plan{Environment: name, Found: true, PlanPreview: rollout.Preview(envt.Spec.Rollout, nil, now)}
		p.Summary = []string{fmt.Sprintf("the cluster selector of Environment %s cannot be read: a promotion deploys nowhere until an admin fixes it: %v", name, err)}
		return p, nil
	}
	var list v1.ClusterList
	if err := s.client.List(ctx, &list, client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("list the Clusters of Environment %s/%s: %w", ns, name, err)
	}
	return &Plan{Environment: name, Found: true, PlanPreview: rollout.PreviewSelected(&envt, pace, selector, list.Items, running, now)}, nil
}
