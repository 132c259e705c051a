package server

import (
	"context"
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// fleetResources are what the fleet view of a namespace's Environment shows, each of which the
// person must be allowed to list there: its Environments, the Servings and Orders deployed to
// them, and the Orders' Preparations (the releases the clusters run).
var fleetResources = []string{"environments", "servings", "orders", "preparations"}

// fleetAccess are the questions to RBAC the fleet view of namespace ns asks.
func fleetAccess(ns string) []access {
	as := make([]access, 0, len(fleetResources))
	for _, r := range fleetResources {
		as = append(as, access{verb: "list", group: deliveryGroup, resource: r, namespace: ns})
	}
	return as
}

// getFleet answers the fleet view of one Environment (view.FleetOf) to a person who may list
// the Environments, Servings, Orders and Preparations of its namespace, with the page that
// ?selector=, ?order=, ?state=, ?after= and ?limit= ask for (view.FleetQuery).
func (s *Server) getFleet(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	for _, a := range fleetAccess(ns) {
		if !s.authorize(w, r, a) {
			return
		}
	}
	q, err := view.FleetQueryOf(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var env v1.Environment
	if err := s.client.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, &env); err != nil {
		writeAPIError(w, "get Environment "+ns+"/"+name, err)
		return
	}
	s.writeFleet(w, r, []*v1.Environment{&env}, q)
}

// listFleet answers the fleet view of every Environment whose namespace the person may read as
// getFleet asks (of one namespace with ?namespace=).
func (s *Server) listFleet(w http.ResponseWriter, r *http.Request) {
	q, err := view.FleetQueryOf(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var opts []client.ListOption
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	var list v1.EnvironmentList
	if err := s.client.List(r.Context(), &list, opts...); err != nil {
		writeAPIError(w, "list Environments", err)
		return
	}
	envs := make([]*v1.Environment, 0, len(list.Items))
	readable := map[string]bool{}
	for i := range list.Items {
		ns := list.Items[i].Namespace
		ok, found := readable[ns]
		if !found {
			if ok, err = s.may(r.Context(), fleetAccess(ns)...); err != nil {
				writeError(w, http.StatusServiceUnavailable, err.Error())
				return
			}
			readable[ns] = ok
		}
		if ok {
			envs = append(envs, &list.Items[i])
		}
	}
	s.writeFleet(w, r, envs, q)
}

// writeFleet answers the page q asks for of the fleet view of envs, read from the cache.
func (s *Server) writeFleet(w http.ResponseWriter, r *http.Request, envs []*v1.Environment, q view.FleetQuery) {
	ctx := r.Context()
	var clusters v1.ClusterList
	if err := s.client.List(ctx, &clusters, client.UnsafeDisableDeepCopy); err != nil {
		writeAPIError(w, "list Clusters", err)
		return
	}
	fleetEnvs := make([]view.FleetEnvironment, 0, len(envs))
	byNamespace := map[string]*fleetNamespace{}
	for _, env := range envs {
		fn := byNamespace[env.Namespace]
		if fn == nil {
			var err error
			if fn, err = s.fleetNamespace(ctx, env.Namespace); err != nil {
				writeAPIError(w, "read the fleet of namespace "+env.Namespace, err)
				return
			}
			byNamespace[env.Namespace] = fn
		}
		fe := view.FleetEnvironment{Environment: env}
		for i := range fn.servings {
			sv := &fn.servings[i]
			if fn.environmentOf[sv.Spec.OrderRef.Name] != env.Name {
				continue
			}
			apps, err := s.listApplications(ctx, client.MatchingLabels{argocd.LabelServing: sv.Name, argocd.LabelServingNamespace: sv.Namespace}, false)
			if err != nil {
				writeAPIError(w, "list the Applications of Serving "+sv.Namespace+"/"+sv.Name, err)
				return
			}
			fe.Servings = append(fe.Servings, view.FleetServing{
				Serving: sv, Applications: apps, Preparations: promotion.OrderPreparations(fn.preparations, sv.Spec.OrderRef.Name),
			})
		}
		fleetEnvs = append(fleetEnvs, fe)
	}
	page, err := view.FleetOf(clusters.Items, fleetEnvs, s.opts.ArgoCDURL, q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// fleetNamespace is what the fleet view reads of one namespace: its Servings, the Environment
// of each Order, and the Preparations.
type fleetNamespace struct {
	servings      []v1.Serving
	environmentOf map[string]string
	preparations  []v1.Preparation
}

// fleetNamespace reads ns's Servings, Orders and Preparations from the cache, uncopied: the
// view only reads them.
func (s *Server) fleetNamespace(ctx context.Context, ns string) (*fleetNamespace, error) {
	var servings v1.ServingList
	if err := s.client.List(ctx, &servings, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var orders v1.OrderList
	if err := s.client.List(ctx, &orders, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var preps v1.PreparationList
	if err := s.client.List(ctx, &preps, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	fn := &fleetNamespace{servings: servings.Items, preparations: preps.Items, environmentOf: make(map[string]string, len(orders.Items))}
	for _, o := range orders.Items {
		fn.environmentOf[o.Name] = o.Spec.EnvironmentRef.Name
	}
	return fn, nil
}
