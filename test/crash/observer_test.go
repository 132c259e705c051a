package crash

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// observer watches the Applications, Servings and Clusters through informers of its own. It
// counts the writes that changed them (a write that changes nothing makes no event), and it
// plays Argo CD: every Application that does not yet report Synced and Healthy at its
// spec.source.targetRevision gets that status written, as Argo CD would after a sync.
type observer struct {
	cache cache.Cache
	queue workqueue.TypedRateLimitingInterface[string]

	appCreates, appUpdates, appDeletes atomic.Int64
	argoCDWrites                       atomic.Int64
	servingStatus, clusterStatus       atomic.Int64

	mu sync.Mutex
	// firstAppWrite is when the first Application write after markRestart was seen, of a
	// resource version after restartRV.
	firstAppWrite time.Time
	restartRV     int64
}

// counts is a snapshot of the observer's counters.
type counts struct {
	AppCreates, AppUpdates, AppDeletes, ArgoCD, ServingStatus, ClusterStatus int64
}

func (c counts) sub(d counts) counts {
	return counts{c.AppCreates - d.AppCreates, c.AppUpdates - d.AppUpdates, c.AppDeletes - d.AppDeletes,
		c.ArgoCD - d.ArgoCD, c.ServingStatus - d.ServingStatus, c.ClusterStatus - d.ClusterStatus}
}

// kokumi is how many writes of Kokumi's changed something.
func (c counts) kokumi() int64 {
	return c.AppCreates + c.AppUpdates + c.AppDeletes + c.ServingStatus + c.ClusterStatus
}

func (c counts) String() string {
	return fmt.Sprintf("%d by Kokumi (Applications: %d created, %d updated, %d deleted; %d Serving status, %d Cluster status), %d Application status by Argo CD",
		c.kokumi(), c.AppCreates, c.AppUpdates, c.AppDeletes, c.ServingStatus, c.ClusterStatus, c.ArgoCD)
}

func newApplication() *unstructured.Unstructured {
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	return app
}

// startObserver starts the informers and Argo CD's workers; they stop with ctx.
func startObserver(ctx context.Context) (*observer, error) {
	c, err := cache.New(env.Config, cache.Options{
		Scheme:   env.Scheme,
		ByObject: map[client.Object]cache.ByObject{newApplication(): {Namespaces: map[string]cache.Config{argocdNamespace: {}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("create the observer's cache: %w", err)
	}
	o := &observer{cache: c, queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, time.Second))}
	apps, err := c.GetInformer(ctx, newApplication())
	if err != nil {
		return nil, fmt.Errorf("Application informer: %w", err)
	}
	if _, err := apps.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			o.appCreates.Add(1)
			o.sawAppWrite(obj)
			o.enqueue(obj)
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, now := oldObj.(*unstructured.Unstructured), newObj.(*unstructured.Unstructured)
			if old.GetResourceVersion() == now.GetResourceVersion() {
				return // a resync
			}
			if kokumiChanged(old, now) {
				o.appUpdates.Add(1)
				o.sawAppWrite(now)
			}
			o.enqueue(newObj)
		},
		DeleteFunc: func(any) { o.appDeletes.Add(1) },
	}); err != nil {
		return nil, fmt.Errorf("watch Applications: %w", err)
	}
	servings, err := c.GetInformer(ctx, &v1.Serving{})
	if err != nil {
		return nil, fmt.Errorf("Serving informer: %w", err)
	}
	if _, err := servings.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(oldObj, newObj any) {
		if !equality.Semantic.DeepEqual(oldObj.(*v1.Serving).Status, newObj.(*v1.Serving).Status) {
			o.servingStatus.Add(1)
		}
	}}); err != nil {
		return nil, fmt.Errorf("watch Servings: %w", err)
	}
	clusters, err := c.GetInformer(ctx, &v1.Cluster{})
	if err != nil {
		return nil, fmt.Errorf("Cluster informer: %w", err)
	}
	if _, err := clusters.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(oldObj, newObj any) {
		if !equality.Semantic.DeepEqual(oldObj.(*v1.Cluster).Status, newObj.(*v1.Cluster).Status) {
			o.clusterStatus.Add(1)
		}
	}}); err != nil {
		return nil, fmt.Errorf("watch Clusters: %w", err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the observer's cache did not sync")
	}
	go func() {
		<-ctx.Done()
		o.queue.ShutDown()
	}()
	for range 4 {
		go o.playArgoCD(ctx)
	}
	return o, nil
}

// kokumiChanged says whether an update changed what Kokumi writes on an Application (anything
// but the status, which Argo CD writes).
func kokumiChanged(old, now *unstructured.Unstructured) bool {
	return !equality.Semantic.DeepEqual(old.Object["spec"], now.Object["spec"]) ||
		!equality.Semantic.DeepEqual(old.GetLabels(), now.GetLabels()) ||
		!equality.Semantic.DeepEqual(old.GetAnnotations(), now.GetAnnotations()) ||
		!equality.Semantic.DeepEqual(old.GetFinalizers(), now.GetFinalizers())
}

func (o *observer) counts() counts {
	return counts{o.appCreates.Load(), o.appUpdates.Load(), o.appDeletes.Load(), o.argoCDWrites.Load(), o.servingStatus.Load(), o.clusterStatus.Load()}
}

// appWrites is how many of Kokumi's Application writes changed something.
func (o *observer) appWrites() int64 {
	return o.appCreates.Load() + o.appUpdates.Load() + o.appDeletes.Load()
}

// sawAppWrite notes the first write of an Application after markRestart.
func (o *observer) sawAppWrite(obj any) {
	rv, err := strconv.ParseInt(obj.(*unstructured.Unstructured).GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if rv > o.restartRV && o.firstAppWrite.IsZero() {
		o.firstAppWrite = time.Now()
	}
}

// markRestart forgets the first Application write seen, for the incarnation that starts now.
// Only writes after the resource version rv count: the events of the writes the killed
// incarnation made can arrive after it died.
func (o *observer) markRestart(rv int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.firstAppWrite, o.restartRV = time.Time{}, rv
}

// firstAppWriteSince is when the first Application write after markRestart was seen, if one was.
func (o *observer) firstAppWriteSince() (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.firstAppWrite, !o.firstAppWrite.IsZero()
}

// enqueue hands an Application that does not report its target yet to Argo CD.
func (o *observer) enqueue(obj any) {
	if app, ok := obj.(*unstructured.Unstructured); ok && !playedAt(app) {
		o.queue.Add(app.GetName())
	}
}

// playedAt says whether an Application reports Synced and Healthy at its target revision.
func playedAt(app *unstructured.Unstructured) bool {
	target, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
	read, err := argocd.ApplicationFrom(app)
	return err == nil && read.Status.HealthyAt(target)
}

// playArgoCD is one of Argo CD's workers.
func (o *observer) playArgoCD(ctx context.Context) {
	for {
		name, shutdown := o.queue.Get()
		if shutdown {
			return
		}
		if err := o.sync(ctx, name); err != nil {
			o.queue.AddRateLimited(name)
		} else {
			o.queue.Forget(name)
		}
		o.queue.Done(name)
	}
}

// sync writes what Argo CD reports once it has synced the Application's target revision.
func (o *observer) sync(ctx context.Context, name string) error {
	app := newApplication()
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: argocdNamespace, Name: name}, app); err != nil {
		return client.IgnoreNotFound(err)
	}
	if playedAt(app) {
		return nil
	}
	target, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
	app.Object["status"] = map[string]any{
		"sync":   map[string]any{"status": argocd.SyncSynced, "revision": target},
		"health": map[string]any{"status": argocd.HealthHealthy},
	}
	err := env.Client.Update(ctx, app)
	switch {
	case err == nil:
		o.argoCDWrites.Add(1)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	default:
		return err // a conflict with Kokumi's write: again
	}
}
