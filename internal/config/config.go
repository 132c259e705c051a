// Package config holds the configuration of a Kokumi installation that its reconcilers, the
// server and the plugin read: Config, its defaults, and the render budgets.
package config

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/egress"
)

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
	// DriftAfter is how long a cluster Argo CD deployed to may stay out of sync (fleet.Drifting)
	// before it is Drifted; 0 makes it Drifted at once.
	DriftAfter time.Duration
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
	RenderBudgets RenderBudgets
	// RenderWorkers is how many renders run at a time, of which one namespace's at most half
	// (at least one): an Order of a namespace that runs its share waits without holding an
	// Order worker. Zero or less means DefaultRenderWorkers.
	RenderWorkers int
	// RenderChildPerNamespace keeps render children per namespace: a child that rendered for
	// one namespace renders that namespace's renders only (isolate.Process.Namespace), at the
	// cost of a child's start for most renders when Orders spread over many namespaces. False
	// keeps them shared: a kept child renders the next render of any namespace.
	RenderChildPerNamespace bool
	// Concurrency is how many reconciles of each kind run at a time, by kind (OrderConcurrency,
	// ServingConcurrency, ClusterConcurrency, EnvironmentConcurrency: the flags
	// --<kind>-concurrency); a kind missing, or zero, runs DefaultConcurrency's number.
	Concurrency map[string]int
	// AllowedRegistries are the registries an Order may fetch from or push to, besides the
	// bundled registry: its Product's source, the images its manifests name and its vendor
	// registry. Each is a host[:port], or *.domain for its subdomains; empty allows any, which
	// lets a tenant make the controller fetch from any address it reaches (see
	// RegistryAllowed).
	AllowedRegistries []string
	// Shard is the share of the namespaced delivery kinds (Orders, Servings, Preparations,
	// Products) this replica reconciles, by their label shard.Label: shard.All (the zero value)
	// every one, shard.Main those without the label, any other value those labelled with it.
	// Only AllShards and MainShard do the shared work; each shard has its own lease, field
	// manager (shard.FieldManager) and cache of Argo CD's Applications (its own only).
	Shard string
	// VerifyAllowedCIDRs are the addresses the controller reaches for an Environment's HTTP gates
	// and webhooks although the egress policy refuses their range (loopback, link-local,
	// multicast, broadcast, unspecified, cloud metadata): what a site needs, such as loopback
	// where the controller runs on the host it checks (make demo, the e2e fleet). Empty allows
	// none of them (internal/egress).
	VerifyAllowedCIDRs []netip.Prefix
	// VerifyRedirects is which redirects an HTTP gate follows: egress.RedirectsNone (the zero
	// value, and the default) or egress.RedirectsSameOrigin. A webhook follows none.
	VerifyRedirects egress.Redirects
	// VerifyWorkers is how many HTTP gate checks run at a time, apart from the reconcile
	// workers, of which one namespace's at most a quarter (at least one). Zero or less means
	// DefaultVerifyWorkers.
	VerifyWorkers int
	// VerifyClusterRequests is how many requests one run of a per-cluster HTTP gate check
	// sends at most, of the wave and of the baseline together (a verification's perCluster).
	// Zero or less means DefaultVerifyClusterRequests.
	VerifyClusterRequests int
}

// DefaultVerifyClusterRequests is how many requests one run of a per-cluster HTTP gate check
// sends at most by default: past it, each run asks another window of the clusters.
const DefaultVerifyClusterRequests = 40

// DefaultVerifyWorkers is how many HTTP gate checks run at a time by default: each holds a
// goroutine and a connection for at most its timeout (60 s at the most).
const DefaultVerifyWorkers = 16

// Egress is the egress policy of the Environments' HTTP gates and webhooks.
func (c Config) Egress() egress.Policy {
	return egress.Policy{Allowed: c.VerifyAllowedCIDRs, Redirects: c.VerifyRedirects}
}

// Default returns the configuration used when no flag says otherwise.
func Default() Config {
	return Config{
		Namespace:       "kokumi-system",
		ArgoCDNamespace: argocd.DefaultNamespace,
		LocalProject:    "",
		BundledRegistry: "kokumi-registry.kokumi-system.svc:5000",
		ProbePeriod:     30 * time.Second,
		SyncRetry:       argocd.DefaultSyncRetry,
		// Argo CD's retries (about 2.5 minutes with the defaults) end well before it.
		ProgressDeadline: 10 * time.Minute,
		// Far longer than Argo CD's self-heal takes to undo a change on a cluster (it watches the
		// objects, and syncs again after its self-heal timeout, 5 s by default).
		DriftAfter:                 5 * time.Minute,
		ApplicationWriters:         16,
		ApplicationWriteSlice:      1000,
		ProbeWorkers:               32,
		ProbeKeepAlive:             true,
		UnreachableClusterDeletion: 10 * time.Minute,
		PreparationHistory:         10,
		RenderBudgets:              DefaultRenderBudgets(),
		RenderWorkers:              DefaultRenderWorkers,
		VerifyRedirects:            egress.RedirectsNone,
		VerifyWorkers:              DefaultVerifyWorkers,
		VerifyClusterRequests:      DefaultVerifyClusterRequests,
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

// RenderBudgets bound what one render may take inside the controller, so that a large or hostile
// source fails its Order (BudgetExceeded) instead of exhausting the controller's memory, which
// would stop every Order of every tenant. A field of zero or less means its default.
//
// The defaults leave large real charts room (the biggest public charts are a few MiB pulled and
// render some hundreds of objects, a few MiB of YAML) and bound what one render holds to about
// 400 MiB at worst, a source at every limit at once (objects parsed from YAML take about four
// times its bytes): the Order reconciler renders two at a time under the controller's 1 GiB.
type RenderBudgets struct {
	// PulledBytes is the most bytes pulled from the source's registry: the manifest and every
	// layer, as the manifest declares them, checked before any layer is fetched. Default 100 MiB.
	PulledBytes int64
	// Layers is the most layers the source's manifest may list. Default 256.
	Layers int
	// UncompressedBytes is the most bytes decompressed out of the source's layers in all (the
	// chart archive, the bundle's tar layers), counted as they are decompressed: a layer that
	// decompresses to gigabytes stops there. Default 128 MiB, above Helm's own 100 MiB limit of
	// a chart.
	UncompressedBytes int64
	// Objects is the most objects the source may render to. Default 10,000.
	Objects int
	// OutputBytes is the most bytes of YAML the source may render to: the Helm output, the
	// bundle's joined files, and the manifests of the artifact pushed. Default 32 MiB.
	OutputBytes int64
	// Memory is the most memory one render takes, in a process of its own (the controller's
	// binary, started for the render): a template that loops in a loop, or a value passed
	// through tpl, fails its Order when it reaches it, and takes nothing of the controller's.
	// Default 512 MiB.
	Memory int64
	// Timeout is the most time one render (the chart's templates, or the bundle's files) takes,
	// in wall and in CPU time: its process is killed then, and its Order fails RenderTimeout.
	// Default 60 s.
	Timeout time.Duration
}

// The kinds of Config.Concurrency: each names its flag, --<kind>-concurrency.
const (
	// OrderConcurrency is how many Orders render at a time.
	OrderConcurrency = "order"
	// ServingConcurrency is how many Servings roll out at a time.
	ServingConcurrency = "serving"
	// ClusterConcurrency is how many Clusters reconcile at a time (probes run in a pool of their
	// own, ProbeWorkers).
	ClusterConcurrency = "cluster"
	// EnvironmentConcurrency is how many Environments reconcile at a time.
	EnvironmentConcurrency = "environment"
)

// DefaultRenderWorkers is how many renders run at a time by default: each holds up to its render
// budgets' memory, in a process of its own.
const DefaultRenderWorkers = 2

// DefaultConcurrency is how many reconciles of each kind run at a time by default: Orders more
// than the renders (DefaultRenderWorkers), so that an Order waiting for a render slot, or one
// that renders nothing new, does not hold up another namespace's; roll-outs and Clusters wait on
// the network. A Cluster's reconcile is a few round trips to the API server, of which the
// deletion's consistent list of its Applications waits for the API server's watch cache (up to
// its 100 ms progress tick): 16 at a time, as many as the bare client of `make bench`, onboard
// and offboard a fleet at the API server's pace rather than at 4 × 10 a second.
var DefaultConcurrency = map[string]int{
	OrderConcurrency:       4,
	ServingConcurrency:     4,
	ClusterConcurrency:     16,
	EnvironmentConcurrency: 1,
}

// Workers is how many reconciles of kind run at a time: Concurrency's, else the default.
func (c Config) Workers(kind string) int {
	if n := c.Concurrency[kind]; n > 0 {
		return n
	}
	return max(DefaultConcurrency[kind], 1)
}

// DefaultRenderBudgets returns the budgets used when none are given.
func DefaultRenderBudgets() RenderBudgets {
	return RenderBudgets{
		PulledBytes:       100 << 20,
		Layers:            256,
		UncompressedBytes: 128 << 20,
		Objects:           10_000,
		OutputBytes:       32 << 20,
		Memory:            512 << 20,
		Timeout:           time.Minute,
	}
}

// WithDefaults returns the budgets with every field of zero or less set to its default.
func (b RenderBudgets) WithDefaults() RenderBudgets {
	d := DefaultRenderBudgets()
	OrDefault(&b.PulledBytes, d.PulledBytes)
	OrDefault(&b.Layers, d.Layers)
	OrDefault(&b.UncompressedBytes, d.UncompressedBytes)
	OrDefault(&b.Objects, d.Objects)
	OrDefault(&b.OutputBytes, d.OutputBytes)
	OrDefault(&b.Memory, d.Memory)
	OrDefault(&b.Timeout, d.Timeout)
	return b
}

// The controller's flags that set each budget; a BudgetExceeded message names the one to raise.
const (
	// FlagPulledBytes sets RenderBudgets.PulledBytes.
	FlagPulledBytes = "render-max-pulled-bytes"
	// FlagLayers sets RenderBudgets.Layers.
	FlagLayers = "render-max-layers"
	// FlagUncompressedBytes sets RenderBudgets.UncompressedBytes.
	FlagUncompressedBytes = "render-max-uncompressed-bytes"
	// FlagObjects sets RenderBudgets.Objects.
	FlagObjects = "render-max-objects"
	// FlagOutputBytes sets RenderBudgets.OutputBytes.
	FlagOutputBytes = "render-max-output-bytes"
	// FlagMemory sets RenderBudgets.Memory.
	FlagMemory = "render-max-memory"
	// FlagRenderTimeout sets RenderBudgets.Timeout.
	FlagRenderTimeout = "render-timeout"
)

// RegistryAllowed says whether an Order may fetch from or push to the registry host (host[:port],
// as an image reference or an oci:// URL names it): the bundled registry always, else any when
// AllowedRegistries is empty, else one it names (case aside; *.domain matches its subdomains
// on any port).
func (c Config) RegistryAllowed(host string) bool {
	host = strings.ToLower(host)
	if len(c.AllowedRegistries) == 0 || host == strings.ToLower(c.BundledRegistry) {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	for _, a := range c.AllowedRegistries {
		a = strings.ToLower(strings.TrimSpace(a))
		if suffix, ok := strings.CutPrefix(a, "*."); ok {
			if strings.HasSuffix(name, "."+suffix) {
				return true
			}
			continue
		}
		if a == host {
			return true
		}
	}
	return false
}

// OrDefault sets *v to def unless it is positive: an option left at zero takes its default.
func OrDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
