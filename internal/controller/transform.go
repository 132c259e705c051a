package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// Indexes of the cache of Argo CD's namespace.
const (
	// indexApplicationServing finds a Serving's Applications: "<serving namespace>/<serving>".
	indexApplicationServing = "kokumi.serving"
	// indexApplicationCluster finds the Applications that deploy to a Kokumi Cluster.
	indexApplicationCluster = "kokumi.cluster"
)

// lastApplied is kubectl's copy of what it last applied: Kokumi never reads it.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TransformApplication keeps of an Argo CD Application only what Kokumi reads (internal/argocd's
// Build, UpToDate, Apply, IsKokumis and ReadStatus, and the server's pages): its metadata without
// managedFields and kubectl's last-applied annotation, its spec whole (Kokumi writes it: a few
// hundred bytes), and of its status sync.status and sync.revision; health.status, message and
// lastTransitionTime; each condition's type and message; and operationState's phase, message
// and operation.sync.revision. It drops what makes a real Application 20 KB and more:
// status.resources (one entry per Kubernetes object deployed), status.history,
// operationState.syncResult, status.summary and the top-level operation.
//
// A transformed Application is never written back whole (it would wipe Argo CD's status, the
// Application CRD having no status subresource): Kokumi changes Applications with a merge patch
// from the cached copy, which names only the fields it changes.
//
// It changes obj in place, as a cache transform may, and passes anything but an
// *unstructured.Unstructured through.
func TransformApplication(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	if a := u.GetAnnotations(); a[lastApplied] != "" {
		delete(a, lastApplied)
		u.SetAnnotations(a)
	}
	delete(u.Object, "operation")
	status, ok := u.Object["status"].(map[string]any)
	if !ok {
		return u, nil
	}
	kept := map[string]any{}
	if sync := pick(status["sync"], "status", "revision"); sync != nil {
		kept["sync"] = sync
	}
	if health := pick(status["health"], "status", "message", "lastTransitionTime"); health != nil {
		kept["health"] = health
	}
	if conditions, ok := status["conditions"].([]any); ok {
		out := make([]any, 0, len(conditions))
		for _, c := range conditions {
			if c := pick(c, "type", "message"); c != nil {
				out = append(out, c)
			}
		}
		kept["conditions"] = out
	}
	if op, ok := status["operationState"].(map[string]any); ok {
		state := pick(op, "phase", "message")
		if state == nil {
			state = map[string]any{}
		}
		if operation, ok := op["operation"].(map[string]any); ok {
			if sync := pick(operation["sync"], "revision"); sync != nil {
				state["operation"] = map[string]any{"sync": sync}
			}
		}
		kept["operationState"] = state
	}
	u.Object["status"] = kept
	return u, nil
}

// pick returns the keys of m that are set, or nil when m is no map or none is.
func pick(m any, keys ...string) map[string]any {
	in, ok := m.(map[string]any)
	if !ok {
		return nil
	}
	var out map[string]any
	for _, k := range keys {
		if v, ok := in[k]; ok {
			if out == nil {
				out = make(map[string]any, len(keys))
			}
			out[k] = v
		}
	}
	return out
}

var _ toolscache.TransformFunc = TransformApplication

// applicationSelector selects the Applications a replica caches: Kokumi's own
// (app.kubernetes.io/managed-by=kokumi), of the replica's shard (see Config.Shard).
func applicationSelector(shard string) labels.Selector {
	kokumis, _ := labels.NewRequirement(argocd.LabelManagedBy, selection.Equals, []string{argocd.ManagedByKokumi})
	sel := labels.NewSelector().Add(*kokumis)
	if r := shardRequirement(shard); r != nil {
		sel = sel.Add(*r)
	}
	return sel
}

// servingKey is the value of indexApplicationServing of a Serving's Applications.
func servingKey(namespace, name string) string { return namespace + "/" + name }

// applicationIndexes are the indexes of the cache of Argo CD's namespace, by Application labels:
// a Serving's Applications, and a Cluster's, are found without walking the namespace.
var applicationIndexes = map[string]client.IndexerFunc{
	indexApplicationServing: func(o client.Object) []string {
		l := o.GetLabels()
		if l[argocd.LabelManagedBy] != argocd.ManagedByKokumi || l[argocd.LabelServing] == "" || l[argocd.LabelServingNamespace] == "" {
			return nil
		}
		return []string{servingKey(l[argocd.LabelServingNamespace], l[argocd.LabelServing])}
	},
	indexApplicationCluster: func(o client.Object) []string {
		l := o.GetLabels()
		if l[argocd.LabelManagedBy] != argocd.ManagedByKokumi || l[argocd.LabelCluster] == "" {
			return nil
		}
		return []string{l[argocd.LabelCluster]}
	},
}

// indexApplications registers applicationIndexes with the cache of Argo CD's namespace; it runs
// once Argo CD's Application kind is served (an informer of a kind not served cannot start).
func (a *ArgoCD) indexApplications(ctx context.Context) error {
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	for field, f := range applicationIndexes {
		if err := a.Cache.IndexField(ctx, app, field, f); err != nil {
			return fmt.Errorf("index Applications by %s: %w", field, err)
		}
	}
	return nil
}

// ListApplications lists Kokumi's Applications in namespace that carry every label of match,
// from the cache, by index: by Serving when match names one (LabelServing and
// LabelServingNamespace), else by Cluster when it names one (LabelCluster); only the rest of the
// labels are matched one Application at a time. The list's items are the cache's own: read them,
// write copies.
func (a *ArgoCD) ListApplications(ctx context.Context, list *unstructured.UnstructuredList, namespace string, match client.MatchingLabels) error {
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	if err := a.ensureIndexed(ctx); err != nil {
		return err
	}
	opts := []client.ListOption{client.InNamespace(namespace), client.UnsafeDisableDeepCopy}
	rest := client.MatchingLabels{}
	for k, v := range match {
		rest[k] = v
	}
	switch {
	case rest[argocd.LabelServing] != "" && rest[argocd.LabelServingNamespace] != "":
		opts = append(opts, client.MatchingFields{indexApplicationServing: servingKey(rest[argocd.LabelServingNamespace], rest[argocd.LabelServing])})
		delete(rest, argocd.LabelServing)
		delete(rest, argocd.LabelServingNamespace)
	case rest[argocd.LabelCluster] != "":
		opts = append(opts, client.MatchingFields{indexApplicationCluster: rest[argocd.LabelCluster]})
		delete(rest, argocd.LabelCluster)
	}
	if len(rest) > 0 {
		opts = append(opts, rest)
	}
	if err := a.Client.List(ctx, list, opts...); err != nil {
		return fmt.Errorf("list Applications in %s: %w", namespace, err)
	}
	return nil
}
