package bench

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
)

// observer watches the Applications of the namespaces the benchmark uses, the Clusters and the
// Servings through informers of its own, so that the waits count without listing the API
// server again and again.
type observer struct {
	cache cache.Cache
}

func newApplication() *unstructured.Unstructured {
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	return app
}

// startObserver starts the informers; they stop with ctx.
func startObserver(ctx context.Context, h *hub, scheme *runtime.Scheme, namespaces ...string) (*observer, error) {
	nss := map[string]cache.Config{}
	for _, ns := range namespaces {
		nss[ns] = cache.Config{}
	}
	c, err := cache.New(h.admin, cache.Options{
		Scheme:   scheme,
		ByObject: map[client.Object]cache.ByObject{newApplication(): {Namespaces: nss}},
	})
	if err != nil {
		return nil, fmt.Errorf("create the observer's cache: %w", err)
	}
	for _, o := range []client.Object{newApplication(), &v1.Cluster{}, &v1.Serving{}} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			return nil, fmt.Errorf("informer of %T: %w", o, err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the observer's cache did not sync")
	}
	return &observer{cache: c}, nil
}

// applications counts the Applications of namespace that carry labels and, when revision is
// not empty, target it.
func (o *observer) applications(ctx context.Context, namespace string, labels map[string]string, revision string) (int, error) {
	return o.countApplications(ctx, namespace, labels, revision, "spec", "source", "targetRevision")
}

// syncedApplications counts the Applications of namespace whose status says Synced.
func (o *observer) syncedApplications(ctx context.Context, namespace string) (int, error) {
	return o.countApplications(ctx, namespace, nil, argocd.SyncSynced, "status", "sync", "status")
}

// countApplications counts the Applications of namespace that carry labels and, when value is
// not empty, hold it at the field path.
func (o *observer) countApplications(ctx context.Context, namespace string, labels map[string]string, value string, path ...string) (int, error) {
	list, err := o.list(ctx, namespace, labels)
	if err != nil {
		return 0, err
	}
	if value == "" {
		return len(list.Items), nil
	}
	n := 0
	for i := range list.Items {
		if v, _, _ := unstructured.NestedString(list.Items[i].Object, path...); v == value {
			n++
		}
	}
	return n, nil
}

// list lists the Applications of namespace that carry labels, without copying the cache's.
func (o *observer) list(ctx context.Context, namespace string, labels map[string]string) (*unstructured.UnstructuredList, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	if err := o.cache.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels(labels), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list Applications: %w", err)
	}
	return list, nil
}

// preconditions gives, by name, the UID and resourceVersion of each Application of namespace
// the observer holds.
func (o *observer) preconditions(ctx context.Context, namespace string) (map[string]client.Preconditions, error) {
	list, err := o.list(ctx, namespace, nil)
	if err != nil {
		return nil, err
	}
	pre := make(map[string]client.Preconditions, len(list.Items))
	for i := range list.Items {
		uid, rv := list.Items[i].GetUID(), list.Items[i].GetResourceVersion()
		pre[list.Items[i].GetName()] = client.Preconditions{UID: &uid, ResourceVersion: &rv}
	}
	return pre, nil
}

// clusters counts the Clusters.
func (o *observer) clusters(ctx context.Context) (int, error) {
	var list v1.ClusterList
	if err := o.cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("list Clusters: %w", err)
	}
	return len(list.Items), nil
}

// readyClusters counts the Clusters whose Ready condition is True.
func (o *observer) readyClusters(ctx context.Context) (int, error) {
	var list v1.ClusterList
	if err := o.cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("list Clusters: %w", err)
	}
	n := 0
	for i := range list.Items {
		if cluster.IsReady(&list.Items[i]) {
			n++
		}
	}
	return n, nil
}

// servingReady returns the Serving's Ready condition's reason when it is True and of the
// Serving's generation, else "".
func (o *observer) servingReady(ctx context.Context, namespace, name string) (string, error) {
	var s v1.Serving
	if err := o.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	ready := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
	if s.Status.ObservedGeneration != s.Generation || ready == nil || ready.Status != "True" {
		return "", nil
	}
	return ready.Reason, nil
}

// serving returns the Serving namespace/name, or nil when there is none.
func (o *observer) serving(ctx context.Context, namespace, name string) (*v1.Serving, error) {
	var s v1.Serving
	if err := o.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get Serving %s/%s: %w", namespace, name, err)
	}
	return &s, nil
}

// servingDegraded returns how many clusters the Serving's status counts Degraded.
func (o *observer) servingDegraded(ctx context.Context, namespace, name string) (int, error) {
	var s v1.Serving
	if err := o.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		return 0, fmt.Errorf("get Serving %s/%s: %w", namespace, name, err)
	}
	return int(s.Status.Clusters.Degraded), nil
}

// waitCount polls count every 50 ms until it returns want, and returns how long after start
// that was. It fails after timeout, or as soon as alive fails.
func waitCount(ctx context.Context, start time.Time, timeout time.Duration, what string, want int, count func() (int, error), alive func() error) (time.Duration, error) {
	deadline := start.Add(timeout)
	for {
		n, err := count()
		if err != nil {
			return 0, err
		}
		if n == want {
			return time.Since(start), nil
		}
		last := n
		if alive != nil {
			if err := alive(); err != nil {
				return 0, fmt.Errorf("wait for %s: %w", what, err)
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("wait for %s: %d of %d after %s", what, last, want, timeout)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// with binds a count of the observer to the run's context, for waitCount.
func (r *run) with(count func(context.Context) (int, error)) func() (int, error) {
	return func() (int, error) { return count(r.ctx) }
}
