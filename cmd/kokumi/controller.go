package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/egress"
	"github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/shard"
)

func bindControllerFlags(fs *flag.FlagSet, o *controller.Options) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", `address of the metrics endpoint ("0" turns it off)`)
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "serve the metrics over HTTPS to clients the API server authenticates and authorizes to get /metrics (false: plain HTTP to anyone)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "0", `address of Go's profiles at /debug/pprof/, unauthenticated: bind to loopback and port-forward ("0" turns them off)`)
	fs.BoolVar(&o.LeaderElection, "leader-elect", false, "elect a leader so that one replica reconciles at a time")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader lease (default: Kokumi's own)")
	fs.DurationVar(&o.CacheSyncTimeout, "cache-sync-timeout", controller.DefaultCacheSyncTimeout, "how long the controllers wait for their caches to list what they watch at start before the controller exits (a hub with 100,000 Argo CD Applications takes minutes)")
	fs.Func("dora-order-labels", fmt.Sprintf("how many Orders the delivery measures' series (kokumi_dora_*) name in their order label; the Orders past it share the label %q (default %d)", metrics.OtherOrder, metrics.DefaultDORAOrderLabels), func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a count of Orders (0 or more)", v)
		}
		metrics.SetDORAOrderLabels(n)
		return nil
	})
	bindConfigFlags(fs, &o.Config)
	// Without --shard the controller is the main shard: the delivery objects without the label,
	// and the work that runs once.
	o.Config.Shard = shard.Main
	fs.Func("shard", "reconcile only the Orders, Servings, Preparations and Products labelled "+shard.Label+"=NAME, with a lease and field manager of the shard's own (default: the main shard, which reconciles those without the label and runs the shared work: Clusters, Environments, Argo CD cluster Secrets, the bundled registry's credentials)", func(v string) error {
		if v == "" {
			o.Config.Shard = shard.Main
			return nil
		}
		if err := shard.Check(v); err != nil || v == shard.Main {
			return fmt.Errorf("%q is not a label value", v)
		}
		o.Config.Shard = v
		return nil
	})
}

// bindConfigFlags binds the configuration of Kokumi itself, with the defaults of DefaultConfig.
func bindConfigFlags(fs *flag.FlagSet, c *config.Config) {
	d := config.Default()
	fs.StringVar(&c.Namespace, "namespace", d.Namespace, "Kokumi's own namespace, where Cluster credentials live")
	fs.StringVar(&c.ArgoCDNamespace, "argocd-namespace", d.ArgoCDNamespace, "namespace Argo CD runs in")
	fs.StringVar(&c.LocalProject, "local-project", d.LocalProject, "dedicated Argo CD AppProject of the Environment local (never default); empty turns local off")
	fs.StringVar(&c.BundledRegistry, "bundled-registry", d.BundledRegistry, "host:port of the bundled registry")
	fs.DurationVar(&c.ProbePeriod, "probe-period", d.ProbePeriod, "how often each Cluster's server is probed")
	fs.Int64Var(&c.SyncRetry.Limit, "sync-retry-limit", d.SyncRetry.Limit, "how many times Argo CD retries a failed sync of an Application (0: never, -1: forever)")
	fs.DurationVar(&c.SyncRetry.Backoff, "sync-retry-backoff", d.SyncRetry.Backoff, "the first wait before a failed sync is retried")
	fs.Int64Var(&c.SyncRetry.Factor, "sync-retry-factor", d.SyncRetry.Factor, "what each wait is multiplied by after a failure")
	fs.DurationVar(&c.SyncRetry.MaxBackoff, "sync-retry-max-backoff", d.SyncRetry.MaxBackoff, "the longest wait between retries")
	fs.DurationVar(&c.ProgressDeadline, "progress-deadline", d.ProgressDeadline, "how long a cluster may stay Progressing before it fails the deployment (0: forever)")
	fs.DurationVar(&c.DriftAfter, "drift-after", d.DriftAfter, "how long a cluster Argo CD deployed to may stay out of sync (something on it changed what was deployed, and self-heal did not undo it) before it is Drifted (0: at once)")
	bindBudgetFlags(fs, &c.RenderBudgets, d.RenderBudgets)
	fs.IntVar(&c.PreparationHistory, "preparation-history", d.PreparationHistory, "how many of its newest Preparations each Order keeps, besides the ones its Serving names or runs (0: keep all)")
	fs.IntVar(&c.ApplicationWriters, "application-writers", d.ApplicationWriters, "how many Argo CD Applications one Serving writes at a time")
	fs.IntVar(&c.ApplicationWriteSlice, "application-write-slice", d.ApplicationWriteSlice, "how many Argo CD Applications one reconcile of a Serving writes at most (and at most about 10 s of writes) before it writes its progress and goes on in the next reconcile")
	fs.IntVar(&c.RenderWorkers, "render-workers", d.RenderWorkers, "how many renders run at a time, each in a process of its own; one namespace's at most half of them (at least one), so that another namespace's Order finds a slot")
	fs.BoolVar(&c.RenderChildPerNamespace, "render-child-per-namespace", d.RenderChildPerNamespace, "keep render children per namespace, so that a child that rendered one namespace's chart never renders another's (costs a child's start, about 40 ms of CPU, for most renders when Orders spread over many namespaces); false: a kept child renders any namespace's next render")
	fs.IntVar(&c.ProbeWorkers, "probe-workers", d.ProbeWorkers, "how many Cluster probes run at a time, apart from the reconcile workers")
	fs.BoolVar(&c.ProbeKeepAlive, "probe-keep-alive", d.ProbeKeepAlive, "keep each Cluster's probe connection open from probe to probe (false: close it after each probe, holding about 60 KB less memory per Cluster for a TLS handshake each probe)")
	bindConcurrencyFlags(fs, c)
	listFlag(fs, "allowed-registries", "comma-separated registries (host[:port], or *.domain for its subdomains) Orders may pull sources and images from and vendor into, besides the bundled registry; default: any, so a tenant's Product can make the controller fetch from any address it reaches", &c.AllowedRegistries, nil)
	fs.Func(egress.FlagAllowedCIDRs, "comma-separated CIDR prefixes or addresses the controller reaches for the Environments' HTTP gates and webhooks although the egress policy refuses their range (loopback, link-local such as 169.254.169.254, multicast, unspecified, cloud metadata); default: none", func(v string) error {
		p, err := egress.ParseCIDRs(egress.FlagAllowedCIDRs, v)
		c.VerifyAllowedCIDRs = append(c.VerifyAllowedCIDRs, p...)
		return err
	})
	fs.Func("verify-redirects", `which redirects an HTTP gate follows: "none" (the 3xx fails the run) or "same-origin" (the same scheme, host and port); webhooks follow none (default "none")`, func(v string) (err error) {
		c.VerifyRedirects, err = egress.ParseRedirects("verify-redirects", v)
		return err
	})
	fs.IntVar(&c.VerifyWorkers, "verify-workers", d.VerifyWorkers, "how many HTTP gate checks run at a time, apart from the Serving workers; one namespace's at most a quarter of them (at least one)")
	fs.IntVar(&c.VerifyClusterRequests, "verify-cluster-requests", d.VerifyClusterRequests, "how many requests one run of a per-cluster HTTP gate check (perCluster) sends at most, of the wave and of the baseline; past it, each run asks another window of the clusters")
	fs.DurationVar(&c.UnreachableClusterDeletion, "unreachable-cluster-deletion", d.UnreachableClusterDeletion, "how long a deleted Cluster whose server is Unreachable waits for the Argo CD Applications still deploying to it (0: forever)")
}

// concurrencyUsage says what each --<kind>-concurrency flag runs at a time.
var concurrencyUsage = map[string]string{
	config.OrderConcurrency:       "how many Orders reconcile at a time (their renders run apart, --render-workers)",
	config.ServingConcurrency:     "how many Servings roll out at a time",
	config.ClusterConcurrency:     "how many Clusters reconcile at a time (probes run apart, --probe-workers)",
	config.EnvironmentConcurrency: "how many Environments reconcile at a time",
}

// bindConcurrencyFlags binds --<kind>-concurrency for each reconciler with a worker count.
func bindConcurrencyFlags(fs *flag.FlagSet, c *config.Config) {
	c.Concurrency = map[string]int{}
	for _, kind := range []string{config.OrderConcurrency, config.ServingConcurrency, config.ClusterConcurrency, config.EnvironmentConcurrency} {
		fs.Func(kind+"-concurrency", fmt.Sprintf("%s (default %d)", concurrencyUsage[kind], config.DefaultConcurrency[kind]), func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("%q is not a whole number of at least 1", v)
			}
			c.Concurrency[kind] = n
			return nil
		})
	}
}

func runController(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("controller", stderr)
	var opts controller.Options
	bindControllerFlags(fs, &opts)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	if err := controller.CheckCRDs(ctx, cfg); err != nil {
		return err
	}
	mgr, err := controller.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	ctrl.Log.Info("starting controller manager")
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run controller manager: %w", err)
	}
	return nil
}
