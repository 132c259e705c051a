// Package serving holds the Serving reconciler: it deploys a Serving's Preparation to every
// cluster of its Order's Environment through one Argo CD Application per cluster, folds what Argo
// CD reports into its status, and signs deployment records.
package serving

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocache"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller/registrycreds"
	"github.com/kokumi-dev/kokumi/internal/controller/status"
	"github.com/kokumi-dev/kokumi/internal/egress"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/gate"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/notify"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/rollout/writes"
	"github.com/kokumi-dev/kokumi/internal/stages"
	"github.com/kokumi-dev/kokumi/internal/text"
	"github.com/kokumi-dev/kokumi/internal/verify"
)

// ServingFinalizer lets a deleted Serving delete its Applications first (what runs stays).
const ServingFinalizer = "delivery.kokumi.dev/applications"

// Index fields.
const (
	indexOrderEnvironment   = "spec.environmentRef.name"
	indexEnvironmentProject = "spec.project"
	indexServingPreparation = "spec.preparationName"
)

// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=servings,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=servings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=servings/finalizers,verbs=update
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=orders;preparations;environments;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=argoproj.io,namespace=argocd,resources=applications,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=argoproj.io,namespace=argocd,resources=appprojects,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,namespace=kokumi-system,resources=jobs,verbs=get;create;deletecollection
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=pods,verbs=list
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=preparations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=configmaps,verbs=get;list;watch;create;update;patch

// Reconciler deploys a Serving's Preparation to every cluster of its Order's Environment
// through one Argo CD Application per cluster, and folds what Argo CD reports into its status.
type Reconciler struct {
	client.Client
	// Config is Kokumi's configuration.
	Config config.Config
	// Recorder records events on transitions.
	Recorder events.EventRecorder
	// Notifier tells the Environments' webhooks of roll-out transitions; nil tells none.
	Notifier Notifier
	// Verifier runs the verifications of the roll-outs' gates; nil runs none (they wait).
	Verifier *verify.Runner
	// Now stamps status times.
	Now func() time.Time
	// Pipeline holds back a promoted Preparation that has not passed the stages its
	// Environment requires (a Manual promotion; Automatic Orders are held before). Nil: none.
	Pipeline *stages.Pipeline
	// Records signs deployment records and attaches them to artifacts; nil writes none.
	Records *record.Store
	// Keys holds the signing key.
	Keys *record.Keys
	// APIReader reads without the cache (a Preparation's records before adding one); nil reads
	// through Client.
	APIReader client.Reader
	// ArgoCD reads Argo CD's Applications and AppProjects (Client writes them).
	ArgoCD *argocache.Cache
	// PullSecrets keeps the repository Secret Argo CD reads each Serving's artifacts with,
	// scoped to its AppProject; nil writes none (Argo CD then pulls with what it has).
	PullSecrets *registrycreds.PullSecrets
	// pullCache is PullSecrets' cache, watched: a Secret changed or deleted by someone else is
	// written again.
	pullCache cache.Cache
	// checked carries the Servings whose HTTP check ended (Verifier.HTTP.Done): each reconciles
	// at once, not at its next poll (verify.PollHTTP).
	checked chan event.GenericEvent

	// writes follows roll-outs made in slices (internal/rollout).
	writes writes.Writes
	// applied remembers which Applications were as wanted (internal/rollout).
	applied writes.Memo
	// unlisted remembers the clusters past status.targets' cap, with their times.
	unlisted writes.Unlisted
	// took holds how long each Serving's last reconcile took but its Application writes
	// (types.NamespacedName to time.Duration): the pace of the reconciles its Applications'
	// events start (pacedByFold). writing holds the time the reconcile under way spent writing.
	took, writing sync.Map
	// failures remembers the stopped roll-outs whose failure is signed (dora.go).
	failures failureMemo
	// drifted remembers the clusters last seen Drifted, so that their drift is told once.
	drifted writes.Drifted
}

// noteFoldTime remembers how long the reconcile of the Serving key that began at start took,
// but its Application writes; a Serving that is gone (gone) is forgotten.
func (r *Reconciler) noteFoldTime(key types.NamespacedName, start time.Time, gone bool) {
	d := time.Since(start)
	if w, ok := r.writing.LoadAndDelete(key); ok {
		d -= w.(time.Duration)
	}
	if gone {
		r.took.Delete(key)
		return
	}
	r.took.Store(key, max(d, 0))
}

// Setup registers the Serving reconciler.
func Setup(mgr ctrl.Manager, cfg config.Config, argo *argocache.Cache, pipeline *stages.Pipeline) error {
	keys := pipeline.Keys.(*record.Keys)
	pullCache, err := registrycreds.NewPullSecretCache(mgr, cfg)
	if err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Config: cfg, Recorder: mgr.GetEventRecorder("kokumi-serving"), Now: time.Now,
		Pipeline: pipeline, Records: pipeline.Records, Keys: keys, ArgoCD: argo,
		PullSecrets: &registrycreds.PullSecrets{Client: mgr.GetClient(), Cache: pullCache, APIReader: mgr.GetAPIReader(), Config: cfg}, pullCache: pullCache,
		checked: make(chan event.GenericEvent, checkedQueue)}
	// HTTP checks run in a pool of their own, off the reconcile (internal/verify).
	r.Verifier = &verify.Runner{Jobs: &verify.JobRunner{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: cfg.Namespace},
		HTTP: &verify.HTTPRunner{Client: cfg.Egress().Client(), Workers: cfg.VerifyWorkers, ClusterRequests: cfg.VerifyClusterRequests, Done: r.checkEnded}}
	// Webhooks follow no redirect, whatever --verify-redirects says: the signature would go
	// to another URL than the Environment names.
	hooks := cfg.Egress()
	hooks.Redirects = egress.RedirectsNone
	if r.Notifier, err = notify.Setup(mgr, cfg.Namespace, hooks.Client()); err != nil {
		return err
	}
	// The signing key exists, and its public half is published, from the first start on.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if _, err := keys.Ensure(ctx); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "create the deployment-record signing key; the first record will try again")
		}
		return nil
	})); err != nil {
		return fmt.Errorf("add the signing-key check: %w", err)
	}
	return r.SetupWithManager(mgr)
}

// checkedQueue is how many ends of HTTP checks wait for the Serving controller to take them; one
// more is dropped, and its Serving sees it at its next poll.
const checkedQueue = 1024

// checkEnded tells the Serving controller that an HTTP check of the Serving namespace/name
// ended, without blocking.
func (r *Reconciler) checkEnded(namespace, name string) {
	select {
	case r.checked <- event.GenericEvent{Object: &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}:
	default:
	}
}

// SetupWithManager registers the indexes and watches: a change of a Serving, its Preparation,
// Order, Environment, a Cluster, an AppProject or an Application reaches the Servings it concerns.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1.Order{}, indexOrderEnvironment, func(o client.Object) []string {
		return []string{o.(*v1.Order).Spec.EnvironmentRef.Name}
	}); err != nil {
		return fmt.Errorf("index orders by environment: %w", err)
	}
	if err := idx.IndexField(ctx, &v1.Environment{}, indexEnvironmentProject, func(o client.Object) []string {
		return []string{o.(*v1.Environment).Spec.Project}
	}); err != nil {
		return fmt.Errorf("index environments by project: %w", err)
	}
	if err := idx.IndexField(ctx, &v1.Serving{}, indexServingPreparation, func(o client.Object) []string {
		if p := o.(*v1.Serving).Spec.PreparationName; p != "" {
			return []string{p}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index servings by preparation: %w", err)
	}
	argo := r.ArgoCD
	if argo == nil {
		return errors.New("set up serving controller: no cache of Argo CD's namespace (ArgoCD)")
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&v1.Serving{}).
		Watches(&v1.Preparation{}, handler.EnqueueRequestsFromMapFunc(r.servingsOfPreparation)).
		Watches(&v1.Order{}, &handler.EnqueueRequestForObject{}).
		Watches(&v1.Environment{}, handler.EnqueueRequestsFromMapFunc(r.servingsOfEnvironment)).
		Watches(&v1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.servingsOfCluster), builder.WithPredicates(clusterChangeServingsRead)).
		// A Serving held by a stage looks again when what runs in the stage changes.
		Watches(&v1.Serving{}, stages.DownstreamOf(mgr.GetClient()), builder.WithPredicates(stages.EvidenceChanged)).
		Watches(&v1.Preparation{}, stages.DownstreamOf(mgr.GetClient()), builder.WithPredicates(stages.EvidenceChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Config.Workers(config.ServingConcurrency)}).
		Named("serving").
		Build(r)
	if err != nil {
		return fmt.Errorf("build serving controller: %w", err)
	}
	if r.checked != nil {
		if err := c.Watch(source.Channel(r.checked, &handler.EnqueueRequestForObject{})); err != nil {
			return fmt.Errorf("watch the ends of HTTP checks: %w", err)
		}
	}
	if r.pullCache != nil {
		// A repository Secret changed or deleted by someone else is written again; a rotated
		// registry credential reaches every Serving.
		if err := c.Watch(source.Kind(r.pullCache, &corev1.Secret{}, handler.TypedEnqueueRequestsFromMapFunc(r.servingsOfSecret))); err != nil {
			return fmt.Errorf("watch Argo CD's repository Secrets: %w", err)
		}
	}
	// Beyond the watch, Kokumi's Applications are walked now and then for those whose Serving
	// is gone.
	if err := mgr.Add(manager.RunnableFunc(r.sweeper)); err != nil {
		return fmt.Errorf("add the sweep of orphaned Applications: %w", err)
	}
	// Argo CD may be installed after Kokumi: its kinds are watched from when they are served,
	// and every Serving looks again then.
	argo.OnInstalled(func(context.Context) error { return r.watchArgoCD(c) })
	return nil
}

// Reconcile deploys one Serving.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start, gone := time.Now(), false
	defer func() { r.noteFoldTime(req.NamespacedName, start, gone) }()
	var s v1.Serving
	if err := r.Get(ctx, req.NamespacedName, &s); err != nil {
		if apierrors.IsNotFound(err) {
			gone = true
			kmetrics.ForgetServing(req.Namespace, req.Name)
			r.applied.Forget(req.NamespacedName)
			r.unlisted.Forget(req.NamespacedName)
			r.drifted.Forget(req.NamespacedName)
			// A Serving that is gone leaves no Application behind, whether it went through its
			// finalizer or not (an Application of it that appears, or the start's list of them,
			// brings its key here).
			return ctrl.Result{}, r.sweep(ctx, req.NamespacedName, nil)
		}
		return ctrl.Result{}, err
	}
	if !s.DeletionTimestamp.IsZero() {
		kmetrics.ForgetServing(s.Namespace, s.Name)
		r.applied.Forget(req.NamespacedName)
		r.unlisted.Forget(req.NamespacedName)
		r.drifted.Forget(req.NamespacedName)
		if controllerutil.ContainsFinalizer(&s, ServingFinalizer) {
			if err := r.removeApplications(ctx, &s, "ServingDeleted"); err != nil {
				return ctrl.Result{}, err
			}
			// After the Applications, which read through it.
			if r.PullSecrets != nil {
				if err := r.PullSecrets.Remove(ctx, req.NamespacedName, nil); err != nil {
					return ctrl.Result{}, err
				}
			}
			// Its verification Jobs, in Kokumi's namespace, which no owner reference can reach.
			if r.Verifier != nil && r.Verifier.Jobs != nil {
				if err := r.Verifier.Jobs.Forget(ctx, s.UID); err != nil {
					return ctrl.Result{}, err
				}
			}
			controllerutil.RemoveFinalizer(&s, ServingFinalizer)
			// NotFound: an earlier reconcile removed it already, and the Serving is gone.
			if err := r.Update(ctx, &s); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("remove finalizer of Serving %s: %w", req, err)
			}
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(&s, ServingFinalizer) {
		if err := r.Update(ctx, &s); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to Serving %s: %w", req, err)
		}
	}

	if kept, stale := rollout.Stale(&s); stale {
		// Approvals of another Preparation, or of an earlier attempt of this one, count for
		// nothing: they go, so that none is taken for this attempt's and the list stays short.
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		s.Spec.Approvals = kept
		if err := r.Patch(ctx, &s, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("prune the approvals of other roll-outs of Serving %s: %w", req, err)
		}
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}

	base := s.DeepCopy()
	before := &base.Status
	var deployed []deployment
	res, err := r.deploy(ctx, &s, &deployed)
	if err == nil {
		s.Status.ObservedGeneration = s.Generation
	}
	// The soak clock follows the status just decided: a release's soak starts when it is
	// Deployed, whatever the Ready condition's transition time kept from an earlier release.
	s.Status.TickSoakClock(metav1.NewTime(r.Now().Truncate(time.Second)))
	r.recordTransition(&s, before)
	setServingMetrics(&s)
	// If the cache had not seen the last write yet, the write conflicts and the reconcile runs
	// again on what is there.
	written, uerr := status.Write(ctx, r.Client, &s, base)
	if uerr != nil {
		return ctrl.Result{}, uerr
	}
	if written.Conflict && err == nil {
		return written.Result(), nil
	}
	for i := 0; err == nil && i < len(deployed); i++ {
		// After the status: a registry that is slow or down delays only the record.
		if deployed[i].stopped {
			err = r.recordFailure(ctx, &s, &deployed[i])
			continue
		}
		err = r.recordDeployment(ctx, &s, &deployed[i])
	}
	return res, err
}

// outcome sets the Serving's Ready condition, keeping its transition time when unchanged.
func (r *Reconciler) outcome(s *v1.Serving, status metav1.ConditionStatus, reason, message string) {
	apimeta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
		Type: v1.ConditionReady, Status: status, Reason: reason, Message: text.Truncate(message, 2048),
		ObservedGeneration: s.Generation,
		// Kept when the status does not change. The soak of the stages after a Deployed Serving
		// counts from status.deployedSince instead (ServingStatus.TickSoakClock).
		LastTransitionTime: metav1.NewTime(r.Now().Truncate(time.Second)),
	})
}

// hold reports what holds the Serving back (gate.Verdict): a gate that keeps it from deploying
// at all deletes its Applications, and what runs on the clusters keeps running; one it waits for
// leaves them as they are.
func (r *Reconciler) hold(ctx context.Context, s *v1.Serving, v gate.Verdict) (ctrl.Result, error) {
	if v.Stop {
		if err := r.removeApplications(ctx, s, v.Reason); err != nil {
			return ctrl.Result{}, err
		}
		s.Status.Clusters, s.Status.Targets, s.Status.TargetsOmitted = v1.ClusterCounts{}, nil, 0
		// What the clusters ran stays in status.running until Applications exist again: the
		// workloads keep running, and the collector keeps what they run.
		s.Status.Rollout = rollout.AcrossStop(s.Status.Rollout)
		r.unlisted.Forget(client.ObjectKeyFromObject(s))
		r.drifted.Forget(client.ObjectKeyFromObject(s))
	}
	r.outcome(s, metav1.ConditionFalse, v.Reason, v.Message)
	return ctrl.Result{RequeueAfter: v.RecheckAfter}, nil
}

// target is where a Serving deploys: its Environment's AppProject and Clusters.
type target struct {
	environment string
	project     string
	clusters    []fleet.Cluster
	// rollout is the Environment's spec.rollout; nil deploys to every cluster at once.
	rollout *v1.RolloutPolicy
	// waves holds each cluster's wave of rollout (rollout.WaveOf).
	waves map[string]int
	// pace is the slower pace the Order asks for (spec.rolloutPace).
	pace *v1.RolloutPace
	// env is the Environment (its gates and webhooks); nil for the Environment local Kokumi
	// provides.
	env *v1.Environment
	// labels are the clusters' labels, by name (the cache's maps: read only), for the
	// placeholders of a per-cluster check.
	labels map[string]map[string]string
}

// deployment is a Deployed roll-out, or a wave a roll-out passed, for its deployment record.
type deployment struct {
	prep        *v1.Preparation
	environment string
	healthy     []string
	// wave is the wave passed; empty for the whole Environment.
	wave string
	// evidence is what the record says of the gates.
	evidence rollout.Evidence
	// stopped: no record, but the roll-out of prep halted, rolled back or was aborted, and its
	// failure is signed (dora.go).
	stopped bool
}

func (r *Reconciler) deploy(ctx context.Context, s *v1.Serving, deployed *[]deployment) (_ ctrl.Result, err error) {
	in, err := r.read(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	verdict := gate.Serving(in.facts)
	if verdict.TargetKnown {
		// Before any gate that waits: a cluster that left (a Cluster being deleted among them)
		// loses its Application whatever else holds the Serving, so that nothing waits on it.
		// A failed delete is retried, and keeps nothing else from going on.
		departErr := r.removeDepartures(ctx, s, in.target)
		defer func() { err = errors.Join(err, departErr) }()
	}
	if verdict.Reason != "" {
		return r.hold(ctx, s, verdict)
	}
	order, prep, tgt := in.order, in.prep, in.target
	// At the bundled registry's current address, should it have moved since the Preparation was made.
	req := rollout.Request(fleet.Request{
		ServingNamespace: s.Namespace, ServingName: s.Name, ServingUID: s.UID, ArgoCDNamespace: r.Config.ArgoCDNamespace,
		Project: in.project, Clusters: tgt.clusters, Retry: r.Config.SyncRetry,
	}, r.Config.BundledRegistry, prep)
	if req.Revision != s.Status.Revision && r.Pipeline != nil {
		// A Preparation not deployed yet passes its Environment's stages first, however it
		// was promoted; what runs keeps running meanwhile.
		stages, err := r.Pipeline.Check(ctx, s.Namespace, order.Spec.EnvironmentRef.Name, prep)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !stages.Allowed {
			return r.hold(ctx, s, gate.AwaitingStage(prep.Name, order.Spec.EnvironmentRef.Name, stages.Message, stages.RecheckAfter))
		}
	}
	if r.PullSecrets != nil && r.PullSecrets.Serves(req.RepoURL) {
		// Before the Applications, which read through it.
		if err := r.PullSecrets.Keep(ctx, s, req.RepoURL, in.project.Name); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.rollOut(ctx, s, prep, deployed, req, tgt)
}

// rollOut writes the Applications the fleet plan asks for, removes those of clusters that
// left, and folds what Argo CD reports into the status. With the Environment's rollout policy,
// the plan of its waves (internal/rollout) says which clusters are left as they are.
func (r *Reconciler) rollOut(ctx context.Context, s *v1.Serving, prep *v1.Preparation, deployed *[]deployment, req fleet.Request, tgt target) (ctrl.Result, error) {
	environment := tgt.environment
	ours, err := r.applications(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	key := client.ObjectKeyFromObject(s)
	byName := make(map[string]*argocd.Application, len(ours))
	for i := range ours {
		byName[ours[i].Name] = &ours[i]
	}
	applied := r.applied.Round(key, len(req.Clusters))
	defer applied.Done()

	now := metav1.NewTime(r.Now().Truncate(time.Second))
	// What the status lists, and the clusters past its cap this process remembers: the
	// deadline and each cluster's time reach every cluster.
	previous := r.unlisted.With(key, s.Status.Targets)
	var listErr error
	in, err := r.planInputs(ctx, s, prep, req, tgt, byName, applied, previous, now, &listErr)
	if err != nil {
		return ctrl.Result{}, err
	}
	out, err := rollout.Plan(in)
	if err = errors.Join(listErr, err); err != nil {
		return ctrl.Result{}, err
	}
	plan := out.Course
	if plan != nil {
		if err := r.verifyGate(ctx, s, prep, tgt, plan); err != nil {
			return ctrl.Result{}, err
		}
	}

	// Write (each write's result apart), fold: the plan is not edited by the writes.
	entry := s.Status.DeepCopy()
	s.Status.Rollout = nil
	if plan != nil {
		s.Status.Rollout = &plan.Status
		// After the status is set: the webhooks are told where the roll-out stands now.
		r.rolloutEvents(s, tgt.env, entry.Rollout, &plan.Status)
	}
	slice := r.startSlice(s, out.Decisions, byName)
	writeStart := time.Now()
	results, writeErr := r.apply(ctx, s, out.Decisions, byName, slice)
	r.writing.Store(key, time.Since(writeStart))
	sum := rollout.Fold(in, out, results, environment)
	req = out.Request
	r.unlisted.Remember(key, sum.Unlisted)
	r.driftEvents(s, tgt.env, r.drifted.Entered(key, sum.DriftedClusters, previous))
	s.Status.Revision = req.Revision
	s.Status.Clusters, s.Status.Targets, s.Status.TargetsOmitted = sum.Clusters, sum.Targets, sum.Omitted
	s.Status.Running, s.Status.RunningOmitted = sum.Running, sum.RunningOmitted
	r.outcome(s, sum.Ready.Status, sum.Ready.Reason, sum.Ready.Message)
	guardAfter, guardErr := r.guard(ctx, s, prep, tgt, plan, sum.HealthyClusters)
	if guardAfter > 0 && (sum.RecheckAfter == 0 || guardAfter < sum.RecheckAfter) {
		sum.RecheckAfter = guardAfter
	}
	if sum.Ready.Reason == v1.ReasonDeployed {
		d := deployment{prep: prep, environment: environment, healthy: sum.HealthyClusters}
		if plan != nil {
			d.evidence = plan.Evidence
		}
		*deployed = append(*deployed, d)
	}
	if plan != nil && failed(&plan.Status) {
		*deployed = append(*deployed, deployment{prep: prep, environment: environment, stopped: true})
	}
	if plan != nil {
		for _, w := range plan.Passed {
			*deployed = append(*deployed, deployment{prep: prep, environment: environment, healthy: w.Healthy, wave: w.Name, evidence: w.Evidence})
		}
	}
	more := r.sliceOutcome(s, slice, req.Preparation, entry)
	if writeErr != nil {
		if slice.Succeeded() > 0 {
			// Some writes went through: the failed ones are retried soon, and the backoff that
			// grows with each failed reconcile is kept for writes that fail alone, again and again.
			ctrl.LoggerFrom(ctx).Info("some Application writes failed; retrying them", "error", writeErr.Error())
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		// Folded into the status above; returned so that the write is retried with backoff.
		return ctrl.Result{}, writeErr
	}
	if guardErr != nil {
		return ctrl.Result{}, guardErr // the status folded above is written all the same
	}
	if more {
		// The next slice of the writes, at once: the worker was held for one slice only.
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	if slice.Pending() {
		// Written before and not in the cache yet: its watch event comes, or this.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if sum.OptIn {
		return ctrl.Result{RequeueAfter: gate.RecheckArgoCD}, nil
	}
	if sum.RecheckAfter > 0 {
		// A cluster still Progressing fails at its deadline even if Argo CD reports nothing new.
		return ctrl.Result{RequeueAfter: sum.RecheckAfter + time.Second}, nil
	}
	return ctrl.Result{}, nil
}

// setServingMetrics sets the Serving's series from the status it is about to write: its
// cluster counts, Ready, and whether it waits for a promotion stage.
func setServingMetrics(s *v1.Serving) {
	c := s.Status.Clusters
	ready := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
	kmetrics.SetServing(s.Namespace, s.Name,
		kmetrics.ClusterCounts{Selected: c.Selected, Healthy: c.Healthy, Progressing: c.Progressing, Degraded: c.Degraded, Held: c.Held, Drifted: c.Drifted},
		ready != nil && ready.Status == metav1.ConditionTrue, ready != nil && ready.Reason == v1.ReasonAwaitingStage)
}

// recordTransition records an event when the Ready reason changes to Deployed or a failure.
func (r *Reconciler) recordTransition(s *v1.Serving, before *v1.ServingStatus) {
	now := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
	if now == nil {
		return
	}
	if was := apimeta.FindStatusCondition(before.Conditions, v1.ConditionReady); was != nil && was.Reason == now.Reason {
		return
	}
	switch now.Reason {
	case v1.ReasonDeployed:
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, now.Reason, "Deploy", "%s", now.Message)
	case v1.ReasonProgressing, v1.ReasonNoPreparation, v1.ReasonDrifted:
		// Drifted clusters are told of as they drift (driftEvents).
	default:
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, now.Reason, "Deploy", "%s", now.Message)
	}
}
