package order

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// The trusted keys' ConfigMaps (docs/verified-sources.md) are watched: a key added, rotated or
// removed brings back at once the Orders whose Product (spec.verify) or Environment
// (spec.signedSources) names its ConfigMap, not at their next resync.

const (
	// productKeysIndex indexes Products by the key ConfigMaps of spec.verify.publicKeys.
	productKeysIndex = "spec.verify.publicKeys"
	// environmentKeysIndex indexes Environments by the key ConfigMaps of
	// spec.signedSources.publicKeys.
	environmentKeysIndex = "spec.signedSources.publicKeys"
)

// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=configmaps,verbs=get;list;watch

// watchTrustedKeys indexes Products and Environments by the key ConfigMaps they name and
// returns the source of the changes of those ConfigMaps. Only the metadata of the ConfigMaps of
// Kokumi's namespace labelled as trusted keys (v1.TrustedKeysLabel) is cached, in a cache of its
// own that mgr starts: no other ConfigMap of the cluster is listed or watched.
func (r *Reconciler) watchTrustedKeys(mgr ctrl.Manager) (source.Source, error) {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.Product{}, productKeysIndex, func(o client.Object) []string {
		if v := o.(*v1.Product).Spec.Verify; v != nil {
			return v.PublicKeys
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("index products by their trusted keys: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1.Environment{}, environmentKeysIndex, func(o client.Object) []string {
		if v := o.(*v1.Environment).Spec.SignedSources; v != nil {
			return v.PublicKeys
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("index environments by their trusted keys: %w", err)
	}
	keys, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:           mgr.GetHTTPClient(),
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultNamespaces:    map[string]cache.Config{r.Config.Namespace: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{v1.TrustedKeysLabel: "true"}),
		DefaultTransform:     cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("create the cache of the trusted keys' ConfigMaps of namespace %s: %w", r.Config.Namespace, err)
	}
	if err := mgr.Add(keys); err != nil {
		return nil, fmt.Errorf("add the cache of the trusted keys' ConfigMaps of namespace %s: %w", r.Config.Namespace, err)
	}
	r.keyVersions = keys
	return source.Kind(keys, configMapMetadata(), handler.TypedEnqueueRequestsFromMapFunc(r.ordersOfKeys)), nil
}

func configMapMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	return m
}

// ordersOfKeys maps a trusted keys' ConfigMap to the Orders whose Product or Environment names it.
func (r *Reconciler) ordersOfKeys(ctx context.Context, cm *metav1.PartialObjectMetadata) []reconcile.Request {
	var reqs []reconcile.Request
	var products v1.ProductList
	if err := r.List(ctx, &products, client.MatchingFields{productKeysIndex: cm.Name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list the Products of a trusted keys' ConfigMap", "configMap", cm.Name)
	}
	for i := range products.Items {
		reqs = append(reqs, r.ordersOfProduct(ctx, &products.Items[i])...)
	}
	var envs v1.EnvironmentList
	if err := r.List(ctx, &envs, client.MatchingFields{environmentKeysIndex: cm.Name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list the Environments of a trusted keys' ConfigMap", "configMap", cm.Name)
	}
	for _, env := range envs.Items {
		var orders v1.OrderList
		if err := r.List(ctx, &orders, client.InNamespace(env.Namespace)); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "list the Orders of an Environment", "environment", env.Name)
			continue
		}
		for i := range orders.Items {
			if o := &orders.Items[i]; o.Spec.EnvironmentRef.Name == env.Name {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
			}
		}
	}
	return reqs
}

// retryInput is what a failed render of order is tried again for (preparation.RetryInput), and
// the versions of the trusted keys' ConfigMaps its Product names: an admin who adds the key a
// refused input lacks sees it rendered at once, not after the render's backoff. The versions
// are read from the cache of those ConfigMaps (watchTrustedKeys).
func (r *Reconciler) retryInput(ctx context.Context, order *v1.Order, product *v1.Product) string {
	input := preparation.RetryInput(order, product)
	if product.Spec.Verify == nil || r.keyVersions == nil {
		return input
	}
	versions := make([]string, 0, len(product.Spec.Verify.PublicKeys))
	for _, name := range product.Spec.Verify.PublicKeys {
		m := configMapMetadata()
		err := r.keyVersions.Get(ctx, client.ObjectKey{Namespace: r.Config.Namespace, Name: name}, m)
		switch {
		case err == nil:
			versions = append(versions, m.ResourceVersion)
		case apierrors.IsNotFound(err):
			versions = append(versions, "-")
		default:
			versions = append(versions, "?")
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.Join(versions, ",")))
	return fmt.Sprintf("%s/keys:%08x", input, h.Sum32())
}
