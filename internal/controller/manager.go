// Package controller holds Kokumi's reconcilers, one per kind, and the manager that runs them.
// Reconcilers stay thin: they read, call the pure packages, and write status.
package controller

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	deliveryv1alpha1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// Options configures the controller manager.
type Options struct {
	// MetricsAddr serves Prometheus metrics ("0" turns them off).
	MetricsAddr string
	// MetricsSecure serves the metrics over HTTPS (a self-signed certificate) to clients the
	// API server authenticates (TokenReview) and authorizes to get the non-resource URL
	// /metrics (SubjectAccessReview), such as those bound to the ClusterRole
	// kokumi-metrics-reader. False serves plain HTTP to anyone who reaches the port.
	MetricsSecure bool
	// ProbeAddr serves /healthz and /readyz.
	ProbeAddr string
	// PprofAddr serves Go's profiles at /debug/pprof/ ("" or "0": off).
	PprofAddr string
	// LeaderElection makes only one replica reconcile at a time.
	LeaderElection bool
	// LeaderElectionNamespace holds the lease; empty means the namespace Kokumi runs in.
	LeaderElectionNamespace string
	// CacheSyncTimeout is how long a controller waits for its caches to list what they watch
	// before the manager gives up and exits; zero is DefaultCacheSyncTimeout. A hub with
	// 100,000 Applications takes minutes to list on a small API server.
	CacheSyncTimeout time.Duration

	// Config is what the reconcilers need to know of Kokumi's installation.
	Config Config

	// Also sets up more runnables after the reconcilers, such as the API server in the same
	// process (`kokumi dev` does that).
	Also []Setup
}

// Config is the configuration of Kokumi itself that reconcilers read.
type Config struct {
	// Namespace is Kokumi's own namespace: Cluster credentials live there.
	Namespace string
	// ArgoCDNamespace is where Argo CD runs, its Applications and cluster Secrets live.
	ArgoCDNamespace string
	// LocalProject is the AppProject of the Environment local; empty means local does not exist.
	// It is never Argo CD's default project (see CheckLocalProject).
	LocalProject string
	// BundledRegistry is the host[:port] of the bundled registry, as Argo CD and the cluster
	// Kokumi runs in reach it.
	BundledRegistry string
	// ProbePeriod is how often each Cluster's server is probed.
	ProbePeriod time.Duration
	// SyncRetry is how Argo CD retries a failed sync of Kokumi's Applications.
	SyncRetry argocd.SyncRetry
	// ProgressDeadline is how long a cluster may stay Progressing before it fails the
	// deployment (ProgressDeadlineExceeded); 0 waits forever.
	ProgressDeadline time.Duration
	// ApplicationWriters is how many Applications one Serving writes at a time.
	ApplicationWriters int
	// ApplicationWriteSlice is how many Application writes one reconcile of a Serving makes at
	// most (it also stops after about 10 s) before it writes its progress and runs again, so that
	// a large roll-out holds no worker for minutes; 0 means 1,000.
	ApplicationWriteSlice int
	// ProbeWorkers is how many Cluster probes run at a time, apart from the reconcile workers;
	// 0 means 32.
	ProbeWorkers int
	// ProbeKeepAlive keeps each Cluster's probe connection open from probe to probe (no TLS
	// handshake after the first, about 60 KB held per Cluster); false closes it after each probe.
	ProbeKeepAlive bool
	// UnreachableClusterDeletion is how long a Cluster being deleted waits for the Argo CD
	// Applications that still deploy to it once its server is Unreachable: Argo CD cannot delete
	// anything there, so Kokumi lets the Cluster go; 0 waits forever.
	UnreachableClusterDeletion time.Duration
	// PreparationHistory is how many of its newest Preparations an Order keeps; older ones,
	// except those a Serving names or runs and the Order's latest, are deleted with their
	// artifacts. 0 keeps every Preparation.
	PreparationHistory int
	// RenderBudgets bound what one render may pull, decompress and render, so that a large or
	// hostile source fails its Order (BudgetExceeded) instead of the controller; zero fields
	// mean their defaults.
	RenderBudgets preparation.Budgets
	// Shard is the share of the namespaced delivery kinds (Orders, Servings, Preparations,
	// Products) this replica reconciles, by their label LabelShard: AllShards (the zero value)
	// every one, MainShard those without the label, any other value those labelled with it.
	// Only AllShards and MainShard do the shared work; each shard has its own lease, field
	// manager (FieldManager) and cache of Argo CD's Applications (its own only).
	Shard string
}

// DefaultConfig returns the configuration used when no flag says otherwise.
func DefaultConfig() Config {
	return Config{
		Namespace:       "kokumi-system",
		ArgoCDNamespace: argocd.DefaultNamespace,
		LocalProject:    "",
		BundledRegistry: "kokumi-registry.kokumi-system.svc:5000",
		ProbePeriod:     30 * time.Second,
		SyncRetry:       argocd.DefaultSyncRetry,
		// Argo CD's retries (about 2.5 minutes with the defaults) end well before it.
		ProgressDeadline:           10 * time.Minute,
		ApplicationWriters:         16,
		ApplicationWriteSlice:      1000,
		ProbeWorkers:               32,
		ProbeKeepAlive:             true,
		UnreachableClusterDeletion: 10 * time.Minute,
		PreparationHistory:         10,
		RenderBudgets:              preparation.DefaultBudgets(),
	}
}

// CheckLocalProject refuses Argo CD's default AppProject for the Environment local: it permits
// every destination and every cluster-scoped kind, and Argo CD does not check sourceNamespaces
// for Applications in its own namespace, where Kokumi writes them; so any namespace editor could
// deploy a ClusterRoleBinding to the cluster that holds every member's credentials.
func CheckLocalProject(project string) error {
	if project == "default" {
		return errors.New("--local-project=default is refused: Argo CD's default AppProject permits every destination and cluster-scoped kind on the cluster Kokumi runs in; create a dedicated AppProject for the Environment local (see docs/the-environment-local.md) and name it, or leave --local-project empty to turn local off")
	}
	return nil
}

// Setup registers one reconciler with a manager.
type Setup func(ctrl.Manager, Config) error

// setups lists every reconciler's setup; each reconciler adds itself here.
var setups []func(ctrl.Manager, Config) error

// The controller's own role: leader election and events. Each reconciler adds its markers.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=kokumi-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The secure metrics endpoint asks the API server who a scraper is and whether it may read /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// NewScheme returns a scheme with the built-in kinds, Kokumi's, and Argo CD's Application as
// Kokumi reads it (argocd.Application).
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register built-in kinds: %w", err)
	}
	if err := argocd.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("add Argo CD's Application to scheme: %w", err)
	}
	if err := deliveryv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register Kokumi kinds: %w", err)
	}
	return s, nil
}

// cacheOptions keeps the cache of ConfigMaps to Kokumi's namespace. Argo CD's objects have a
// cache of their own (ArgoCDOf), so that Kokumi starts before Argo CD is installed.
func cacheOptions(c Config) cache.Options {
	// The public keys of deployment records live in Kokumi's own namespace; no other
	// ConfigMap is read.
	inKokumi := cache.ByObject{Namespaces: map[string]cache.Config{c.Namespace: {}}}
	// A shard caches only its own Orders, Servings, Preparations and Products.
	return shardCacheOptions(cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: inKokumi}}, c.Shard)
}

// NewManager builds a manager with the scheme registered, health checks, metrics and every
// reconciler set up; or, when only is given, just those reconcilers (tests use that). It tries
// again, up to managerAttempts times, when that fails.
func NewManager(cfg *rest.Config, opts Options, only ...Setup) (ctrl.Manager, error) {
	if err := CheckLocalProject(opts.Config.LocalProject); err != nil {
		return nil, err
	}
	if err := CheckShard(opts.Config.Shard); err != nil {
		return nil, err
	}
	// Building a manager reads the API server's discovery: one failed request (an API server
	// restarting, a timeout) would otherwise end the process.
	wait := time.Second
	for attempt := 1; ; attempt++ {
		mgr, err := newManager(cfg, opts, only...)
		if err == nil {
			return mgr, nil
		}
		if attempt == managerAttempts {
			return nil, fmt.Errorf("%w (after %d attempts)", err, attempt)
		}
		ctrl.Log.Info("could not set up the controller manager; trying again", "error", err.Error(), "in", wait.String())
		time.Sleep(wait)
		wait *= 2
	}
}

// DefaultCacheSyncTimeout is how long a controller waits for its caches by default: ten
// minutes, not controller-runtime's two, which a large hub's first list can take longer than.
const DefaultCacheSyncTimeout = 10 * time.Minute

func cacheSyncTimeout(opts Options) time.Duration {
	if opts.CacheSyncTimeout > 0 {
		return opts.CacheSyncTimeout
	}
	return DefaultCacheSyncTimeout
}

// managerAttempts is how many times NewManager tries; the waits between double from a second
// (15 s in all).
const managerAttempts = 5

func newManager(cfg *rest.Config, opts Options, only ...Setup) (ctrl.Manager, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	// Each shard writes under a name of its own, so that managedFields say which one wrote what.
	if opts.Config.Shard != AllShards || cfg.UserAgent == "" {
		cfg = shardConfig(cfg, opts.Config.Shard)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOptions(opts.Config),
		Metrics:                 metricsOptions(opts),
		HealthProbeBindAddress:  opts.ProbeAddr,
		PprofBindAddress:        opts.PprofAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        leaderElectionID(opts.Config.Shard),
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// A named shard's controllers bear the main shard's names: both may run in one process
		// (tests do), and their metrics are told apart by the process that serves them.
		Controller: config.Controller{SkipNameValidation: ptr(namedShard(opts.Config.Shard)), CacheSyncTimeout: cacheSyncTimeout(opts)},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add ready check: %w", err)
	}
	all := only
	switch {
	case len(all) > 0:
	case sharedWork(opts.Config.Shard):
		for _, s := range setups {
			all = append(all, s)
		}
	default:
		// A named shard leaves Clusters, Environments, cluster Secrets and the registry's
		// credentials to the main shard.
		all = append(all, shardedSetups...)
	}
	logShard(opts.Config.Shard)
	for _, setup := range append(all, opts.Also...) {
		if err := setup(mgr, opts.Config); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// metricsOptions serves the metrics at opts.MetricsAddr: over HTTPS behind the API server's
// authentication and authorization when opts.MetricsSecure, else over plain HTTP.
func metricsOptions(opts Options) metricsserver.Options {
	o := metricsserver.Options{BindAddress: opts.MetricsAddr}
	if !opts.MetricsSecure {
		return o
	}
	o.SecureServing = true
	// No certificate in CertDir: controller-runtime makes a self-signed one at start. A
	// ServiceMonitor then skips verification (config/prometheus), or mounts a certificate there.
	o.FilterProvider = filters.WithAuthenticationAndAuthorization
	// HTTP/1.1 only: HTTP/2's stream handling has been the door of denial-of-service attacks
	// (CVE-2023-44487, CVE-2023-39325), and a scrape gains nothing from it.
	o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return o
}

// statusPatch is a merge patch from base that applies only to the resourceVersion base was read
// at. A merge patch leaves out every field equal in base and the new object; from a cache that
// has not seen the reconciler's own last write, it would leave that write's fields in place
// (counts that no longer add up, a list entry dropped). The optimistic lock turns that into a
// conflict, and the reconcile runs again.
//
// A reconcile whose status patch conflicts runs again after conflictRetry, without an error.
func statusPatch(base client.Object) client.Patch {
	return client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
}

// conflictRetry is when a reconcile whose status write conflicted runs again: the cache has
// usually caught up by then.
const conflictRetry = 500 * time.Millisecond
