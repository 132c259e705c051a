package serving

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocache"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/oci"
)

// watchArgoCD watches Applications and AppProjects and enqueues every Serving.
func (r *Reconciler) watchArgoCD(c controller.Controller) error {
	project := &unstructured.Unstructured{}
	project.SetGroupVersionKind(argocd.AppProjectGVK)
	if err := c.Watch(source.Kind(r.ArgoCD.Cache, client.Object(&argocd.Application{}), r.pacedByFold())); err != nil {
		return fmt.Errorf("watch Applications: %w", err)
	}
	if err := c.Watch(source.Kind(r.ArgoCD.Cache, client.Object(project), handler.EnqueueRequestsFromMapFunc(r.servingsOfProject))); err != nil {
		return fmt.Errorf("watch AppProjects: %w", err)
	}
	// The Servings that said ArgoCDNotInstalled look again now.
	return c.Watch(argocache.EnqueueAll(r, &v1.ServingList{}))
}

// clusterChangeServingsRead passes the Cluster changes a Serving reads (labels, server,
// deletion, Ready and its reason) and not the others, such as a probe's time: a quiet fleet
// reconciles no Serving.
var clusterChangeServingsRead = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	was, ok1 := e.ObjectOld.(*v1.Cluster)
	now, ok2 := e.ObjectNew.(*v1.Cluster)
	if !ok1 || !ok2 {
		return true
	}
	ready := func(c *v1.Cluster) string {
		if cond := apimeta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady); cond != nil {
			return string(cond.Status) + "/" + cond.Reason
		}
		return ""
	}
	return !equality.Semantic.DeepEqual(was.Labels, now.Labels) || was.Spec.Server != now.Spec.Server ||
		!was.DeletionTimestamp.Equal(now.DeletionTimestamp) || ready(was) != ready(now)
}}

// pacedByFold enqueues the Serving of an Application that changed, at most as often as its
// reconciles take: each is delayed by how long the Serving's last reconcile took (foldTime),
// and the events that come meanwhile join it. A reconcile folds every Application of the
// Serving, some 0.1 s at 10,000 clusters, and during a roll-out the watch brings one event per
// write: reconciled on each, the fold ran back to back for as long as the events came, a cost
// that grew with the roll-out's time rather than its writes. A small fleet's reconcile takes
// milliseconds, and so does the delay.
func (r *Reconciler) pacedByFold() handler.TypedEventHandler[client.Object, reconcile.Request] {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		for _, o := range objs {
			// The queue keeps one of each key, at the earliest time asked.
			if key, ok := argocd.ServingOf(o); ok {
				q.AddAfter(reconcile.Request{NamespacedName: key}, r.foldTime(key))
			}
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.ObjectNew, e.ObjectOld)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
	}
}

// maxFoldPace bounds the delay pacedByFold adds to an Application's event.
const maxFoldPace = time.Second

// foldTime is how long the last reconcile of the Serving key took, at most maxFoldPace; zero
// when none is known.
func (r *Reconciler) foldTime(key types.NamespacedName) time.Duration {
	if d, ok := r.took.Load(key); ok {
		return min(d.(time.Duration), maxFoldPace)
	}
	return 0
}

func servingOfApplication(_ context.Context, o client.Object) []reconcile.Request {
	key, ok := argocd.ServingOf(o)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// servingsOfSecret maps a repository Secret of Kokumi's to its Serving, and the registry's
// credentials Secret (a rotation) to every Serving.
func (r *Reconciler) servingsOfSecret(ctx context.Context, s *corev1.Secret) []reconcile.Request {
	if s.Namespace != r.Config.Namespace || s.Name != oci.RegistryCredentialsSecret {
		return servingOfApplication(ctx, s)
	}
	var list v1.ServingList
	if err := r.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Servings, for the rotated credentials of the bundled registry")
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return reqs
}

func (r *Reconciler) servingsOfPreparation(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1.ServingList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexServingPreparation: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Servings of Preparation", "preparation", o.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items)+1)
	for _, s := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
	}
	// A new Preparation of an Order may be the one its Serving waits for.
	if order := o.(*v1.Preparation).Spec.OrderRef.Name; order != "" {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: order}})
	}
	return out
}

// servingsOfOrdersTo lists the Servings of the Orders of namespace that deploy to environment.
func (r *Reconciler) servingsOfOrdersTo(ctx context.Context, namespace, environment string) []reconcile.Request {
	var list v1.OrderList
	if err := r.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{indexOrderEnvironment: environment}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Orders of Environment", "environment", environment)
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, o := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&o)})
	}
	return out
}

func (r *Reconciler) servingsOfEnvironment(ctx context.Context, o client.Object) []reconcile.Request {
	return r.servingsOfOrdersTo(ctx, o.GetNamespace(), o.GetName())
}

// servingsOfCluster maps a Cluster to the Servings of every Environment that selects it.
func (r *Reconciler) servingsOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	var envs v1.EnvironmentList
	if err := r.List(ctx, &envs); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Environments")
		return nil
	}
	var out []reconcile.Request
	for _, e := range envs.Items {
		sel, err := metav1.LabelSelectorAsSelector(&e.Spec.ClusterSelector)
		if err != nil || !sel.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		out = append(out, r.servingsOfOrdersTo(ctx, e.Namespace, e.Name)...)
	}
	return out
}

// servingsOfProject maps an AppProject to the Servings of the Environments that use it, and
// of the Environment local when it is local's project.
func (r *Reconciler) servingsOfProject(ctx context.Context, o client.Object) []reconcile.Request {
	var envs v1.EnvironmentList
	if err := r.List(ctx, &envs, client.MatchingFields{indexEnvironmentProject: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Environments of AppProject", "project", o.GetName())
		return nil
	}
	var out []reconcile.Request
	for _, e := range envs.Items {
		out = append(out, r.servingsOfOrdersTo(ctx, e.Namespace, e.Name)...)
	}
	if o.GetName() == r.Config.LocalProject {
		out = append(out, r.servingsOfOrdersTo(ctx, "", v1.LocalEnvironmentName)...)
	}
	return out
}
