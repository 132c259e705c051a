// Package environment holds the Environment reconciler: it reports whether an Environment can
// deploy (its AppProject, its Clusters, its promotion pipeline) in its status.
package environment

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"sigs.k8s.io/controller-runtime/pkg/controller"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocache"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller/status"
	"github.com/kokumi-dev/kokumi/internal/gate"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/notify"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/text"
	"github.com/kokumi-dev/kokumi/internal/verify"
)

const (
	// environmentProjectIndex indexes Environments by spec.project.
	environmentProjectIndex = "kokumi.spec.project"
	// environmentKeyIndex indexes Environments by the Secrets their webhooks' keys are in
	// (spec.notifications[].secretRef.name, in Kokumi's namespace).
	environmentKeyIndex = "kokumi.spec.notifications.secretRef.name"
)

// environmentAppProjectGVK is Argo CD's AppProject, read as metadata only.
var environmentAppProjectGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "AppProject"}

// Reconciler reports how many Clusters each Environment selects, how many are
// Ready, and whether it can be deployed to. The Environment local is no object and is not
// reconciled; an Environment named local is reconciled as any other.
type Reconciler struct {
	// Client reads Environments and Clusters from the manager's cache and writes status.
	Client client.Client
	// Projects reads AppProjects, as metadata, from a cache of Argo CD's namespace.
	Projects client.Reader
	// Recorder records events on transitions.
	Recorder events.EventRecorder
	// Config is Kokumi's configuration: Argo CD's namespace, and Kokumi's, where the webhooks'
	// keys are.
	Config config.Config
	// Keys reads the Secrets that hold the webhooks' keys, in Kokumi's namespace, by name and
	// uncached (the manager's API reader); nil checks no key.
	Keys client.Reader
}

// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=environments,verbs=get;list;watch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=environments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=argoproj.io,namespace=argocd,resources=appprojects,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,verbs=get;list;watch

// Setup registers the Environment reconciler with the manager.
func Setup(mgr ctrl.Manager, cfg config.Config, argo *argocache.Cache) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1.Environment{}, environmentProjectIndex,
		func(o client.Object) []string { return []string{o.(*v1.Environment).Spec.Project} }); err != nil {
		return fmt.Errorf("index environments by project: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1.Environment{}, environmentKeyIndex, keySecrets); err != nil {
		return fmt.Errorf("index environments by their webhooks' key Secrets: %w", err)
	}
	keys, err := newKeyCache(mgr, cfg.Namespace)
	if err != nil {
		return err
	}
	r := &Reconciler{
		Client:   mgr.GetClient(),
		Projects: argo.Cache,
		Recorder: mgr.GetEventRecorder("kokumi-environment"),
		Config:   cfg,
		Keys:     mgr.GetAPIReader(),
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("environment").
		For(&v1.Environment{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Kind(mgr.GetCache(), &v1.Cluster{}, r.clusterHandler())).
		// An Environment appearing, going or changing its requirements may break or mend the
		// pipelines of the others in its namespace.
		Watches(&v1.Environment{}, handler.EnqueueRequestsFromMapFunc(r.pipelinesOfNamespace)).
		// A webhook key made, changed or deleted in Kokumi's namespace changes the condition
		// Notifications of the Environments that name it.
		WatchesRawSource(source.Kind(keys, secretMetadata(), handler.TypedEnqueueRequestsFromMapFunc(r.environmentsOfKey)))
	c, err := b.WithOptions(controller.Options{MaxConcurrentReconciles: cfg.Workers(config.EnvironmentConcurrency)}).Build(status.QuietConflicts(r))
	if err != nil {
		return fmt.Errorf("set up the environment controller: %w", err)
	}
	// AppProjects are watched from when Argo CD's CRDs are served (a watch of a kind not served
	// would keep the manager from starting); until then Environments say ArgoCDNotInstalled,
	// and all of them look again when the CRDs appear.
	argo.OnInstalled(func(context.Context) error {
		if err := c.Watch(source.Kind(argo.Cache, environmentAppProjectMetadata(),
			handler.TypedEnqueueRequestsFromMapFunc(r.environmentsForProject))); err != nil {
			return fmt.Errorf("watch AppProjects: %w", err)
		}
		return c.Watch(argocache.EnqueueAll(r.Client, &v1.EnvironmentList{}))
	})
	return nil
}

// keySecrets are the names of the Secrets an Environment's webhooks' keys are in.
func keySecrets(o client.Object) []string {
	var names []string
	for _, n := range o.(*v1.Environment).Spec.Notifications {
		if n.SecretRef != nil && !slices.Contains(names, n.SecretRef.Name) {
			names = append(names, n.SecretRef.Name)
		}
	}
	return names
}

// secretMetadata is a Secret, read as metadata only.
func secretMetadata() *metav1.PartialObjectMetadata {
	s := &metav1.PartialObjectMetadata{}
	s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return s
}

// newKeyCache makes a cache of the metadata of the Secrets of Kokumi's namespace, and of nothing
// else, added to mgr, which starts it: their values are never cached, only read by name
// (Reconciler.Keys) when an Environment names one.
func newKeyCache(mgr ctrl.Manager, namespace string) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:        mgr.GetHTTPClient(),
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		DefaultTransform:  cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("create the cache of the Secrets' metadata of namespace %s: %w", namespace, err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("add the cache of the Secrets' metadata of namespace %s: %w", namespace, err)
	}
	return c, nil
}

// environmentsOfKey maps a Secret of Kokumi's namespace to the Environments whose webhooks name
// it.
func (r *Reconciler) environmentsOfKey(ctx context.Context, s *metav1.PartialObjectMetadata) []reconcile.Request {
	if s.Namespace != r.Config.Namespace {
		return nil
	}
	var list v1.EnvironmentList
	if err := r.Client.List(ctx, &list, client.MatchingFields{environmentKeyIndex: s.Name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list the Environments of a webhook key", "secret", s.Name)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

func environmentAppProjectMetadata() *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{}
	p.SetGroupVersionKind(environmentAppProjectGVK)
	return p
}

// environmentsForProject maps an AppProject to the Environments that name it.
func (r *Reconciler) environmentsForProject(ctx context.Context, p *metav1.PartialObjectMetadata) []reconcile.Request {
	var list v1.EnvironmentList
	if err := r.Client.List(ctx, &list, client.MatchingFields{environmentProjectIndex: p.Name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list the Environments of an AppProject", "appProject", p.Name)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, e := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Namespace, Name: e.Name}})
	}
	return reqs
}

// ClusterChangesBatch is how long an Environment waits after a change of one of its Clusters
// (created, deleted, Ready or not, relabelled) before it counts them again: the changes within
// it are counted in one reconcile and one status write.
const ClusterChangesBatch = time.Second

// clusterHandler enqueues the Environments a Cluster joins or leaves (by its labels, or by
// being deleted), or whose Ready count it changes: those whose selector matches its labels
// before or after.
func (r *Reconciler) clusterHandler() handler.TypedEventHandler[*v1.Cluster, reconcile.Request] {
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	enqueue := func(ctx context.Context, q queue, sets ...labels.Set) {
		for _, req := range r.environmentsSelecting(ctx, sets...) {
			// Batched: the first Cluster change schedules the Environment, those within the
			// batch ride along, so that a fleet onboarding or going costs the Environment one
			// status write a batch, not one per few Clusters.
			q.AddAfter(req, ClusterChangesBatch)
		}
	}
	return handler.TypedFuncs[*v1.Cluster, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*v1.Cluster], q queue) {
			enqueue(ctx, q, e.Object.Labels)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*v1.Cluster], q queue) {
			if labels.Equals(e.ObjectOld.Labels, e.ObjectNew.Labels) && cluster.IsReady(e.ObjectOld) == cluster.IsReady(e.ObjectNew) &&
				e.ObjectOld.DeletionTimestamp.IsZero() == e.ObjectNew.DeletionTimestamp.IsZero() {
				return
			}
			enqueue(ctx, q, e.ObjectOld.Labels, e.ObjectNew.Labels)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*v1.Cluster], q queue) {
			enqueue(ctx, q, e.Object.Labels)
		},
	}
}

// environmentsSelecting lists the Environments whose selector matches any of the label sets.
func (r *Reconciler) environmentsSelecting(ctx context.Context, sets ...labels.Set) []reconcile.Request {
	var list v1.EnvironmentList
	if err := r.Client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Environments")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		sel, err := cluster.Selector(&list.Items[i].Spec.ClusterSelector)
		if err != nil {
			continue // InvalidSelector does not change with Clusters
		}
		for _, set := range sets {
			if sel.Matches(set) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				break
			}
		}
	}
	return reqs
}

// Reconcile counts the Clusters one Environment selects and decides its Ready condition.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var env v1.Environment
	if err := r.Client.Get(ctx, req.NamespacedName, &env); err != nil {
		if apierrors.IsNotFound(err) {
			kmetrics.ForgetEnvironment(req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get environment %s: %w", req.NamespacedName, err)
	}
	base := env.DeepCopy()
	before := &base.Status

	facts := gate.EnvironmentFacts{Project: env.Spec.Project, ArgoCDNamespace: r.Config.ArgoCDNamespace}
	facts.Selector, facts.SelectorError = cluster.Selector(&env.Spec.ClusterSelector)
	if facts.SelectorError == nil {
		var clusters v1.ClusterList
		if err := r.Client.List(ctx, &clusters); err != nil {
			return ctrl.Result{}, fmt.Errorf("list clusters for environment %s: %w", req.NamespacedName, err)
		}
		facts.Selected, facts.Ready = cluster.Count(facts.Selector, clusters.Items)
		var err error
		facts.ArgoCDInstalled, facts.ProjectFound, err = r.projectExists(ctx, env.Spec.Project)
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	// A pipeline that can never pass is the admin's to fix first, whatever else holds.
	facts.Namespace = env.Namespace
	if err := r.readPipeline(ctx, &env, &facts); err != nil {
		return ctrl.Result{}, err
	}
	facts.VerificationProblem = verify.Problem(&env)
	ready, reason, message := gate.EnvironmentReady(facts)
	if err := r.checkKeys(ctx, &env); err != nil {
		return ctrl.Result{}, err
	}
	env.Status.Clusters, env.Status.ReadyClusters = facts.Selected, facts.Ready
	env.Status.ObservedGeneration = env.Generation
	meta.SetStatusCondition(&env.Status.Conditions, metav1.Condition{
		Type:               v1.ConditionReady,
		Status:             ready,
		Reason:             reason,
		Message:            text.Truncate(message, text.MaxMessage),
		ObservedGeneration: env.Generation,
	})
	written, err := status.Write(ctx, r.Client, &env, base)
	if err != nil {
		return ctrl.Result{}, err
	}
	if written.Changed {
		status.ReadyTransitionEvent(r.Recorder, &env, before.Conditions, env.Status.Conditions)
	}
	// ArgoCDNotInstalled needs no recheck: every Environment looks again when the CRDs appear.
	return written.Result(), nil
}

// checkKeys sets the condition Notifications of env, and its series of
// kokumi_environment_webhook_keys_missing, by reading the key each webhook's secretRef names in
// Kokumi's namespace; an Environment without one has neither. An error is a read worth trying
// again.
func (r *Reconciler) checkKeys(ctx context.Context, env *v1.Environment) error {
	if r.Keys == nil {
		return nil
	}
	var signed int
	var problems []string
	for i, hook := range env.Spec.Notifications {
		if hook.SecretRef == nil {
			continue
		}
		signed++
		_, problem, err := notify.ReadKey(ctx, r.Keys, r.Config.Namespace, client.ObjectKeyFromObject(env), i, *hook.SecretRef)
		if err != nil {
			return err
		}
		if problem != "" {
			problems = append(problems, problem+"; until then the webhook "+hook.Name+" is sent nothing")
		}
	}
	kmetrics.SetWebhookKeysMissing(env.Namespace, env.Name, signed, len(problems))
	if signed == 0 {
		meta.RemoveStatusCondition(&env.Status.Conditions, v1.ConditionNotifications)
		return nil
	}
	c := metav1.Condition{Type: v1.ConditionNotifications, Status: metav1.ConditionTrue, Reason: v1.ReasonWebhookKeysFound,
		Message:            fmt.Sprintf("the keys of the %d signed webhooks are in Kokumi's namespace %s", signed, r.Config.Namespace),
		ObservedGeneration: env.Generation}
	if len(problems) > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1.ReasonWebhookKeyMissing, problems[0]
		if len(problems) > 1 {
			c.Message += fmt.Sprintf(" (and %d more webhooks without a key)", len(problems)-1)
		}
	}
	c.Message = text.ShortenMiddle(c.Message, text.MaxMessage)
	meta.SetStatusCondition(&env.Status.Conditions, c)
	return nil
}

// readPipeline reads what the Environment's spec.requires leads to (gate.EnvironmentFacts): the
// required Environments that do not exist, and the cycle the requirements form, if any.
func (r *Reconciler) readPipeline(ctx context.Context, env *v1.Environment, facts *gate.EnvironmentFacts) error {
	if len(env.Spec.Requires) == 0 {
		return nil
	}
	var list v1.EnvironmentList
	if err := r.Client.List(ctx, &list, client.InNamespace(env.Namespace)); err != nil {
		return fmt.Errorf("list the Environments of namespace %s: %w", env.Namespace, err)
	}
	graph := promotion.NewGraph(list.Items)
	facts.MissingRequired = graph.Missing(env.Name)
	if len(facts.MissingRequired) == 0 {
		facts.RequirementCycle = graph.Cycle(env.Name)
	}
	return nil
}

// pipelinesOfNamespace maps an Environment to the Environments of its namespace that have
// requirements.
func (r *Reconciler) pipelinesOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1.EnvironmentList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Environments", "namespace", o.GetNamespace())
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if len(list.Items[i].Spec.Requires) > 0 && list.Items[i].Name != o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// projectExists looks the AppProject up in Argo CD's namespace.
func (r *Reconciler) projectExists(ctx context.Context, name string) (installed, found bool, err error) {
	p := environmentAppProjectMetadata()
	err = r.Projects.Get(ctx, types.NamespacedName{Namespace: r.Config.ArgoCDNamespace, Name: name}, p)
	switch {
	case err == nil:
		return true, true, nil
	case apierrors.IsNotFound(err):
		return true, false, nil
	case meta.IsNoMatchError(err):
		return false, false, nil
	default:
		return false, false, fmt.Errorf("get AppProject %s/%s: %w", r.Config.ArgoCDNamespace, name, err)
	}
}
