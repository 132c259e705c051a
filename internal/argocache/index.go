package argocache

import (
	"context"
	"fmt"

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
func (a *Cache) indexApplications(ctx context.Context) error {
	for field, f := range applicationIndexes {
		if err := a.Cache.IndexField(ctx, &argocd.Application{}, field, f); err != nil {
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
func (a *Cache) ListApplications(ctx context.Context, list *argocd.ApplicationList, namespace string, match client.MatchingLabels) error {
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
