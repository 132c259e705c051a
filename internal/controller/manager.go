// Package controller holds the manager that runs Kokumi's reconcilers, one sub-package per kind
// (order, serving, clusters, environment, gc, registrycreds), wired by one named table
// (Reconcilers). What several of them share (the cache of Argo CD's namespace, the promotion
// pipeline) is built once here and passed in. Reconcilers stay thin: they read, call the pure
// packages, and write status.
package controller

import (
	"crypto/tls"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/argocache"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller/clusters"
	"github.com/kokumi-dev/kokumi/internal/controller/environment"
	"github.com/kokumi-dev/kokumi/internal/controller/gc"
	"github.com/kokumi-dev/kokumi/internal/controller/order"
	"github.com/kokumi-dev/kokumi/internal/controller/registrycreds"
	"github.com/kokumi-dev/kokumi/internal/controller/serving"
	"github.com/kokumi-dev/kokumi/internal/shard"
	"github.com/kokumi-dev/kokumi/internal/stages"
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
	Config config.Config

	// Also sets up more runnables after the reconcilers, such as the API server in the same
	// process (`kokumi dev` does that).
	Also []Setup
}

// Shared is what NewManager builds once and passes to every Setup: never found through globals.
type Shared struct {
	// Config is Kokumi's configuration.
	Config config.Config
	// ArgoCD is the one cache of Argo CD's namespace (Kokumi's Applications of the shard, the
	// AppProjects) of this manager.
	ArgoCD *argocache.Cache
	// Pipeline evaluates the promotion pipelines of Environments (Environment.spec.requires):
	// the Order's Automatic promotion and the Serving's gate call it.
	Pipeline *stages.Pipeline
}

// Setup registers one reconciler or runnable with a manager.
type Setup func(ctrl.Manager, Shared) error

// Reconciler is one row of the wiring table: a name, whether a named shard runs it, and its
// setup.
type Reconciler struct {
	// Name names the reconciler in logs and in --<name>-concurrency.
	Name string
	// Sharded is true for the reconcilers of the delivery objects a named shard owns (its
	// Orders, Servings and their Preparations); the others (Clusters, Environments, the bundled
	// registry's credentials) run once, on the main shard.
	Sharded bool
	// Setup adds it to a manager.
	Setup Setup
}

// The reconcilers of the wiring table, by name, for tests that run only some of them.
var (
	// Order renders Orders into Preparations and keeps their Servings.
	Order = Reconciler{Name: "order", Sharded: true, Setup: func(mgr ctrl.Manager, s Shared) error {
		return order.Setup(mgr, s.Config, s.Pipeline.Gate)
	}}
	// Serving deploys Servings through Argo CD Applications.
	Serving = Reconciler{Name: "serving", Sharded: true, Setup: func(mgr ctrl.Manager, s Shared) error {
		return serving.Setup(mgr, s.Config, s.ArgoCD, s.Pipeline)
	}}
	// GC collects the old Preparations of Orders.
	GC = Reconciler{Name: "preparation-gc", Sharded: true, Setup: func(mgr ctrl.Manager, s Shared) error {
		return gc.Setup(mgr, s.Config)
	}}
	// RegistrySweeper deletes, in the bundled registry, the manifests nothing names: the
	// artifacts of deleted Orders and namespaces, and vendored images no Preparation pins. It
	// reads every namespace from the API server, so it runs once, on the main shard.
	RegistrySweeper = Reconciler{Name: "registry-sweeper", Setup: func(mgr ctrl.Manager, s Shared) error {
		return gc.SetupSweeper(mgr, s.Config)
	}}
	// Cluster probes Clusters and keeps their Argo CD cluster Secrets.
	Cluster = Reconciler{Name: "cluster", Setup: func(mgr ctrl.Manager, s Shared) error {
		return clusters.Setup(mgr, s.Config)
	}}
	// Environment reports whether each Environment can deploy.
	Environment = Reconciler{Name: "environment", Setup: func(mgr ctrl.Manager, s Shared) error {
		return environment.Setup(mgr, s.Config, s.ArgoCD)
	}}
	// RegistryCredentials keeps the bundled registry's credentials and Argo CD's template.
	RegistryCredentials = Reconciler{Name: "registry-credentials", Setup: func(mgr ctrl.Manager, s Shared) error {
		return registrycreds.Setup(mgr, s.Config)
	}}
)

// Reconcilers is the wiring table: every reconciler a manager of all shards, or of the main
// shard, runs; a named shard runs the Sharded ones.
var Reconcilers = []Reconciler{Order, Serving, GC, RegistrySweeper, Cluster, Environment, RegistryCredentials}

// The controller's own role: leader election and events. Each reconciler adds its markers.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=kokumi-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The secure metrics endpoint asks the API server who a scraper is and whether it may read /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// cacheOptions keeps the cache of ConfigMaps to Kokumi's namespace. Argo CD's objects have a
// cache of their own (argocache), so that Kokumi starts before Argo CD is installed.
func cacheOptions(c config.Config) cache.Options {
	// The public keys of deployment records live in Kokumi's own namespace; no other
	// ConfigMap is read.
	inKokumi := cache.ByObject{Namespaces: map[string]cache.Config{c.Namespace: {}}}
	// A shard caches only its own Orders, Servings, Preparations and Products.
	// Nothing reads who wrote which field of a cached object (a write never sends managedFields
	// back, and the API server keeps them): at 10,000 Clusters their entries are megabytes.
	return shard.CacheOptions(cache.Options{
		ByObject:         map[client.Object]cache.ByObject{&corev1.ConfigMap{}: inKokumi},
		DefaultTransform: cache.TransformStripManagedFields(),
	}, c.Shard)
}

// NewManager builds a manager with the scheme registered, health checks, metrics and every
// reconciler set up; or, when only is given, just those reconcilers (tests use that). It tries
// again, up to managerAttempts times, when that fails.
func NewManager(cfg *rest.Config, opts Options, only ...Setup) (ctrl.Manager, error) {
	if err := config.CheckLocalProject(opts.Config.LocalProject); err != nil {
		return nil, err
	}
	if err := shard.Check(opts.Config.Shard); err != nil {
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
	scheme, err := kscheme.New()
	if err != nil {
		return nil, err
	}
	// Each shard writes under a name of its own, so that managedFields say which one wrote what.
	if opts.Config.Shard != shard.All || cfg.UserAgent == "" {
		cfg = shard.RESTConfig(cfg, opts.Config.Shard)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOptions(opts.Config),
		Metrics:                 metricsOptions(opts),
		HealthProbeBindAddress:  opts.ProbeAddr,
		PprofBindAddress:        opts.PprofAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        shard.LeaderElectionID(opts.Config.Shard),
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// A named shard's controllers bear the main shard's names: both may run in one process
		// (tests do), and their metrics are told apart by the process that serves them.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(shard.Named(opts.Config.Shard)), CacheSyncTimeout: cacheSyncTimeout(opts)},
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
	if len(all) == 0 {
		// A named shard leaves Clusters, Environments, cluster Secrets and the registry's
		// credentials to the main shard.
		for _, r := range Reconcilers {
			if r.Sharded || shard.SharedWork(opts.Config.Shard) {
				all = append(all, r.Setup)
			}
		}
	}
	shard.Log(opts.Config.Shard)
	shared, err := newShared(mgr, opts.Config)
	if err != nil {
		return nil, err
	}
	for _, setup := range append(all, opts.Also...) {
		if err := setup(mgr, shared); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// newShared builds what the setups of one manager share: one cache of Argo CD's namespace, one
// promotion pipeline.
func newShared(mgr ctrl.Manager, cfg config.Config) (Shared, error) {
	argo, err := argocache.New(mgr, cfg)
	if err != nil {
		return Shared{}, err
	}
	return Shared{Config: cfg, ArgoCD: argo, Pipeline: stages.NewPipeline(mgr.GetClient(), mgr.GetAPIReader(), cfg)}, nil
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
