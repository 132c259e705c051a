// Package clusters holds the Cluster reconciler and its prober: it probes each member cluster's
// server, keeps its Argo CD cluster Secret, and holds a deleted Cluster until Argo CD has let go.
package clusters

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller/registrycreds"
	"github.com/kokumi-dev/kokumi/internal/controller/status"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/text"
)

const (
	// Finalizer is cluster.Finalizer, which this reconciler adds and removes.
	Finalizer = cluster.Finalizer

	// clusterCredentialsIndex indexes Clusters by the name of their credentials Secret.
	clusterCredentialsIndex = "kokumi.spec.credentialsRef.name"

	// clusterServerIndex indexes Clusters by their server, normalized as Argo CD compares them.
	clusterServerIndex = "kokumi.spec.server"

	// clusterApplicationsWait is how often a Cluster being deleted checks whether Argo CD's
	// Applications for it are gone.
	clusterApplicationsWait = 5 * time.Second

	// clusterMaxVersion is the length status.version allows.
	clusterMaxVersion = 64
)

// Reconciler keeps each Cluster's Argo CD cluster Secret in step with its credentials,
// has its Prober probe its server on a period with jitter, and reports Ready. A reconcile never
// waits on a member's server: it hands the server and credentials to the Prober and writes the
// result of the Prober's last probe, which enqueues the Cluster when a result changes what the
// status says.
type Reconciler struct {
	// Client reads Clusters from the manager's cache and writes.
	Client client.Client
	// Secrets reads the credentials Secrets in Kokumi's namespace and Kokumi's Argo CD cluster
	// Secrets, from a cache limited to those two namespaces.
	Secrets client.Reader
	// APIReader reads without a cache: Argo CD's Applications while a Cluster is deleted.
	APIReader client.Reader
	// Recorder records events on transitions.
	Recorder events.EventRecorder
	// Config is Kokumi's configuration: namespaces and the probe period.
	Config config.Config
	// Prober probes the Clusters' servers; its Source enqueues the Clusters whose result changed.
	Prober *Prober

	mu      sync.Mutex
	waiting map[string]bool // Clusters whose deletion waits for Applications
}

// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=clusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=clusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=clusters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=argocd,resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=argoproj.io,namespace=argocd,resources=applications,verbs=get;list;watch

// Setup registers the Cluster reconciler with the manager.
func Setup(mgr ctrl.Manager, cfg config.Config) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1.Cluster{}, clusterCredentialsIndex,
		func(o client.Object) []string { return []string{o.(*v1.Cluster).Spec.CredentialsRef.Name} }); err != nil {
		return fmt.Errorf("index clusters by credentials: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1.Cluster{}, clusterServerIndex,
		func(o client.Object) []string { return []string{argocd.NormalizeServer(o.(*v1.Cluster).Spec.Server)} }); err != nil {
		return fmt.Errorf("index clusters by server: %w", err)
	}
	secrets, err := newClusterSecretCache(mgr, cfg)
	if err != nil {
		return err
	}
	prober := NewProber(cfg.ProbePeriod, cfg.ProbeWorkers, cfg.ProbeKeepAlive)
	if err := mgr.Add(prober); err != nil {
		return fmt.Errorf("add the cluster prober: %w", err)
	}
	r := &Reconciler{
		Client:    mgr.GetClient(),
		Secrets:   secrets,
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("kokumi-cluster"),
		Config:    cfg,
		Prober:    prober,
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("cluster").
		For(&v1.Cluster{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, clusterDeletionStarted()))).
		WatchesRawSource(source.Kind(secrets, &corev1.Secret{}, handler.TypedEnqueueRequestsFromMapFunc(r.clustersForSecret))).
		Watches(&v1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clustersOnSameServer),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, clusterDeletionStarted()))).
		// A probe result that changes what a Cluster's status says.
		WatchesRawSource(prober.Source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: cfg.Workers(config.ClusterConcurrency)}).
		// A write from a cache behind the reconciler's own last write (the finalizer, the Argo
		// CD cluster Secret) is tried again quietly, as a status write is.
		Complete(status.QuietConflicts(r))
	if err != nil {
		return fmt.Errorf("set up the cluster controller: %w", err)
	}
	return nil
}

// newClusterSecretCache caches the Secrets of Kokumi's namespace, and Kokumi's cluster Secrets in
// Argo CD's namespace, and nothing else: the controller reads no other Secret.
func newClusterSecretCache(mgr ctrl.Manager, cfg config.Config) (cache.Cache, error) {
	namespaces := map[string]cache.Config{
		cfg.ArgoCDNamespace: {LabelSelector: labels.SelectorFromSet(labels.Set{
			argocd.LabelManagedBy:  argocd.ManagedByKokumi,
			argocd.LabelSecretType: argocd.SecretTypeCluster,
		})},
		cfg.Namespace: {}, // the credentials; wins when both namespaces are the same
	}
	return registrycreds.NewSecretCache(mgr, namespaces, fmt.Sprintf("the Secrets of namespaces %q and %q", cfg.Namespace, cfg.ArgoCDNamespace))
}

// clusterDeletionStarted passes the update that sets an object's deletionTimestamp.
func clusterDeletionStarted() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// clustersForSecret maps a credentials Secret to the Clusters that use it, and an Argo CD
// cluster Secret of Kokumi's to its Cluster.
func (r *Reconciler) clustersForSecret(ctx context.Context, s *corev1.Secret) []reconcile.Request {
	var reqs []reconcile.Request
	if s.Namespace == r.Config.ArgoCDNamespace && s.Labels[argocd.LabelManagedBy] == argocd.ManagedByKokumi {
		if name := s.Labels[argocd.LabelCluster]; name != "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
	}
	if s.Namespace == r.Config.Namespace {
		var list v1.ClusterList
		if err := r.Client.List(ctx, &list, client.MatchingFields{clusterCredentialsIndex: s.Name}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "list the Clusters of a credentials Secret", "secret", s.Name)
			return reqs
		}
		for _, c := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: c.Name}})
		}
	}
	return reqs
}

// Reconcile brings one Cluster's Argo CD cluster Secret and status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var c v1.Cluster
	if err := r.Client.Get(ctx, req.NamespacedName, &c); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			kmetrics.ForgetCluster(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get cluster %q: %w", req.Name, err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &c)
	}
	if controllerutil.AddFinalizer(&c, Finalizer) {
		if err := r.Client.Update(ctx, &c); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to cluster %q: %w", c.Name, err)
		}
	}
	before := c.Status.DeepCopy()

	// The server's owner first, whatever this Cluster's credentials: a Cluster that does not own
	// its server never keeps an Argo CD cluster Secret.
	if owner, err := r.serverOwner(ctx, &c); err != nil {
		return ctrl.Result{}, err
	} else if owner != c.Name {
		// Argo CD keeps one cluster Secret per server: a second identity would be picked at
		// random. The owner (fleet.ServerOwners, the rule a Serving deploys by too) keeps the
		// server; this one gets no Secret.
		if err := r.deleteArgoCDSecret(ctx, &c); err != nil {
			return ctrl.Result{}, err
		}
		r.forget(c.Name)
		setClusterReady(&c, metav1.ConditionFalse, v1.ReasonServerConflict, fmt.Sprintf(
			"Cluster %s connects to the same server %s (as Argo CD compares servers) and sorts first by name, so it alone deploys there: Argo CD keeps one identity per server, and this Cluster gets none. Delete the Cluster you do not want, or fix the spec.server of the one that names the wrong server.",
			owner, argocd.NormalizeServer(c.Spec.Server)))
		return r.writeStatus(ctx, &c, before)
	}
	creds, reason, message, err := r.credentials(ctx, &c)
	if err != nil {
		return ctrl.Result{}, err
	}
	if reason != "" {
		// Bad input: the Secret watch brings the fix, no retry before.
		r.forget(c.Name)
		setClusterReady(&c, metav1.ConditionFalse, reason, message)
		return r.writeStatus(ctx, &c, before)
	}
	if err := r.syncArgoCDSecret(ctx, &c, creds); err != nil {
		return ctrl.Result{}, err
	}

	return r.probe(ctx, &c, creds, before)
}

// probe has the Prober probe the Cluster's server with creds (at once when they or the server
// are new), and writes what its last probe found, if that changes the status: Ready turns False
// only after failures in a row. It never waits on the server: the Prober enqueues the Cluster
// when a probe finds something to write.
func (r *Reconciler) probe(ctx context.Context, c *v1.Cluster, creds cluster.Credentials, before *v1.ClusterStatus) (ctrl.Result, error) {
	res, ok := r.Prober.Track(c.Name, c.Generation, c.Spec.Server, creds, probeStateOf(c))
	if !ok {
		return ctrl.Result{}, nil // not probed with these credentials yet
	}
	if !res.Connected() && !cluster.ReportFailure(cluster.IsReady(c), res.FailuresInARow) {
		return ctrl.Result{}, nil // the Prober retries first
	}
	status := probeStatus(res.Result)
	version := probeVersion(res.Result, c.Status.Version)
	if !probeChanged(c, status, res.Reason, version) {
		// A quiet fleet writes nothing: the probe found what the status already says.
		kmetrics.SetClusterReady(c.Name, cluster.IsReady(c))
		return ctrl.Result{}, nil
	}
	at := res.At
	c.Status.LastProbeTime = &at
	c.Status.Version = version
	setClusterReady(c, status, res.Reason, res.Message)
	result, err := r.writeStatus(ctx, c, before)
	if err != nil || result.RequeueAfter > 0 {
		return result, err // not written: the prober learns nothing yet
	}
	r.Prober.Known(c.Name, probeStateOf(c))
	return ctrl.Result{}, nil
}

// probeStateOf is what the Cluster's status says of its probes.
func probeStateOf(c *v1.Cluster) probeState {
	cond := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady)
	if cond == nil {
		return probeState{}
	}
	return probeState{status: cond.Status, reason: cond.Reason, version: c.Status.Version,
		fresh: c.Status.LastProbeTime != nil && c.Status.ObservedGeneration == c.Generation}
}

// credentials reads and parses the Cluster's credentials Secret. A reason is returned when the
// Secret is missing or unusable; an error only for a failure worth retrying.
func (r *Reconciler) credentials(ctx context.Context, c *v1.Cluster) (creds cluster.Credentials, reason, message string, err error) {
	ref := c.Spec.CredentialsRef.Name
	var s corev1.Secret
	if err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: r.Config.Namespace, Name: ref}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return creds, v1.ReasonCredentialsNotFound, fmt.Sprintf(
				"spec.credentialsRef: Secret %q not found in namespace %q: create it with a kubeconfig under %q, "+
					"or a bearer token under %q and the server's CA under %q",
				ref, r.Config.Namespace, cluster.KeyKubeconfig, cluster.KeyToken, cluster.KeyCA), nil
		}
		return creds, "", "", fmt.Errorf("get credentials Secret %s/%s of cluster %q: %w", r.Config.Namespace, ref, c.Name, err)
	}
	creds, err = cluster.ParseSecret(s.Data)
	if err != nil {
		return creds, v1.ReasonInvalidCredentials, fmt.Sprintf("spec.credentialsRef: Secret %s/%s %v", r.Config.Namespace, ref, err), nil
	}
	return creds, "", "", nil
}

// syncArgoCDSecret creates or updates the Cluster's Argo CD cluster Secret, writing only
// when something changed.
func (r *Reconciler) syncArgoCDSecret(ctx context.Context, c *v1.Cluster, creds cluster.Credentials) error {
	want := cluster.ArgoCDSecret(r.Config.ArgoCDNamespace, c.Name, c.Spec.Server, creds)
	written, err := argocd.KeepSecret(ctx, r.Client, r.Secrets, r.APIReader, want, "Argo CD cluster Secret")
	switch written {
	case argocd.Created:
		ctrl.LoggerFrom(ctx).Info("created the Argo CD cluster Secret", "secret", client.ObjectKeyFromObject(want).String())
	case argocd.Updated:
		ctrl.LoggerFrom(ctx).Info("updated the Argo CD cluster Secret", "secret", client.ObjectKeyFromObject(want).String())
	}
	return err
}

// deleteArgoCDSecret deletes the Cluster's Argo CD cluster Secret, if there is one.
func (r *Reconciler) deleteArgoCDSecret(ctx context.Context, c *v1.Cluster) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Config.ArgoCDNamespace, Name: cluster.SecretName(c.Name)}}
	if err := r.Client.Delete(ctx, secret); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Argo CD cluster Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return nil
}

// serverOwner returns the name of the Cluster that owns c's server, by the rule of
// fleet.ServerOwners (the first by name of the Clusters of that server, as Argo CD compares
// servers), among the Clusters not being deleted: c's own name when c owns it.
func (r *Reconciler) serverOwner(ctx context.Context, c *v1.Cluster) (string, error) {
	var list v1.ClusterList
	if err := r.Client.List(ctx, &list, client.MatchingFields{clusterServerIndex: argocd.NormalizeServer(c.Spec.Server)}); err != nil {
		return "", fmt.Errorf("list the Clusters of server %s: %w", c.Spec.Server, err)
	}
	same := []fleet.Cluster{{Name: c.Name, Server: c.Spec.Server}}
	for _, o := range list.Items {
		if o.Name != c.Name && o.DeletionTimestamp.IsZero() {
			same = append(same, fleet.Cluster{Name: o.Name, Server: o.Spec.Server})
		}
	}
	return fleet.ServerOwners(same)[c.Name], nil
}

// clustersOnSameServer maps a Cluster to the other Clusters of its server (of its old and its
// new server, when it moves): one arriving may take the server from them, as the first by name,
// and one going, or moving to another server, may hand it to them.
func (r *Reconciler) clustersOnSameServer(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1.ClusterList
	if err := r.Client.List(ctx, &list, client.MatchingFields{clusterServerIndex: argocd.NormalizeServer(o.(*v1.Cluster).Spec.Server)}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list the Clusters of a server")
		return nil
	}
	var reqs []reconcile.Request
	for _, c := range list.Items {
		if c.Name != o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: c.Name}})
		}
	}
	return reqs
}

// finalize deletes the Argo CD cluster Secret once no Argo CD Application for the Cluster
// remains, then lets the Cluster go.
func (r *Reconciler) finalize(ctx context.Context, c *v1.Cluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(c, Finalizer) {
		r.forget(c.Name)
		kmetrics.ForgetCluster(c.Name)
		return ctrl.Result{}, nil
	}
	remaining, err := r.remainingApplications(ctx, c.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if remaining > 0 {
		if since, gone := r.unreachableFor(c); gone {
			// Argo CD cannot delete anything on a server it cannot reach: waiting would be forever.
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "StoppedWaitingForApplications", "Delete",
				"the server has been Unreachable since %s, longer than %s: %d Argo CD Applications still name this cluster and Argo CD cannot delete anything there; the Cluster and its Argo CD cluster Secret go, and what runs there keeps running",
				since.UTC().Format(time.RFC3339), r.Config.UnreachableClusterDeletion, remaining)
		} else {
			if r.startWaiting(c.Name) {
				r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "WaitingForApplications", "Delete", "%s",
					fmt.Sprintf("%d Argo CD Applications still deploy to this cluster; its Argo CD cluster Secret stays until they are gone", remaining))
			}
			ctrl.LoggerFrom(ctx).Info("waiting for Argo CD Applications of the cluster to be deleted", "applications", remaining)
			// The probe goes on while the Cluster waits: Ready says whether Argo CD can still
			// delete there.
			if creds, reason, _, err := r.credentials(ctx, c); err == nil && reason == "" {
				if _, err := r.probe(ctx, c, creds, c.Status.DeepCopy()); err != nil {
					return ctrl.Result{}, err
				}
			}
			return ctrl.Result{RequeueAfter: clusterApplicationsWait}, nil
		}
	}
	if err := r.deleteArgoCDSecret(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(c, Finalizer)
	if err := r.Client.Update(ctx, c); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("remove finalizer from cluster %q: %w", c.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("deleted the Argo CD cluster Secret; the Cluster goes", "secret", cluster.SecretName(c.Name))
	r.forget(c.Name)
	kmetrics.ForgetCluster(c.Name)
	return ctrl.Result{}, nil
}

// remainingApplications counts Argo CD's Applications labelled for the Cluster. Without Argo
// CD's Application kind, none can remain.
func (r *Reconciler) remainingApplications(ctx context.Context, name string) (int, error) {
	var apps metav1.PartialObjectMetadataList
	apps.SetGroupVersionKind(argocd.ApplicationListGVK)
	err := r.APIReader.List(ctx, &apps, client.InNamespace(r.Config.ArgoCDNamespace),
		client.MatchingLabels{argocd.LabelCluster: name})
	if meta.IsNoMatchError(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list Argo CD Applications of cluster %q: %w", name, err)
	}
	return len(apps.Items), nil
}

// writeStatus writes the Cluster's status when it changed, and records an event when Ready
// changed.
func (r *Reconciler) writeStatus(ctx context.Context, c *v1.Cluster, before *v1.ClusterStatus) (ctrl.Result, error) {
	c.Status.ObservedGeneration = c.Generation
	kmetrics.SetClusterReady(c.Name, cluster.IsReady(c))
	base := c.DeepCopy()
	base.Status = *before
	written, err := status.Write(ctx, r.Client, c, base)
	if err != nil {
		return ctrl.Result{}, err
	}
	if written.Changed {
		status.ReadyTransitionEvent(r.Recorder, c, before.Conditions, c.Status.Conditions)
	}
	return written.Result(), nil
}

func (r *Reconciler) startWaiting(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting == nil {
		r.waiting = map[string]bool{}
	}
	first := !r.waiting[name]
	r.waiting[name] = true
	return first
}

// probeChanged says whether a probe's result changes what the Cluster's status says: its Ready
// status or reason, its version, or a status never written for this generation. A new
// message alone (another error text of the same failure) is not written.
func probeChanged(c *v1.Cluster, status metav1.ConditionStatus, reason, version string) bool {
	cond := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady)
	return cond == nil || cond.Status != status || cond.Reason != reason || c.Status.Version != version ||
		c.Status.LastProbeTime == nil || c.Status.ObservedGeneration != c.Generation
}

// unreachableFor says since when the Cluster's server has been Unreachable, and whether that
// is longer than Config.UnreachableClusterDeletion allows a deletion to wait.
func (r *Reconciler) unreachableFor(c *v1.Cluster) (time.Time, bool) {
	cond := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady)
	if r.Config.UnreachableClusterDeletion <= 0 || cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1.ReasonUnreachable {
		return time.Time{}, false
	}
	return cond.LastTransitionTime.Time, time.Since(cond.LastTransitionTime.Time) >= r.Config.UnreachableClusterDeletion
}

// forget stops probing the Cluster and drops what the reconciler remembers of it.
func (r *Reconciler) forget(name string) {
	r.Prober.Forget(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiting, name)
}

// setClusterReady sets the Ready condition of a Cluster.
func setClusterReady(c *v1.Cluster, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type:               v1.ConditionReady,
		Status:             status,
		Reason:             reason,
		Message:            text.Truncate(message, text.MaxMessage),
		ObservedGeneration: c.Generation,
	})
}
