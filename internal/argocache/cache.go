// Package argocache is Kokumi's cache of Argo CD's namespace: Kokumi's own Applications, decoded
// into argocd.Application and indexed by Serving and by Cluster, and the AppProjects; apart from
// the manager's cache so that Kokumi starts before Argo CD's CRDs exist. The manager builds it
// once and passes it to the reconcilers and the server that read it.
package argocache

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/shard"
)

// PollInterval is how often Kokumi looks for Argo CD's CRDs while they are not installed.
var PollInterval = 10 * time.Second

// Cache is Kokumi's view of Argo CD's namespace: a cache of the Applications and AppProjects
// there, apart from the manager's cache so that Kokumi starts, and reports ArgoCDNotInstalled,
// before Argo CD's CRDs exist; and the callbacks that begin watching them once they appear.
type Cache struct {
	// Cache holds the objects of Argo CD's namespace that Kokumi reads; nothing is read from it
	// before Installed says so.
	Cache cache.Cache
	// Client reads Argo CD's objects from Cache (Applications as argocd.Application, AppProjects
	// unstructured) and writes to the API server.
	Client client.Client
	// Reader reads from the API server: an Application the cache does not hold (not Kokumi's,
	// another shard's) may still exist under a name Kokumi plans.
	Reader client.Reader
	// Writer writes Applications without decoding the API server's answers.
	Writer *Writer

	mapper    interface{ Installed() bool }
	mu        sync.Mutex
	installed bool
	indexed   bool
	onInstall []func(context.Context) error
}

// New builds the view of Argo CD's namespace cfg.ArgoCDNamespace and adds it to the manager, to
// start with it. The manager builds one and passes it to every reconciler and the server that
// read Argo CD's objects: they share one cache.
//
// The cache holds only Kokumi's own Applications (app.kubernetes.io/managed-by=kokumi) of
// cfg.Shard, each decoded into an argocd.Application (what Kokumi reads of it, some 3 KB), and
// indexed by Serving and by Cluster; AppProjects are few and small, and cached whole.
func New(mgr manager.Manager, cfg config.Config) (*Cache, error) {
	opts, err := argoCDCacheOptions(mgr, cfg)
	if err != nil {
		return nil, err
	}
	c, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return nil, fmt.Errorf("create the cache of Argo CD's namespace %q: %w", cfg.ArgoCDNamespace, err)
	}
	cl, err := client.New(mgr.GetConfig(), client.Options{
		HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: c, Unstructured: true},
	})
	if err != nil {
		return nil, fmt.Errorf("create the client of Argo CD's namespace %q: %w", cfg.ArgoCDNamespace, err)
	}
	w, err := NewWriter(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme())
	if err != nil {
		return nil, err
	}
	a := &Cache{Cache: c, Client: cl, Reader: mgr.GetAPIReader(), Writer: w, mapper: servedBy{mgr}}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("add the cache of Argo CD's namespace: %w", err)
	}
	if err := mgr.Add(a); err != nil {
		return nil, fmt.Errorf("add the Argo CD watcher: %w", err)
	}
	return a, nil
}

// argoCDCacheOptions caches Argo CD's namespace: of its Applications only Kokumi's of cfg.Shard,
// as argocd.Application, listed and watched by applicationsListWatch.
func argoCDCacheOptions(mgr manager.Manager, cfg config.Config) (cache.Options, error) {
	selector := shard.ApplicationSelector(cfg.Shard)
	apps, err := applicationsListWatch(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme(), cfg.ArgoCDNamespace, selector)
	if err != nil {
		return cache.Options{}, err
	}
	return cache.Options{
		HTTPClient:        mgr.GetHTTPClient(),
		Scheme:            mgr.GetScheme(),
		Mapper:            argoCDMapper{mgr.GetRESTMapper()},
		DefaultNamespaces: map[string]cache.Config{cfg.ArgoCDNamespace: {}},
		// The same selector as apps's, for what the cache itself reads of it.
		ByObject:    map[client.Object]cache.ByObject{&argocd.Application{}: {Label: selector}},
		NewInformer: newInformer(apps),
	}, nil
}

// argoCDMapper is the manager's REST mapper, except that it knows Argo CD's Application is
// namespaced before its CRD is installed: the cache asks that of every ByObject kind when it
// is made, at start, and Kokumi starts before Argo CD. The cache reads no Application before
// Cache.Installed.
type argoCDMapper struct{ meta.RESTMapper }

// RESTMapping answers from the manager's mapper, or, for Argo CD's Application while its CRD is
// not served, with a namespaced mapping of its resource.
func (m argoCDMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil && meta.IsNoMatchError(err) && gk == argocd.ApplicationGVK.GroupKind() {
		return &meta.RESTMapping{
			Resource:         argocd.ApplicationGVK.GroupVersion().WithResource("applications"),
			GroupVersionKind: argocd.ApplicationGVK,
			Scope:            meta.RESTScopeNamespace,
		}, nil
	}
	return mapping, err
}

// servedBy asks the manager's REST mapper, which looks again for a group it did not know.
type servedBy struct{ mgr manager.Manager }

// Installed is true when both kinds are served: one CRD may be established before the other.
func (s servedBy) Installed() bool {
	for _, gvk := range []schema.GroupVersionKind{argocd.ApplicationGVK, argocd.AppProjectGVK} {
		if _, err := s.mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return false
		}
	}
	return true
}

// Installed reports whether the API server serves Argo CD's Application and AppProject kinds.
func (a *Cache) Installed() bool {
	a.mu.Lock()
	done := a.installed
	a.mu.Unlock()
	return done || a.mapper.Installed()
}

// OnInstalled runs f once Argo CD's CRDs are served: at start if they are, else when they
// appear (within PollInterval). Register before the manager starts.
func (a *Cache) OnInstalled(f func(context.Context) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onInstall = append(a.onInstall, f)
}

// Start waits for Argo CD's CRDs, then runs the OnInstalled callbacks. It runs on every
// replica: the watches it adds start with their controllers.
func (a *Cache) Start(ctx context.Context) error {
	for !a.mapper.Installed() {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(PollInterval):
		}
	}
	if err := a.ensureIndexed(ctx); err != nil {
		return err
	}
	if err := a.countCached(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	a.installed = true
	callbacks := a.onInstall
	a.mu.Unlock()
	for _, f := range callbacks {
		if err := f(ctx); err != nil {
			return fmt.Errorf("begin watching Argo CD: %w", err)
		}
	}
	return nil
}

// ensureIndexed registers the Application indexes once; a List that uses them may come first,
// in the moment between the CRDs being served and Start seeing it.
func (a *Cache) ensureIndexed(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.indexed {
		return nil
	}
	if err := a.indexApplications(ctx); err != nil {
		return err
	}
	a.indexed = true
	return nil
}

// countCached keeps kokumi_applications_cached at the number of Applications the cache holds.
func (a *Cache) countCached(ctx context.Context) error {
	inf, err := a.Cache.GetInformer(ctx, &argocd.Application{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("get the informer of Applications: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kmetrics.ApplicationCached(1) },
		DeleteFunc: func(any) { kmetrics.ApplicationCached(-1) },
	})
	if err != nil {
		return fmt.Errorf("count the cached Applications: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every replica watches, so that a new leader starts warm.
func (a *Cache) NeedLeaderElection() bool { return false }

// EnqueueAll is a source that enqueues every object of list's kind once, when it starts: what
// waited for Argo CD looks again when its CRDs appear.
func EnqueueAll(c client.Reader, list client.ObjectList) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		if err := c.List(ctx, list); err != nil {
			return fmt.Errorf("list %T: %w", list, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return fmt.Errorf("read %T: %w", list, err)
		}
		for _, item := range items {
			if o, ok := item.(client.Object); ok {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
			}
		}
		return nil
	})
}
