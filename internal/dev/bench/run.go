// Package bench measures Kokumi's fan-out against a real hub: a kube-apiserver and etcd with
// Argo CD's CRDs, N fake member clusters behind one TLS server, the built `kokumi controller`
// as a separate process with the shipped RBAC, and, in the same run, the two peers it is
// compared with: a bare client creating the same N Applications with 16 workers, and Argo CD's
// ApplicationSet controller with a cluster generator over the same N clusters. `make bench`
// (hack/bench) prints its rows as a table; test/bench checks one in CI.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/internal/whoami"
)

// Names of what one run creates on the hub.
const (
	argocdNamespace = "argocd"
	// bareNamespace holds the bare client's Applications, which Kokumi never looks at.
	bareNamespace   = "bench-bare"
	tenantNamespace = "bench"
	orderName       = "podinfo-edge"
	environmentName = "edge"
	projectName     = "bench-edge"
	targetNamespace = "podinfo"
	productName     = "podinfo-fleet"
)

// Options configure one run.
type Options struct {
	// N is how many member clusters, and so Applications.
	N int
	// KokumiBinary is the built kokumi; BuildKokumi builds one.
	KokumiBinary string
	// ApplicationWriters and ProbePeriod, when not zero, are passed to the controller as
	// --application-writers and --probe-period.
	ApplicationWriters int
	ProbePeriod        time.Duration
	// ControllerArgs are more flags of `kokumi controller`.
	ControllerArgs []string
	// GoMemLimit, when not empty, is the controller's GOMEMLIMIT (the Helm chart sets 900MiB).
	GoMemLimit string
	// BareWorkers is how many workers the bare client creates with (16 when zero).
	BareWorkers int
	// BareAsController runs the bare client's Applications as the controller's ServiceAccount,
	// into Argo CD's namespace (before the controller starts), rather than as an admin into a
	// namespace of its own: the same identity's authentication, authorization and API priority
	// as Kokumi's writes.
	BareAsController bool
	// BareBeside runs the bare client's writes once the controller probed the N Clusters Ready
	// and sits idle, into a namespace the controller does not watch, rather than before the
	// controller starts: the API server then holds the Clusters and their Secrets, the members'
	// server answers the controller's probes, and the controller's process runs, as in
	// Kokumi's own phases, so that the ratios compare the writes and not the machine's state.
	BareBeside bool
	// BareInformer gives the bare client an informer of its own, as a controller has: a watch
	// of its namespace's Applications, as the identity it writes with, in a process of its own
	// (hack/bench/informer, a controller-runtime informer) for the length of its phases. The
	// API server then sends every event of its writes to two watchers (that one and the
	// benchmark's observer), as it sends every event of Kokumi's (to the controller's informer
	// and to the observer); the benchmark's CPU still counts the observer's decoding as the
	// bare client's own, as the controller's counts its informer's.
	BareInformer bool
	// AppSet runs Argo CD's ApplicationSet controller too; AppSetUpdates is its
	// --concurrent-application-updates (16 when zero).
	AppSet        bool
	AppSetUpdates int
	// Quiet is how long the controller's writes are counted once everything settled (0 skips);
	// Settle is how long to wait before (10 s when zero).
	Quiet, Settle time.Duration
	// ArgoCDStatus plays Argo CD's application-controller before the quiet window: every
	// Application gets Synced and Healthy at its revision, so that the Serving settles Deployed.
	ArgoCDStatus bool
	// HealthChanges, with ArgoCDStatus, is how many times one Application is reported Degraded
	// and then Healthy again after the quiet window, each timed until the Serving's status
	// counts it (0 skips).
	HealthChanges int
	// Timeout bounds each wait (10 minutes when zero).
	Timeout time.Duration
	// WorkDir holds the run's files and logs (a temporary directory when empty; removed unless
	// the run fails or KeepWorkDir).
	WorkDir     string
	KeepWorkDir bool
	// SkipBareClusters leaves out the bare client's onboarding and offboarding of the N
	// Clusters (their columns stay empty).
	SkipBareClusters bool
	// ProfileDir, when not empty, receives CPU profiles of the controller (its
	// --pprof-bind-address) over Serving → N, change → N and Order deleted → 0, one of 5 s after
	// the other from the phase's start until its end (controller-<phase>-<N>-<i>.pprof; `go tool
	// pprof` merges the files it is given), and a heap profile after the quiet window
	// (controller-heap-<N>.pprof).
	ProfileDir string
	// Log receives progress lines (nothing when nil).
	Log io.Writer
}

// IdleWindow is how long the controller's CPU is read with nothing to write (Row.IdleCPU).
const IdleWindow = 10 * time.Second

// Row is what one run measured. A zero duration was not measured.
type Row struct {
	N int
	// Bare is how long the bare client took to create N Applications, until all were seen;
	// BarePatch, to patch their targetRevision to another digest as Kokumi does (a merge patch
	// with an optimistic lock), until all were seen at it; BareDelete, to delete them one by
	// one, until none was seen.
	Bare, BarePatch, BareDelete time.Duration
	// BareCPU, BarePatchCPU and BareDeleteCPU are the CPU time the benchmark's own process used
	// in those phases: the bare client's writes and the informer that saw them (which decodes
	// the watch event of each write, as the controller does of its own).
	BareCPU, BarePatchCPU, BareDeleteCPU time.Duration
	// BareOnboard is how long the bare client took to write N Clusters and what the controller
	// writes for each (credentials checked, Argo CD cluster Secret, finalizer, status), until all
	// were seen Ready; BareOffboard, to delete them and what the controller deletes, until none
	// was seen.
	BareOnboard, BareOffboard time.Duration
	// AppSet is how long from creating the ApplicationSet until its N Applications existed;
	// AppSetNote says why it was not measured.
	AppSet     time.Duration
	AppSetNote string
	// Serving is from creating the Order and its Serving until N Applications at the
	// Preparation's digest; Change, from patching spec.preparationName until N at the new
	// digest; Deleted, from deleting the Serving and Order until no Application of Kokumi's.
	Serving, Change, Deleted time.Duration
	// ServingCPU, ChangeCPU and DeletedCPU are the CPU time the controller used in them.
	ServingCPU, ChangeCPU, DeletedCPU time.Duration
	// IdleCPU is the CPU time the controller used over IdleWindow with every Cluster Ready and
	// no Serving, just before Serving → N: its probes, which run through every phase too.
	IdleCPU time.Duration
	// ClustersReady is from creating the first of N Clusters until all were Ready; Offboarded,
	// from deleting the first of them (and its credentials) until none was left.
	ClustersReady, Offboarded time.Duration
	// QuietWrites counts the controller's write requests in Quiet (-1: not measured), by verb
	// and resource in QuietBy.
	QuietWrites int64
	Quiet       time.Duration
	QuietBy     map[string]int64
	// QuietCPU is the CPU time the controller used in Quiet: its Cluster probes, mostly.
	QuietCPU time.Duration
	// Health holds how long each health change took to reach the Serving's status, sorted.
	Health []time.Duration
	// Memory is the controller's memory after the quiet window (HWM is the peak until then).
	Memory Memory
	// PhaseWrites counts the controller's write requests during each timed phase, by phase.
	PhaseWrites []PhaseWrites
	// Notes say what else was seen.
	Notes []string
}

// PhaseWrites is the controller's write requests during one phase, by verb and resource.
type PhaseWrites struct {
	Phase string
	Total int64
	By    map[string]int64
	// KokumiCPU and APICPU are the CPU time the controller and the API server used in the
	// phase (0: not read): on one machine, what the controller spends is the API server's loss.
	KokumiCPU, APICPU time.Duration
	// BenchCPU is the CPU time the benchmark's own process used in the phase: its observer's
	// watch of the controller's writes (their second watcher, as the bare client's informer is
	// of its own) and the members' server answering the probes.
	BenchCPU time.Duration
}

// ServingRatio is Kokumi's fan-out time over the bare client's creates (0 when either is
// missing).
func (r Row) ServingRatio() float64 { return ratio(r.Serving, r.Bare) }

// ChangeRatio is Kokumi's change over the bare client's patches of the same Applications.
func (r Row) ChangeRatio() float64 { return ratio(r.Change, r.BarePatch) }

// DeleteRatio is Kokumi's Order deleted → 0 over the bare client's deletes.
func (r Row) DeleteRatio() float64 { return ratio(r.Deleted, r.BareDelete) }

// OnboardRatio is Kokumi's all Clusters Ready over the bare client's writes of the same objects.
func (r Row) OnboardRatio() float64 { return ratio(r.ClustersReady, r.BareOnboard) }

// Over lists the ratios that CI and --max-ratio hold to limit (Serving → N, change → N and
// Order deleted → 0, each over the bare client's same writes) that exceed it, each as a sentence.
func (r Row) Over(limit float64) []string {
	var over []string
	for _, c := range []struct {
		what         string
		kokumi, bare time.Duration
	}{
		{"Serving → N over the bare client's creates", r.Serving, r.Bare},
		{"change → N over the bare client's patches", r.Change, r.BarePatch},
		{"Order deleted → 0 over the bare client's deletes", r.Deleted, r.BareDelete},
	} {
		if got := ratio(c.kokumi, c.bare); got > limit {
			over = append(over, fmt.Sprintf("at N = %d, Kokumi's %s was %.2f× (%s against %s), more than %.2f×",
				r.N, c.what, got, c.kokumi.Round(time.Millisecond), c.bare.Round(time.Millisecond), limit))
		}
	}
	return over
}

// OffboardRatio is Kokumi's offboarding over the bare client's deletes of the same objects.
func (r Row) OffboardRatio() float64 { return ratio(r.Offboarded, r.BareOffboard) }

func ratio(a, b time.Duration) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// BuildKokumi builds cmd/kokumi of the checkout at root into dir.
func BuildKokumi(ctx context.Context, root, dir string) (string, error) {
	return goBuild(ctx, root, "./cmd/kokumi", filepath.Join(dir, "kokumi"))
}

// goBuild builds the package pkg of the repository at root into bin.
func goBuild(ctx context.Context, root, pkg, bin string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", pkg, err, out)
	}
	return bin, nil
}

// AppSetCRD finds the ApplicationSet CRD of the pinned Argo CD version in the Go module cache
// (where `make test-assets` took Application's and AppProject's from), or says why not.
func AppSetCRD(assets sandbox.Assets) (string, error) {
	version := assets.Versions()["argocd"]
	if version == "" {
		return "", errors.New("no argocd version in bin/envtest/versions: run make test-assets")
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "github.com", "argoproj", "argo-cd", "v3@"+version, "manifests", "crds", "applicationset-crd.yaml")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the ApplicationSet CRD of Argo CD %s is not in the module cache (make test-assets downloads the module): %w", version, err)
	}
	return p, nil
}

// run is the state of one run.
type run struct {
	opts Options
	// windows are the timed phases of the controller, for PhaseWrites.
	windows []window

	ctx    context.Context
	dir    string
	assets sandbox.Assets
	hub    *hub
	admin  client.Client
	// adminName is how the API server names admin's writes: the promotedBy of its promotions
	// (the admission policy kokumi-serving-approval holds it to the writer).
	adminName string
	obs       *observer
	members   *Members
	reg       *registry.Registry
	kokumi    *process
	// apiPid is the hub's kube-apiserver's process id (0: not found), for its CPU time.
	apiPid int
	// pprofAddr is the controller's --pprof-bind-address (empty: no profiles).
	pprofAddr string
	preps     [2]prep
	row       *Row
	// benchIdle is this process's CPU over IdleWindow with every Cluster Ready and nothing to
	// write: the members' server answering the controller's probes, which the bare client's
	// CPU beside the controller does not count.
	benchIdle time.Duration
}

// window is a named span of time.
type window struct {
	name     string
	from, to time.Time
	// kokumi and api are the CPU time the controller and the API server used in it (0: not
	// read); bench, the benchmark's own process.
	kokumi, api, bench time.Duration
}

// mark is where a phase began: when, and the CPU time the controller, the API server and the
// benchmark's process had used by then.
type mark struct {
	at                 time.Time
	kokumi, api, bench time.Duration
}

// apiCPU is the CPU time the API server has used so far (0: not found).
func (r *run) apiCPU() time.Duration {
	if r.apiPid <= 0 {
		return 0
	}
	d, _ := cpuOf(r.apiPid)
	return d
}

// noteAPICPU notes the API server's CPU time in one of the bare client's phases, which began
// when it had used from.
func (r *run) noteAPICPU(what string, from time.Duration) {
	if to := r.apiCPU(); from > 0 && to > from {
		r.row.Notes = append(r.row.Notes, fmt.Sprintf("the API server's CPU while the bare client %s: %s", what, secs(to-from)))
	}
}

// begin marks the start of a timed phase.
func (r *run) begin() mark {
	m := mark{at: time.Now(), api: r.apiCPU(), bench: selfCPU()}
	m.kokumi, _ = r.kokumi.cpu()
	return m
}

// phase records the phase name that began at m and took d, with the CPU time used in it, and
// returns the controller's.
func (r *run) phase(name string, m mark, d time.Duration) time.Duration {
	w := window{name: name, from: m.at, to: m.at.Add(d)}
	if k, err := r.kokumi.cpu(); err == nil && m.kokumi > 0 {
		w.kokumi = k - m.kokumi
	}
	if a := r.apiCPU(); m.api > 0 && a > m.api {
		w.api = a - m.api
	}
	w.bench = selfCPU() - m.bench
	r.windows = append(r.windows, w)
	return w.kokumi
}

// prep is a Preparation and its artifact.
type prep struct {
	name, repoURL, digest string
}

func (r *run) logf(format string, args ...any) {
	if r.opts.Log != nil {
		_, _ = fmt.Fprintf(r.opts.Log, "[N=%d %s] %s\n", r.opts.N, time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

// Run brings up a hub and the fake members and measures the bare client, Kokumi and (with
// opts.AppSet) the ApplicationSet controller for opts.N clusters. When a step fails, the row
// holds what was measured before it, beside the error.
func Run(ctx context.Context, opts Options) (row *Row, err error) {
	if opts.N <= 0 {
		return nil, fmt.Errorf("the number of clusters must be positive, not %d", opts.N)
	}
	if opts.KokumiBinary == "" {
		return nil, errors.New("no kokumi binary: build one with BuildKokumi")
	}
	if opts.BareWorkers == 0 {
		opts.BareWorkers = 16
	}
	if opts.AppSetUpdates == 0 {
		opts.AppSetUpdates = 16
	}
	if opts.Settle == 0 {
		opts.Settle = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := newRun(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer r.finish(&err)
	r.row = &Row{N: opts.N, QuietWrites: -1}
	r.row.Notes = append(r.row.Notes, bareConditions(opts))
	if err := r.setUp(); err != nil {
		return r.row, err
	}
	if !opts.BareBeside {
		if err := r.bare(); err != nil {
			return r.row, fmt.Errorf("bare client: %w", err)
		}
	}
	if err := r.kokumiRun(); err != nil {
		return r.row, fmt.Errorf("run kokumi controller: %w", err)
	}
	// The controller stopped, the bare client onboards the same N Clusters (whose Argo CD
	// cluster Secrets the ApplicationSet's generator then selects) and offboards them after.
	if opts.SkipBareClusters {
		if opts.AppSet {
			r.row.AppSetNote = "needs the bare client's Clusters, which were not onboarded"
		}
		return r.row, nil
	}
	api := r.apiCPU()
	if r.row.BareOnboard, err = r.bareOnboard(); err != nil {
		return r.row, fmt.Errorf("bare client: onboard the Clusters: %w", err)
	}
	r.noteAPICPU("onboarded N Clusters", api)
	r.logf("bare client: %d Clusters onboarded in %s", opts.N, r.row.BareOnboard.Round(time.Millisecond))
	if opts.AppSet {
		if err := r.appSet(); err != nil {
			r.row.AppSetNote = err.Error()
			r.logf("ApplicationSet not measured: %v", err)
		}
	} else {
		r.row.AppSetNote = "not run"
	}
	api = r.apiCPU()
	if r.row.BareOffboard, err = r.bareOffboard(); err != nil {
		return r.row, fmt.Errorf("bare client: offboard the Clusters: %w", err)
	}
	r.noteAPICPU("offboarded them", api)
	r.logf("bare client: %d Clusters offboarded in %s", opts.N, r.row.BareOffboard.Round(time.Millisecond))
	return r.row, nil
}

// newRun finds the assets and makes the work directory of a run (opts.WorkDir, or a temporary
// one); a zero opts.Timeout is 10 minutes.
func newRun(ctx context.Context, opts Options) (*run, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Minute
	}
	assets, err := sandbox.FindAssets()
	if err != nil {
		return nil, err
	}
	dir := opts.WorkDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "kokumi-bench-"); err != nil {
			return nil, fmt.Errorf("create a work directory: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	return &run{opts: opts, ctx: ctx, dir: dir, assets: assets}, nil
}

// finish stops what the run started and removes its work directory, unless *err is set (then
// it says where the logs are) or opts.KeepWorkDir.
func (r *run) finish(err *error) {
	r.close()
	if *err == nil && !r.opts.KeepWorkDir {
		_ = os.RemoveAll(r.dir)
	} else if *err != nil {
		*err = fmt.Errorf("%w (logs kept in %s)", *err, r.dir)
	}
}

func (r *run) close() {
	if r.kokumi != nil {
		r.kokumi.stop()
	}
	if r.reg != nil {
		_ = r.reg.Stop()
	}
	if r.members != nil {
		r.members.Close()
	}
	if r.hub != nil {
		_ = r.hub.stop()
	}
}

// setUp starts the hub, the members, the registry and the observer, and creates what the
// Serving needs but its Clusters: namespaces, RBAC, the AppProject, the Environment and two
// Preparations with their artifacts.
func (r *run) setUp() error {
	start := time.Now()
	crd := ""
	if r.opts.AppSet {
		var err error
		if crd, err = AppSetCRD(r.assets); err != nil {
			r.row.AppSetNote = err.Error()
			r.opts.AppSet = false
		}
	}
	if err := r.setUpHub(hubOptions{appSetCRD: crd}, argocdNamespace, bareNamespace); err != nil {
		return err
	}
	var err error
	for i := range r.preps {
		if r.preps[i], err = r.preparation(orderName, fmt.Sprintf("%s-%d", orderName, i+1)); err != nil {
			return err
		}
	}
	r.logf("hub, members, registry and RBAC up in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// setUpHub starts the hub, the members, the registry and the observer (of the Applications of
// observed), and creates namespaces, RBAC, the AppProject and the Environment.
func (r *run) setUpHub(o hubOptions, observed ...string) error {
	var err error
	if r.hub, err = startHub(r.assets, r.dir, o); err != nil {
		return err
	}
	if u, err := url.Parse(r.hub.admin.Host); err == nil {
		r.apiPid = pidWith("kube-apiserver", "--secure-port="+u.Port())
	}
	scheme, err := kscheme.New()
	if err != nil {
		return fmt.Errorf("scheme: %w", err)
	}
	if r.admin, err = client.New(r.hub.admin, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if r.adminName, err = whoami.Name(r.ctx, r.hub.admin); err != nil {
		return fmt.Errorf("admin's name: %w", err)
	}
	for _, ns := range []string{ControllerNamespace, argocdNamespace, bareNamespace, tenantNamespace} {
		if err := r.admin.Create(r.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	if err := r.hub.installControllerRBAC(r.ctx, r.dir); err != nil {
		return err
	}
	if r.members, err = StartMembers(); err != nil {
		return err
	}
	if r.reg, err = registry.Start("127.0.0.1:0", filepath.Join(r.dir, "registry"), false); err != nil {
		return fmt.Errorf("start the registry: %w", err)
	}
	if r.obs, err = startObserver(r.ctx, r.hub, scheme, observed...); err != nil {
		return err
	}
	project := sandbox.AppProject(argocdNamespace, projectName, sandbox.AppProjectSpec{
		SourceRepos: []string{"*"}, SourceNamespaces: []string{tenantNamespace},
		Destinations: []sandbox.AppProjectDestination{{Server: "*", Namespace: "*"}},
	})
	if err := r.admin.Create(r.ctx, project); err != nil {
		return fmt.Errorf("create the AppProject: %w", err)
	}
	if err := r.admin.Create(r.ctx, &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: environmentName, Namespace: tenantNamespace},
		Spec:       v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": environmentName}}, Project: projectName},
	}); err != nil {
		return fmt.Errorf("create the Environment: %w", err)
	}
	return nil
}

// preparation pushes an artifact to the registry and creates a Preparation of order for it,
// as the Order reconciler would.
func (r *run) preparation(order, name string) (prep, error) {
	return r.preparationIn(tenantNamespace, order, name)
}

// preparationIn is preparation in namespace.
func (r *run) preparationIn(namespace, order, name string) (prep, error) {
	repository := r.reg.Addr + "/" + namespace + "/" + order
	digest, err := (&oci.Client{}).PushArtifact(r.ctx, repository, []byte(name), nil)
	if err != nil {
		return prep{}, fmt.Errorf("push the artifact of %s: %w", name, err)
	}
	p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: order}, ProductRef: v1.LocalObjectReference{Name: productName},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: "sha256:" + strings.Repeat("c", 64)},
		TargetNamespace: targetNamespace,
		Artifact:        v1.Artifact{Ref: "oci://" + repository + "@" + digest, Digest: digest},
		ConfigHash:      name,
	}}
	if err := r.admin.Create(r.ctx, p); err != nil {
		return prep{}, fmt.Errorf("create Preparation %s: %w", name, err)
	}
	return prep{name: name, repoURL: "oci://" + repository, digest: digest}, nil
}

// ClusterName names the i-th member.
func ClusterName(i int) string { return fmt.Sprintf("edge-%05d", i) }

// spec is the Application Kokumi writes for cluster i at p, in namespace.
func (r *run) spec(i int, p prep, namespace string) argocd.ApplicationSpec {
	return r.servingSpec(orderName, i, p, namespace)
}

// servingSpec is the Application the Serving serving writes for cluster i at p, in namespace.
func (r *run) servingSpec(serving string, i int, p prep, namespace string) argocd.ApplicationSpec {
	req := fleet.Request{
		ServingNamespace: tenantNamespace, ServingName: serving, ArgoCDNamespace: namespace,
		Preparation: p.name, RepoURL: p.repoURL, Revision: p.digest, TargetNamespace: targetNamespace,
		Project: argocd.Project{Name: projectName}, Retry: argocd.DefaultSyncRetry,
	}
	name := ClusterName(i)
	return req.Spec(fleet.Cluster{Name: name, Server: r.members.Server(name), Ready: true})
}

// clustersReady creates N Clusters and their credentials, and waits until the controller probed
// them all Ready.
func (r *run) clustersReady() error {
	n := r.opts.N
	m := r.begin()
	start := m.at
	if err := parallel(16, n, func(i int) error {
		return r.createCluster(ClusterName(i), environmentName)
	}); err != nil {
		return err
	}
	created := time.Since(start)
	var err error
	if r.row.ClustersReady, err = waitCount(r.ctx, start, r.opts.Timeout, "every Cluster Ready", n, func() (int, error) {
		return r.obs.readyClusters(r.ctx)
	}, r.kokumi.alive); err != nil {
		return err
	}
	r.phase("all Clusters Ready", m, r.row.ClustersReady)
	r.logf("Clusters: created in %s, all Ready %s after the first", created.Round(time.Millisecond), r.row.ClustersReady.Round(time.Millisecond))
	return nil
}

// idleThenBare measures what the controller and this process spend with every Cluster Ready and
// nothing to write (the controller's probes, which run through every phase too, and the members'
// server answering them), then runs the bare client beside the controller when asked to.
func (r *run) idleThenBare() error {
	idle, benchIdle := r.begin(), selfCPU()
	select {
	case <-time.After(IdleWindow):
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	if k, err := r.kokumi.cpu(); err == nil && idle.kokumi > 0 {
		r.row.IdleCPU = k - idle.kokumi
	}
	r.benchIdle = selfCPU() - benchIdle
	if !r.opts.BareBeside {
		return nil
	}
	if err := r.bare(); err != nil {
		return fmt.Errorf("bare client: %w", err)
	}
	return nil
}

// kokumiLabels select the Applications of the benchmark's Serving.
var kokumiLabels = map[string]string{argocd.LabelManagedBy: argocd.ManagedByKokumi, argocd.LabelServing: orderName}

// startController starts `kokumi controller` with the run's options and waits until it probed
// a warm-up Cluster Ready.
func (r *run) startController() error {
	args := []string{"controller",
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--argocd-namespace=" + argocdNamespace, "--namespace=" + ControllerNamespace,
		"--bundled-registry=" + r.reg.Addr,
	}
	if r.opts.ApplicationWriters > 0 {
		args = append(args, "--application-writers="+strconv.Itoa(r.opts.ApplicationWriters))
	}
	if r.opts.ProbePeriod > 0 {
		args = append(args, "--probe-period="+r.opts.ProbePeriod.String())
	}
	if r.opts.ProfileDir != "" {
		port, err := freePort()
		if err != nil {
			return err
		}
		r.pprofAddr = "127.0.0.1:" + strconv.Itoa(port)
		args = append(args, "--pprof-bind-address="+r.pprofAddr)
	}
	args = append(args, r.opts.ControllerArgs...)
	var err error
	env := []string{"KUBECONFIG=" + r.hub.controllerKubeconfig}
	if r.opts.GoMemLimit != "" {
		env = append(env, "GOMEMLIMIT="+r.opts.GoMemLimit)
	}
	r.kokumi, err = startProcess("kokumi controller", filepath.Join(r.dir, "kokumi-controller.log"), r.opts.KokumiBinary, args, env)
	if err != nil {
		return err
	}
	r.logf("GOMEMLIMIT=%s kokumi %s", r.opts.GoMemLimit, strings.Join(args, " "))

	return r.warmUp()
}

// kokumiRun starts the controller and measures its columns.
func (r *run) kokumiRun() error {
	n := r.opts.N
	if err := r.startController(); err != nil {
		return err
	}
	alive := r.kokumi.alive
	var err error
	if err := r.clustersReady(); err != nil {
		return err
	}
	if err := r.idleThenBare(); err != nil {
		return err
	}

	// The Order and its Serving, until N Applications at the first Preparation's digest.
	m := r.begin()
	start := m.at
	done := r.profileController("create")
	if err := r.createOrder(r.preps[0].name); err != nil {
		return err
	}
	r.row.Serving, err = r.waitApps(start, "Applications at "+r.preps[0].name, n, r.preps[0].digest, alive)
	if err != nil {
		done()
		return err
	}
	r.row.ServingCPU = r.phase("Serving → N", m, r.row.Serving)
	done()
	r.logf("Serving → %d Applications in %s", n, r.row.Serving.Round(time.Millisecond))

	// Another Preparation, until N Applications at its digest.
	m = r.begin()
	start = m.at
	patch := r.promotion(r.preps[1].name)
	done = r.profileController("change")
	if err := r.admin.Patch(r.ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: tenantNamespace}}, patch); err != nil {
		return fmt.Errorf("patch the Serving: %w", err)
	}
	r.row.Change, err = r.waitApps(start, "Applications at "+r.preps[1].name, n, r.preps[1].digest, alive)
	if err != nil {
		done()
		return err
	}
	r.row.ChangeCPU = r.phase("change → N", m, r.row.Change)
	done()
	r.logf("change → %d Applications at the new digest in %s", n, r.row.Change.Round(time.Millisecond))

	if r.opts.ArgoCDStatus {
		if err := r.playArgoCD(); err != nil {
			return err
		}
	}
	if r.opts.Quiet > 0 {
		if err := r.quiet(); err != nil {
			return err
		}
	}
	if r.opts.ArgoCDStatus && r.opts.HealthChanges > 0 {
		if err := r.healthChanges(r.opts.HealthChanges); err != nil {
			return err
		}
	}
	if r.row.Memory, err = r.kokumi.memory(); err != nil {
		return err
	}
	r.heapProfile()

	// The Serving and Order go, until no Application of Kokumi's is left.
	m = r.begin()
	start = m.at
	done = r.profileController("delete")
	if err := r.admin.Delete(r.ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: tenantNamespace}}); err != nil {
		return fmt.Errorf("delete the Serving: %w", err)
	}
	if err := r.admin.Delete(r.ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: tenantNamespace}}); err != nil {
		return fmt.Errorf("delete the Order: %w", err)
	}
	r.row.Deleted, err = r.waitApps(start, "no Application of Kokumi's", 0, "", alive)
	if err != nil {
		done()
		return err
	}
	r.row.DeletedCPU = r.phase("Order deleted → 0", m, r.row.Deleted)
	done()
	r.logf("Order deleted → 0 Applications in %s", r.row.Deleted.Round(time.Millisecond))
	if mem, err := r.kokumi.memory(); err == nil && mem.HWM > r.row.Memory.HWM*21/20 {
		r.row.Notes = append(r.row.Notes, fmt.Sprintf("Kokumi's peak RSS rose to %s during the deletion", mib(mem.HWM)))
	}

	// The N Clusters go, until the controller let the last one go.
	m = r.begin()
	if r.row.Offboarded, err = r.offboard(alive); err != nil {
		return err
	}
	r.phase("Clusters deleted → 0", m, r.row.Offboarded)
	r.logf("Clusters deleted → 0 in %s", r.row.Offboarded.Round(time.Millisecond))
	// The ApplicationSet controller gets the machine to itself, as the bare client did.
	r.kokumi.stop()
	time.Sleep(time.Second) // the audit log is written as the requests complete
	for _, w := range r.windows {
		n, by, err := r.hub.controllerWrites(w.from, w.to)
		if err != nil {
			return err
		}
		r.row.PhaseWrites = append(r.row.PhaseWrites, PhaseWrites{Phase: w.name, Total: n, By: by, KokumiCPU: w.kokumi, APICPU: w.api, BenchCPU: w.bench})
	}
	return nil
}

// createCluster creates the Cluster name of tier and its credentials.
func (r *run) createCluster(name, tier string) error {
	return r.createLabeledCluster(name, map[string]string{"tier": tier})
}

// createLabeledCluster creates the Cluster name with labels, and its credentials.
func (r *run) createLabeledCluster(name string, labels map[string]string) error {
	if err := r.admin.Create(r.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ControllerNamespace},
		Data:       map[string][]byte{cluster.KeyToken: []byte(Token(name)), cluster.KeyCA: r.members.CA},
	}); err != nil {
		return fmt.Errorf("create the credentials of %s: %w", name, err)
	}
	if err := r.admin.Create(r.ctx, &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       v1.ClusterSpec{Server: r.members.Server(name), CredentialsRef: v1.LocalObjectReference{Name: name}},
	}); err != nil {
		return fmt.Errorf("create Cluster %s: %w", name, err)
	}
	return nil
}

// warmUp waits for the controller to have started: a Cluster outside the Environment is
// probed Ready, then deleted and gone, before anything is timed.
func (r *run) warmUp() error {
	const name = "warm-up"
	start := time.Now()
	if err := r.createCluster(name, "warm-up"); err != nil {
		return err
	}
	if _, err := waitCount(r.ctx, start, r.opts.Timeout, "the warm-up Cluster Ready", 1, func() (int, error) {
		return r.obs.readyClusters(r.ctx)
	}, r.kokumi.alive); err != nil {
		return err
	}
	if err := r.admin.Delete(r.ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		return fmt.Errorf("delete the warm-up Cluster: %w", err)
	}
	if err := r.admin.Delete(r.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ControllerNamespace}}); err != nil {
		return fmt.Errorf("delete the warm-up Cluster's credentials: %w", err)
	}
	if _, err := waitCount(r.ctx, time.Now(), r.opts.Timeout, "the warm-up Cluster to go", 0, r.with(r.obs.clusters), r.kokumi.alive); err != nil {
		return err
	}
	r.logf("the controller is up: a warm-up Cluster was Ready %s after its start", time.Since(start).Round(time.Millisecond))
	return nil
}

func (r *run) waitApps(start time.Time, what string, want int, revision string, alive func() error) (time.Duration, error) {
	return waitCount(r.ctx, start, r.opts.Timeout, what, want, func() (int, error) {
		return r.obs.applications(r.ctx, argocdNamespace, kokumiLabels, revision)
	}, alive)
}

// playArgoCD writes, as Argo CD's application-controller would after a sync, Synced and
// Healthy at its revision into every Application of Kokumi's, and waits for the Serving to
// say Deployed.
func (r *run) playArgoCD() error {
	start := time.Now()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	if err := r.obs.cache.List(r.ctx, list, client.InNamespace(argocdNamespace), client.MatchingLabels(kokumiLabels)); err != nil {
		return fmt.Errorf("list Applications: %w", err)
	}
	if err := parallel(16, len(list.Items), func(i int) error {
		app := &list.Items[i]
		rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
		return r.syncedAt(app, rev)
	}); err != nil {
		return err
	}
	d, err := waitCount(r.ctx, start, r.opts.Timeout, "the Serving to say Deployed", 1, func() (int, error) {
		reason, err := r.obs.servingReady(r.ctx, tenantNamespace, orderName)
		if reason == v1.ReasonDeployed {
			return 1, err
		}
		return 0, err
	}, r.kokumi.alive)
	if err != nil {
		return err
	}
	r.logf("played Argo CD: %d Applications Synced and Healthy; the Serving said Deployed after %s", len(list.Items), d.Round(time.Millisecond))
	return nil
}

// syncedAt writes, as Argo CD's application-controller would after a sync, Synced and Healthy
// at revision into the status of app.
func (r *run) syncedAt(app client.Object, revision string) error {
	patch := fmt.Sprintf(`{"status":{"sync":{"status":%q,"revision":%q},"health":{"status":%q}}}`, argocd.SyncSynced, revision, argocd.HealthHealthy)
	if err := r.admin.Patch(r.ctx, app, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("write the status of Application %s: %w", app.GetName(), err)
	}
	return nil
}

// healthChanges reports, as Argo CD would, one Application after another Degraded and then
// Healthy again, samples times over the fleet, and times each change until the Serving's
// status counts it; the Serving reads Applications from its cache, so this is the whole path
// from Argo CD's write to Kokumi's status.
func (r *run) healthChanges(samples int) error {
	var took []time.Duration
	for i := range samples {
		app := newApplication()
		app.SetNamespace(argocdNamespace)
		app.SetName(fleet.ApplicationName(tenantNamespace, orderName, ClusterName(i*r.opts.N/samples)))
		for _, health := range []string{argocd.HealthDegraded, argocd.HealthHealthy} {
			want := 0
			if health == argocd.HealthDegraded {
				want = 1
			}
			start := time.Now()
			patch := fmt.Sprintf(`{"status":{"health":{"status":%q}}}`, health)
			if err := r.admin.Patch(r.ctx, app, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				return fmt.Errorf("report Application %s %s: %w", app.GetName(), health, err)
			}
			d, err := waitCount(r.ctx, start, r.opts.Timeout, "the Serving to count "+app.GetName()+" "+health, want, func() (int, error) {
				return r.obs.servingDegraded(r.ctx, tenantNamespace, orderName)
			}, r.kokumi.alive)
			if err != nil {
				return err
			}
			took = append(took, d)
		}
	}
	slices.Sort(took)
	r.row.Health = took
	r.logf("health changes → Serving status: p50 %s, max %s (%d changes)", r.row.HealthP50().Round(time.Millisecond),
		took[len(took)-1].Round(time.Millisecond), len(took))
	return nil
}

// quiet waits Settle, then counts the controller's write requests over Quiet.
func (r *run) quiet() error {
	select {
	case <-time.After(r.opts.Settle):
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	from := time.Now()
	cpuFrom, err := r.kokumi.cpu()
	if err != nil {
		return err
	}
	select {
	case <-time.After(r.opts.Quiet):
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	to := time.Now()
	if err := r.kokumi.alive(); err != nil {
		return err
	}
	cpuTo, err := r.kokumi.cpu()
	if err != nil {
		return err
	}
	r.row.QuietCPU = cpuTo - cpuFrom
	time.Sleep(time.Second) // the audit log is written as the requests complete
	n, by, err := r.hub.controllerWrites(from, to)
	if err != nil {
		return err
	}
	r.row.QuietWrites, r.row.QuietBy, r.row.Quiet = n, by, to.Sub(from)
	r.logf("quiet %s: %d writes by the controller %v, %s of CPU", r.row.Quiet.Round(time.Second), n, by, r.row.QuietCPU)
	return nil
}

// parallel runs do for 0..n-1 on workers goroutines and returns the first error; it stops
// handing out work after one.
func parallel(workers, n int, do func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	work := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := do(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

// createOrder creates the bench's Order, which promotes by hand, and its Serving of preparation.
func (r *run) createOrder(preparation string) error {
	if err := r.admin.Create(r.ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: tenantNamespace}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: productName}, EnvironmentRef: v1.LocalObjectReference{Name: environmentName},
		Promotion: v1.Promotion{Mode: v1.PromotionManual},
	}}); err != nil {
		return fmt.Errorf("create the Order: %w", err)
	}
	if err := r.admin.Create(r.ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: tenantNamespace}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: orderName}, PreparationName: preparation, PromotedBy: r.adminName,
	}}); err != nil {
		return fmt.Errorf("create the Serving: %w", err)
	}
	return nil
}

// promotion is the merge patch that promotes preparation, naming the admin as its writer.
func (r *run) promotion(preparation string) client.Patch {
	body, _ := json.Marshal(map[string]any{"spec": map[string]any{"preparationName": preparation, "promotedBy": r.adminName}})
	return client.RawPatch(types.MergePatchType, body)
}
