package server

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// listOrders lists the Orders of the namespaces the person may list Orders in (of one, with
// ?namespace=, which they must be allowed to list), each with its Ready condition and its
// Serving when one exists: an Order that never renders (SourceNotFound) has no Serving, and is
// seen here.
func (s *Server) listOrders(w http.ResponseWriter, r *http.Request) {
	var list v1.OrderList
	var opts []client.ListOption
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		if !s.authorize(w, r, access{verb: "list", group: deliveryGroup, resource: "orders", namespace: ns}) {
			return
		}
		opts = append(opts, client.InNamespace(ns))
	}
	if err := s.client.List(r.Context(), &list, opts...); err != nil {
		writeAPIError(w, "list Orders", err)
		return
	}
	items, err := keepListable(s, r.Context(), deliveryGroup, "orders", list.Items, func(o *v1.Order) string { return o.Namespace })
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	var svs v1.ServingList
	if err := s.client.List(r.Context(), &svs, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		writeAPIError(w, "list Servings", err)
		return
	}
	has := make(map[string]bool, len(svs.Items))
	for i := range svs.Items {
		has[svs.Items[i].Namespace+"/"+svs.Items[i].Name] = true
	}
	out := make([]view.OrderSummary, 0, len(items))
	for i := range items {
		out = append(out, view.SummarizeOrder(&items[i], has[items[i].Namespace+"/"+items[i].Name]))
	}
	writeTable(w, out, func(a, b view.OrderSummary) bool {
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

// getOrder answers one Order to a person who may get it: the Serving page falls back to it
// when the Order's Serving does not exist (yet), to say why.
func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	key := client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
	if !s.authorize(w, r, access{verb: "get", group: deliveryGroup, resource: "orders", namespace: key.Namespace, name: key.Name}) {
		return
	}
	var o v1.Order
	if err := s.client.Get(r.Context(), key, &o); err != nil {
		writeAPIError(w, "get Order "+key.String(), err)
		return
	}
	err := s.client.Get(r.Context(), key, &v1.Serving{})
	if err != nil && !apierrors.IsNotFound(err) {
		writeAPIError(w, "get Serving "+key.String(), err)
		return
	}
	writeJSON(w, http.StatusOK, view.SummarizeOrder(&o, err == nil))
}

// orderNamespaces lists the namespaces where the person may create Orders, among those that
// have an Environment (an Order needs one): the New Order form offers them, and starts with the
// first.
func (s *Server) orderNamespaces(w http.ResponseWriter, r *http.Request) {
	var envs v1.EnvironmentList
	if err := s.client.List(r.Context(), &envs, client.UnsafeDisableDeepCopy); err != nil {
		writeAPIError(w, "list Environments", err)
		return
	}
	seen := map[string]bool{}
	out := []string{}
	for i := range envs.Items {
		ns := envs.Items[i].Namespace
		if seen[ns] {
			continue
		}
		seen[ns] = true
		ok, err := s.may(r.Context(), createOrder(ns))
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		if ok {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	kept, omitted := view.CapRows(out)
	writeJSON(w, http.StatusOK, map[string]any{"items": kept, "omitted": omitted})
}

// createOrder is the access that creating an Order in ns needs.
func createOrder(ns string) access {
	return access{verb: "create", group: deliveryGroup, resource: "orders", namespace: ns}
}

// can answers whether the request's person may do a, as RBAC says (the admin may do
// everything), with the sentence that says why not: the UI disables what would be refused, and
// shows why.
func (s *Server) can(ctx context.Context, a access) (view.Can, error) {
	ok, err := s.may(ctx, a)
	if err != nil {
		return view.Can{}, err
	}
	if ok {
		return view.Can{Allowed: true}, nil
	}
	return view.Can{Reason: deniedMessage(identityOf(ctx).User.Username, a)}, nil
}

// deniedMessage says that user may not do a, and what to do: the words of a 403 and of a
// disabled button.
func deniedMessage(user string, a access) string {
	switch {
	case a.verb == "approve" && user == AdminUser:
		return "the admin token writes as the server's ServiceAccount, which may not approve: approvals come from people; sign in as someone bound to the ClusterRole kokumi-approver in " + a.namespace
	case a.verb == "approve":
		return fmt.Sprintf("%s may not approve servings in %s: approvals come from the people bound to the ClusterRole kokumi-approver there, whom an admin of %s names (kubectl create rolebinding approvers --clusterrole=kokumi-approver --user=… -n %s)", user, a.namespace, a.namespace, a.namespace)
	}
	return fmt.Sprintf("%s may not %s (see kubectl auth can-i): ask for a RoleBinding", user, a)
}

// orderFields maps the field paths of the API server's refusal of an Order to the fields of
// the New Order form: a rule of the Order as a whole (its name's length: the path "<nil>" or
// none) and the metadata are the Name's.
var orderFields = map[string]string{
	"":                         "name",
	"<nil>":                    "name",
	"metadata.name":            "name",
	"metadata.namespace":       "namespace",
	"spec.productRef.name":     "product",
	"spec.environmentRef.name": "environment",
	"spec.targetNamespace":     "targetNamespace",
	"spec.promotion.mode":      "promotion",
}

// orderCreateFieldErrors turns the API server's refusal of an Order into the errors of the
// form's fields: "already exists" is the Name's, an invalid Order's causes are mapped by
// their field paths (orderFields); nil when err is neither.
func orderCreateFieldErrors(err error, ns, name string) []FieldError {
	switch {
	case apierrors.IsAlreadyExists(err):
		return []FieldError{{"name", fmt.Sprintf("an Order named %q already exists in %s: choose another name", name, ns)}}
	case !apierrors.IsInvalid(err):
		return nil
	}
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Details == nil || len(status.Status().Details.Causes) == 0 {
		return nil
	}
	var out []FieldError
	for _, c := range status.Status().Details.Causes {
		field, known := orderFields[c.Field]
		if !known {
			field = c.Field // not on the form: the banner says it
		}
		out = append(out, FieldError{field, strings.TrimPrefix(c.Message, "Invalid value: \"object\": ")})
	}
	return out
}
