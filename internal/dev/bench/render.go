package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/dev/chart"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
	"github.com/kokumi-dev/kokumi/internal/provenance"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/render"
	"github.com/kokumi-dev/kokumi/internal/render/isolate"
)

// The two versions of the podinfo-like chart a render run moves its Orders between.
const (
	renderVersion1   = "6.14.1"
	renderVersion2   = "6.14.2"
	renderProduct    = "podinfo"
	renderTargetNS   = "podinfo"
	renderNamespaces = 100
)

// RenderOptions configure one run of RunRender.
type RenderOptions struct {
	// N is how many Orders, spread over Namespaces namespaces (100 when zero), one Product each.
	N, Namespaces int
	// KokumiBinary is the built kokumi; it runs the controller and the bare pipeline's render
	// children.
	KokumiBinary string
	// ControllerArgs are more flags of `kokumi controller` (its defaults otherwise).
	ControllerArgs []string
	// BareWorkers is how many Orders the bare pipeline works on at a time (2 when zero, the
	// controller's default --render-workers).
	BareWorkers int
	// Timeout bounds each wait (10 minutes when zero).
	Timeout time.Duration
	// WorkDir and KeepWorkDir are as in Options.
	WorkDir     string
	KeepWorkDir bool
	// Log receives progress lines (nothing when nil).
	Log io.Writer
	// ProfileDir, when set, receives CPU profiles of the API server and of the controller
	// during the change pass (apiserver-N.pprof, controller-N.pprof), for `go tool pprof`.
	ProfileDir string
}

// Pass is one pass over the Orders: how long it took in all and for each Order, and what it
// asked of the registry and of the API server.
type Pass struct {
	// Total is from the pass's start until the last Order's Preparation was Ready (Kokumi) or
	// its artifact pushed (bare).
	Total time.Duration
	// PerOrder holds each Order's time from the pass's start, sorted.
	PerOrder []time.Duration
	// Registry counts the requests the registry received during the pass, by method and kind
	// (manifests, blobs, uploads, …).
	Registry   int64
	RegistryBy map[string]int64
	// API counts the requests the controller sent the API server during the pass (its
	// rest_client_requests_total); -1 when not measured (the bare pipeline sends none).
	API int64
}

// P returns the q-quantile (0 < q ≤ 1) of the per-Order times.
func (p Pass) P(q float64) time.Duration {
	if len(p.PerOrder) == 0 {
		return 0
	}
	i := int(float64(len(p.PerOrder))*q+0.5) - 1
	return p.PerOrder[max(0, min(i, len(p.PerOrder)-1))]
}

// RenderRow is what one run of RunRender measured.
type RenderRow struct {
	N, Namespaces, BareWorkers int
	// Create is Kokumi's first pass (N Orders created, until each has a Ready Preparation at
	// the first version); Change, its pass after the Products moved to the second version.
	Create, Change Pass
	// Bare is the bare pipeline's pass at the second version, rendering in process;
	// BareChild, the same rendering in a child process as the controller does; BareRecorded,
	// that and the API writes the controller makes for a render, as the controller, with as many
	// workers as its Order reconciles.
	Bare, BareChild, BareRecorded Pass
	// Load is the machine's load average (1, 5, 15 min) when the run began.
	Load string
	// Notes say what else was seen.
	Notes []string
}

// Ratio is Kokumi's change pass over the bare pipeline's (in process).
func (r RenderRow) Ratio() float64 { return ratio(r.Change.Total, r.Bare.Total) }

// ChildCost is what rendering in a child adds to a render: the bare pipeline's time in a child
// less its time in process, per Order and worker; ok is false when either was not measured.
func (r RenderRow) ChildCost() (d time.Duration, ok bool) {
	if r.N <= 0 || r.Bare.Total <= 0 || r.BareChild.Total <= 0 {
		return 0, false
	}
	return (r.BareChild.Total - r.Bare.Total) * time.Duration(r.BareWorkers) / time.Duration(r.N), true
}

// RecordedRatio is Kokumi's change pass over the recording bare pipeline's (rendering in a child
// and making Kokumi's API writes).
func (r RenderRow) RecordedRatio() float64 { return ratio(r.Change.Total, r.BareRecorded.Total) }

// renderRun is the state of a run of RunRender.
type renderRun struct {
	*run
	ro         RenderOptions
	proxy      *countingProxy
	registry   string // the proxy's host:port, where everything reaches the registry
	values     map[string]any
	chartURL   string
	metricsURL string
	watch      *readyWatch
	namespaces []string
	orders     []types.NamespacedName
}

// RunRender brings up a hub, the bundled registry behind a counting proxy with the podinfo-like
// chart (two versions) and its images, and the built controller with its default render
// flags; creates N Orders over the namespaces from one Product in each, until each has a Ready
// Preparation; moves the Products to the chart's second version and times the pass again.
// Then, the controller stopped, a bare pipeline (Helm SDK render, tag → digest resolution,
// push of the same artifact to the same registry) does the second pass's work with
// BareWorkers workers, rendering in process and then in a child as the controller does.
func RunRender(ctx context.Context, opts RenderOptions) (row *RenderRow, err error) {
	if opts.N <= 0 {
		return nil, fmt.Errorf("the number of Orders must be positive, not %d", opts.N)
	}
	if opts.KokumiBinary == "" {
		return nil, errors.New("no kokumi binary: build one with BuildKokumi")
	}
	if opts.Namespaces <= 0 {
		opts.Namespaces = renderNamespaces
	}
	opts.Namespaces = min(opts.Namespaces, opts.N)
	if opts.BareWorkers <= 0 {
		opts.BareWorkers = 2
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	base, err := newRun(ctx, Options{N: opts.N, KokumiBinary: opts.KokumiBinary, Timeout: opts.Timeout,
		WorkDir: opts.WorkDir, KeepWorkDir: opts.KeepWorkDir, Log: opts.Log})
	if err != nil {
		return nil, err
	}
	r := &renderRun{run: base, ro: opts}
	defer r.finish(&err)
	defer func() {
		if r.proxy != nil {
			r.proxy.close()
		}
	}()
	row = &RenderRow{N: opts.N, Namespaces: opts.Namespaces, BareWorkers: opts.BareWorkers, Load: loadAverage()}
	if err := r.setUp(); err != nil {
		return row, err
	}
	if err := r.kokumiPasses(row); err != nil {
		return row, fmt.Errorf("run kokumi controller: %w", err)
	}
	r.kokumi.stop()
	if row.Bare, err = r.bare("bare", nil); err != nil {
		return row, fmt.Errorf("bare pipeline: %w", err)
	}
	// Children started ahead, one per worker, as the controller starts them.
	child := isolate.Process{Executable: opts.KokumiBinary, Timeout: time.Minute, Warm: opts.BareWorkers}
	if row.BareChild, err = r.bare("bare-child", child.Render); err != nil {
		return row, fmt.Errorf("bare pipeline, rendering in a child: %w", err)
	}
	rec, err := r.recorder()
	if err != nil {
		return row, err
	}
	if row.BareRecorded, err = r.bare("bare-recorded", child.Render, rec.record); err != nil {
		return row, fmt.Errorf("bare pipeline, rendering in a child and recording: %w", err)
	}
	return row, nil
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes.
func loadAverage() string {
	load, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(load))[:3], ", ")
}

// setUp starts the hub and the registry behind its proxy, pushes the chart's two versions and
// its images, and creates the namespaces and their Products at the first version.
func (r *renderRun) setUp() error {
	start := time.Now()
	if err := r.setUpHub(hubOptions{}, argocdNamespace); err != nil {
		return err
	}
	var err error
	if r.proxy, err = startCountingProxy(r.reg.Addr); err != nil {
		return err
	}
	r.registry = r.proxy.addr
	podinfo := r.registry + "/stefanprodan/podinfo"
	initImage := r.registry + "/library/busybox:1.37"
	for ref, platforms := range map[string]int{podinfo + ":6.14.1": 2, initImage: 1} {
		if err := pushRandomImage(ref, platforms); err != nil {
			return err
		}
	}
	for _, version := range []string{renderVersion1, renderVersion2} {
		files := map[string][]byte{}
		for path, text := range ocitest.PodinfoFiles {
			if path == "Chart.yaml" {
				text = strings.ReplaceAll(text, "version: "+renderVersion1, "version: "+version)
			}
			files["podinfo/"+path] = []byte(text)
		}
		archive, err := oci.TarGz(files)
		if err != nil {
			return fmt.Errorf("pack chart %s: %w", version, err)
		}
		if _, _, err := chart.Push(archive, "oci://"+r.registry+"/charts", chart.PushOptions{PlainHTTP: true}); err != nil {
			return fmt.Errorf("push chart %s: %w", version, err)
		}
	}
	r.chartURL = "oci://" + r.registry + "/charts/podinfo"
	// As the Product's values read back from JSON, so that the bare pipeline renders the same.
	raw, err := json.Marshal(map[string]any{"image": map[string]any{"repository": podinfo}, "initImage": initImage})
	if err != nil {
		return fmt.Errorf("encode the values: %w", err)
	}
	if err := json.Unmarshal(raw, &r.values); err != nil {
		return fmt.Errorf("decode the values: %w", err)
	}
	for i := range r.ro.Namespaces {
		ns := fmt.Sprintf("render-%03d", i)
		r.namespaces = append(r.namespaces, ns)
		if err := r.admin.Create(r.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
		if err := r.admin.Create(r.ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: renderProduct, Namespace: ns}, Spec: v1.ProductSpec{
			Source:          v1.ProductSource{URL: r.chartURL, Version: renderVersion1},
			TargetNamespace: renderTargetNS,
			Render:          &v1.RenderSpec{Helm: &v1.HelmRender{Values: &apiextensionsv1.JSON{Raw: raw}}},
			Images:          v1.ImageSpec{Policy: v1.ImagePolicyPin},
		}}); err != nil {
			return fmt.Errorf("create the Product of %s: %w", ns, err)
		}
	}
	for i := range r.ro.N {
		r.orders = append(r.orders, types.NamespacedName{Namespace: r.namespaces[i%len(r.namespaces)], Name: fmt.Sprintf("podinfo-%04d", i)})
	}
	if r.watch, err = r.watchReady(); err != nil {
		return err
	}
	r.logf("hub, registry (behind a counting proxy at %s), chart %s and %s, %d Products up in %s",
		r.registry, renderVersion1, renderVersion2, len(r.namespaces), time.Since(start).Round(time.Millisecond))
	return nil
}

// pushRandomImage pushes a small random image to ref, an index of platforms images when more
// than one.
func pushRandomImage(ref string, platforms int) error {
	parsed, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return fmt.Errorf("parse %s: %w", ref, err)
	}
	if platforms > 1 {
		idx, err := random.Index(256, 1, int64(platforms))
		if err != nil {
			return fmt.Errorf("make an index: %w", err)
		}
		if err := remote.WriteIndex(parsed, idx); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		return nil
	}
	img, err := random.Image(256, 1)
	if err != nil {
		return fmt.Errorf("make an image: %w", err)
	}
	if err := remote.Write(parsed, img); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// kokumiPasses starts the controller and times its two passes.
func (r *renderRun) kokumiPasses(row *RenderRow) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	metricsAddr := "127.0.0.1:" + strconv.Itoa(port)
	r.metricsURL = "http://" + metricsAddr + "/metrics"
	args := []string{"controller",
		"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false", "--health-probe-bind-address=0",
		"--argocd-namespace=" + argocdNamespace, "--namespace=" + ControllerNamespace,
		"--bundled-registry=" + r.registry,
	}
	pprofAddr := ""
	if r.ro.ProfileDir != "" {
		if port, err = freePort(); err != nil {
			return err
		}
		pprofAddr = "127.0.0.1:" + strconv.Itoa(port)
		args = append(args, "--pprof-bind-address="+pprofAddr)
	}
	args = append(args, r.ro.ControllerArgs...)
	if r.kokumi, err = startProcess("kokumi controller", filepath.Join(r.dir, "kokumi-controller.log"), r.ro.KokumiBinary, args,
		[]string{"KUBECONFIG=" + r.hub.controllerKubeconfig}); err != nil {
		return err
	}
	r.logf("kokumi %s", strings.Join(args, " "))
	if err := r.warmUp(); err != nil {
		return err
	}
	if row.Create, err = r.pass(renderVersion1, "N Orders created", func() error {
		return parallel(16, len(r.orders), func(i int) error {
			o := r.orders[i]
			if err := r.admin.Create(r.ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace}, Spec: v1.OrderSpec{
				ProductRef: v1.LocalObjectReference{Name: renderProduct}, EnvironmentRef: v1.LocalObjectReference{Name: environmentName},
				Promotion: v1.Promotion{Mode: v1.PromotionManual},
			}}); err != nil {
				return fmt.Errorf("create Order %s: %w", o, err)
			}
			return nil
		})
	}); err != nil {
		return err
	}
	// What the first pass left to do (status writes, requeues) is not the second's.
	time.Sleep(3 * time.Second)
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"source":{"version":"`+renderVersion2+`"}}}`))
	row.Change, err = r.pass(renderVersion2, "Products at "+renderVersion2, func() error {
		if r.ro.ProfileDir != "" {
			r.profile(pprofAddr)
		}
		return parallel(16, len(r.namespaces), func(i int) error {
			if err := r.admin.Patch(r.ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: renderProduct, Namespace: r.namespaces[i]}}, patch); err != nil {
				return fmt.Errorf("move the Product of %s to %s: %w", r.namespaces[i], renderVersion2, err)
			}
			return nil
		})
	})
	return err
}

// profile takes, in the background, 15 s CPU profiles of the API server, of the controller (its
// pprof at pprofAddr) and of this process into ProfileDir.
func (r *renderRun) profile(pprofAddr string) {
	const seconds = "15"
	save := func(name string, get func() ([]byte, error)) {
		b, err := get()
		if err == nil {
			err = os.WriteFile(filepath.Join(r.ro.ProfileDir, fmt.Sprintf("%s-%d.pprof", name, r.ro.N)), b, 0o644)
		}
		if err != nil {
			r.logf("no CPU profile of the %s: %v", name, err)
		}
	}
	go save("apiserver", func() ([]byte, error) {
		dc, err := discovery.NewDiscoveryClientForConfig(r.hub.admin)
		if err != nil {
			return nil, err
		}
		return dc.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", seconds).Timeout(time.Minute).DoRaw(r.ctx)
	})
	go save("bench", func() ([]byte, error) {
		// This process: the registry, its counting proxy and the watch of the Orders.
		var b bytes.Buffer
		if err := pprof.StartCPUProfile(&b); err != nil {
			return nil, err
		}
		time.Sleep(15 * time.Second)
		pprof.StopCPUProfile()
		return b.Bytes(), nil
	})
	go save("controller", func() ([]byte, error) {
		resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/profile?seconds=" + seconds)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close() //nolint:errcheck // read to the end
		return io.ReadAll(resp.Body)
	})
}

// pass runs start and times until every Order has a Ready Preparation at version, counting
// the registry's requests and the controller's requests to the API server meanwhile.
func (r *renderRun) pass(version, what string, start func() error) (Pass, error) {
	api0, err := scrapeCounter(r.metricsURL, "rest_client_requests_total")
	if err != nil {
		return Pass{}, err
	}
	r.proxy.reset()
	began := r.watch.expect(version)
	if err := start(); err != nil {
		return Pass{}, err
	}
	total, err := waitCount(r.ctx, began, r.opts.Timeout, "every Order with a Ready Preparation at "+version, len(r.orders), func() (int, error) {
		return r.watch.count(), nil
	}, r.kokumi.alive)
	if err != nil {
		return Pass{}, err
	}
	p := Pass{Total: total, PerOrder: r.watch.times()}
	p.Registry, p.RegistryBy = r.proxy.counts()
	api1, err := scrapeCounter(r.metricsURL, "rest_client_requests_total")
	if err != nil {
		return p, err
	}
	p.API = api1 - api0
	r.logf("%s → %d Orders with a Ready Preparation at %s in %s (p50 %s, p99 %s); %d registry requests, %d API requests",
		what, len(r.orders), version, total.Round(time.Millisecond), p.P(0.5).Round(time.Millisecond), p.P(0.99).Round(time.Millisecond), p.Registry, p.API)
	return p, nil
}

// bare does the change pass's work without Kokumi: for each Order, with BareWorkers workers,
// pull the chart at the second version, render it (renderer; in process when nil), resolve
// its images' tags, and push the artifact to the same registry (under dir/, beside Kokumi's).
func (r *renderRun) bare(dir string, renderer func(context.Context, []oci.Layer, render.Options) (*render.Result, error),
	record ...func(o types.NamespacedName, sources *oci.Client, repository, digest string) error) (Pass, error) {
	b := &build.Builder{Sources: &oci.Client{}, Images: &images.Resolver{}, Render: renderer}
	r.proxy.reset()
	times := make([]time.Duration, len(r.orders))
	// BareWorkers builds (pull, render, images) at a time, as the controller's render slots; a
	// pass that records its renders does it with as many workers as the controller's Order
	// reconciles, which push and write after the slot is given back.
	workers, slots := r.ro.BareWorkers, make(chan struct{}, r.ro.BareWorkers)
	if len(record) > 0 {
		workers = max(workers, config.DefaultConcurrency[config.OrderConcurrency])
	}
	began := time.Now()
	err := parallel(workers, len(r.orders), func(i int) error {
		o := r.orders[i]
		in := build.Input{SourceURL: r.chartURL, Version: renderVersion2, Render: render.Options{
			ReleaseName: o.Name, TargetNamespace: renderTargetNS, Values: r.values, RequireChart: true,
		}}
		slots <- struct{}{}
		built, err := b.Build(r.ctx, in)
		<-slots
		if err != nil {
			return fmt.Errorf("build %s: %w", o, err)
		}
		repository := r.registry + "/" + dir + "/" + o.Namespace + "/" + o.Name
		digest, err := b.Push(r.ctx, repository, in, built, "")
		if err != nil {
			return fmt.Errorf("push %s: %w", o, err)
		}
		for _, rec := range record {
			if err := rec(o, b.Sources, repository, digest); err != nil {
				return err
			}
		}
		times[i] = time.Since(began)
		return nil
	})
	if err != nil {
		return Pass{}, err
	}
	p := Pass{Total: time.Since(began), PerOrder: times, API: -1}
	slices.Sort(p.PerOrder)
	p.Registry, p.RegistryBy = r.proxy.counts()
	r.logf("%s: %d Orders rendered, resolved and pushed in %s (p50 %s, p99 %s); %d registry requests",
		dir, len(r.orders), p.Total.Round(time.Millisecond), p.P(0.5).Round(time.Millisecond), p.P(0.99).Round(time.Millisecond), p.Registry)
	return p, nil
}

// apiRecorder makes, as the controller, the writes the controller makes for a render: it marks
// the render in flight in the Order's status, reads the signing key and signs and attaches the
// render's provenance to the artifact, creates the Preparation (a copy of the one the controller
// made for the Order at the second version, under another name), marks it Ready, records it in
// the Order's status, and records the event.
type apiRecorder struct {
	ctx    context.Context
	writer client.Client
	preps  map[types.NamespacedName]*v1.Preparation
	orders map[types.NamespacedName]*v1.Order
}

// recorder reads, before the pass, the Orders and the Preparations the controller made at the
// second version, and signs in as the controller.
func (r *renderRun) recorder() (*apiRecorder, error) {
	rec := &apiRecorder{ctx: r.ctx, preps: map[types.NamespacedName]*v1.Preparation{}, orders: map[types.NamespacedName]*v1.Order{}}
	var err error
	if rec.writer, err = r.asController(); err != nil {
		return nil, err
	}
	var preps v1.PreparationList
	if err := r.admin.List(r.ctx, &preps); err != nil {
		return nil, fmt.Errorf("list the Preparations: %w", err)
	}
	for i := range preps.Items {
		p := &preps.Items[i]
		if p.Spec.Source.Version == renderVersion2 {
			rec.preps[types.NamespacedName{Namespace: p.Namespace, Name: p.Labels[preparation.LabelOrder]}] = p
		}
	}
	var orders v1.OrderList
	if err := r.admin.List(r.ctx, &orders); err != nil {
		return nil, fmt.Errorf("list the Orders: %w", err)
	}
	for i := range orders.Items {
		rec.orders[client.ObjectKeyFromObject(&orders.Items[i])] = &orders.Items[i]
	}
	return rec, nil
}

// record makes the writes of o's render, whose artifact sources pushed to repository at digest.
func (a *apiRecorder) record(o types.NamespacedName, sources *oci.Client, repository, digest string) error {
	ctx := a.ctx
	made, order := a.preps[o], a.orders[o]
	if made == nil || order == nil {
		return fmt.Errorf("no Preparation at %s of Order %s to record a copy of", renderVersion2, o)
	}
	// The render in flight, as the controller marks it in status.renderRetry.
	markBase := order.DeepCopy()
	order.Status.RenderRetry = &v1.RenderRetry{Input: "bench", Failures: 1, NotBefore: metav1.NewTime(time.Now().Add(time.Minute).Truncate(time.Second))}
	if err := a.writer.Status().Patch(ctx, order, client.MergeFromWithOptions(markBase, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("mark the render of Order %s in flight: %w", o, err)
	}
	// The provenance, signed with the key the controller reads for each render.
	var secret corev1.Secret
	if err := a.writer.Get(ctx, client.ObjectKey{Namespace: ControllerNamespace, Name: record.SecretName}, &secret); err != nil {
		return fmt.Errorf("read the signing key: %w", err)
	}
	signer, err := record.ParseSigner(secret.Data[record.SecretKey])
	if err != nil {
		return fmt.Errorf("signing key: %w", err)
	}
	if _, err := provenance.Attach(ctx, &record.Store{Client: sources}, signer, repository, digest, provenance.Render{
		Namespace: o.Namespace, Order: o.Name, Product: made.Labels[preparation.LabelOrder],
		SourceURL: made.Spec.Source.URL, Version: made.Spec.Source.Version, SourceDigest: made.Spec.Source.Digest,
	}); err != nil {
		return fmt.Errorf("attach the provenance of Order %s: %w", o, err)
	}
	prep := made.DeepCopy()
	prep.ObjectMeta = metav1.ObjectMeta{Name: made.Name + "-bare", Namespace: made.Namespace, Labels: made.Labels,
		Annotations: made.Annotations, OwnerReferences: made.OwnerReferences}
	prep.Status = v1.PreparationStatus{}
	if err := a.writer.Create(ctx, prep); err != nil {
		return fmt.Errorf("create Preparation %s: %w", prep.Name, err)
	}
	base := prep.DeepCopy()
	meta.SetStatusCondition(&prep.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1.ReasonRendered, Message: "Rendered and pushed to " + prep.Spec.Artifact.Ref, ObservedGeneration: prep.Generation})
	if err := a.writer.Status().Patch(ctx, prep, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("mark Preparation %s Ready: %w", prep.Name, err)
	}
	orderBase := order.DeepCopy()
	order.Status.LatestPreparation = prep.Name
	if err := a.writer.Status().Patch(ctx, order, client.MergeFromWithOptions(orderBase, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("record Preparation %s in Order %s: %w", prep.Name, o, err)
	}
	now := time.Now()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", order.Name, now.UnixNano()), Namespace: order.Namespace},
		EventTime:  metav1.NewMicroTime(now), ReportingController: "kokumi-order", ReportingInstance: "kokumi-order-bench",
		Action: "Render", Reason: v1.ReasonRendered, Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{Kind: "Order", APIVersion: v1.GroupVersion.String(), Namespace: order.Namespace, Name: order.Name, UID: order.UID, ResourceVersion: order.ResourceVersion},
		Related:   &corev1.ObjectReference{Kind: "Preparation", APIVersion: v1.GroupVersion.String(), Namespace: prep.Namespace, Name: prep.Name, UID: prep.UID},
		Note:      fmt.Sprintf("Rendered Preparation %s (%s) into %s", prep.Name, prep.Spec.Source.URL, prep.Spec.Artifact.Ref),
	}
	if err := a.writer.Create(ctx, ev); err != nil {
		return fmt.Errorf("record the event of Order %s: %w", o, err)
	}
	return nil
}

// readyWatch records when each Order first has a Ready Preparation at the expected version.
type readyWatch struct {
	mu      sync.Mutex
	version string
	began   time.Time
	ready   map[types.NamespacedName]time.Duration
}

// watchReady watches every Preparation.
func (r *renderRun) watchReady() (*readyWatch, error) {
	w := &readyWatch{ready: map[types.NamespacedName]time.Duration{}}
	inf, err := r.obs.cache.GetInformer(r.ctx, &v1.Preparation{})
	if err != nil {
		return nil, fmt.Errorf("informer of Preparations: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.see(obj) },
		UpdateFunc: func(_, obj any) { w.see(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watch Preparations: %w", err)
	}
	return w, nil
}

// expect starts a pass at version: nothing is ready at it yet. It returns the pass's start.
func (w *readyWatch) expect(version string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.version, w.began = version, time.Now()
	clear(w.ready)
	return w.began
}

func (w *readyWatch) see(obj any) {
	p, ok := obj.(*v1.Preparation)
	if !ok || !meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionReady) {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.OrderRef.Name}
	if _, seen := w.ready[key]; !seen && p.Spec.Source.Version == w.version && !w.began.IsZero() {
		w.ready[key] = now.Sub(w.began)
	}
}

func (w *readyWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ready)
}

// times are the Orders' times so far, sorted.
func (w *readyWatch) times() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]time.Duration, 0, len(w.ready))
	for _, d := range w.ready {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// scrapeCounter sums every series of a counter from a Prometheus text endpoint.
func scrapeCounter(url, name string) (int64, error) {
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	var sum float64
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("scrape %s: %q: %w", name, line, err)
		}
		sum += v
	}
	return int64(sum), nil
}

// countingProxy forwards to a registry and counts the requests, by method and kind.
type countingProxy struct {
	addr string
	srv  *http.Server
	mu   sync.Mutex
	by   map[string]int64
}

// startCountingProxy serves a proxy to the registry at target (host:port) on a loopback port.
func startCountingProxy(target string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the registry's proxy: %w", err)
	}
	p := &countingProxy{addr: ln.Addr().String(), by: map[string]int64{}}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	p.srv = &http.Server{ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p.mu.Lock()
		p.by[req.Method+" "+requestKind(req.URL.Path)]++
		p.mu.Unlock()
		rp.ServeHTTP(w, req)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// requestKind names what a registry request is about, from the distribution API's path.
func requestKind(path string) string {
	for _, kind := range []string{"/blobs/uploads", "/manifests/", "/blobs/", "/tags/", "/referrers/"} {
		if strings.Contains(path, kind) {
			return strings.Trim(kind, "/")
		}
	}
	return path
}

func (p *countingProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.by)
}

func (p *countingProxy) counts() (int64, map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var total int64
	by := make(map[string]int64, len(p.by))
	for k, v := range p.by {
		total += v
		by[k] = v
	}
	return total, by
}

func (p *countingProxy) close() { _ = p.srv.Close() }

// RenderHeader is the header of RenderRow's table.
const RenderHeader = "| N | pass | total | p50 per Order | p99 per Order | registry requests per Order | API requests per Order |\n" +
	"|---:|---|---:|---:|---:|---:|---:|\n"

// Markdown is the row as lines of the table, then the ratio and the registry's requests by kind.
func (r RenderRow) Markdown() string {
	var b strings.Builder
	line := func(what string, p Pass) {
		api := "–"
		if p.API >= 0 {
			api = fmt.Sprintf("%.1f", float64(p.API)/float64(r.N))
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %.1f | %s |\n", r.N, what, secs(p.Total), secs(p.P(0.5)), secs(p.P(0.99)),
			float64(p.Registry)/float64(r.N), api)
	}
	line("Kokumi: N Orders created", r.Create)
	line("Kokumi: chart version changed", r.Change)
	line(fmt.Sprintf("bare pipeline, %d workers, render in process", r.BareWorkers), r.Bare)
	line(fmt.Sprintf("bare pipeline, %d workers, render in a child", r.BareWorkers), r.BareChild)
	line(fmt.Sprintf("bare pipeline, %d workers (%d building), render in a child, Kokumi's 5 API writes and signed provenance per render",
		max(r.BareWorkers, config.DefaultConcurrency[config.OrderConcurrency]), r.BareWorkers), r.BareRecorded)
	return b.String()
}

// Details are the ratios, the load, the registry's requests by kind and the notes.
func (r RenderRow) Details() string {
	var b strings.Builder
	fmt.Fprintf(&b, "N = %d over %d namespaces; load average when it began: %s\n", r.N, r.Namespaces, r.Load)
	fmt.Fprintf(&b, "- Kokumi / bare (change pass): **%s**; Kokumi / bare rendering in a child: %s\n",
		times(r.Ratio()), times(ratio(r.Change.Total, r.BareChild.Total)))
	if r.BareRecorded.Total > 0 {
		fmt.Fprintf(&b, "- bare rendering in a child and writing what Kokumi writes / bare: %s; Kokumi / that: %s\n",
			times(ratio(r.BareRecorded.Total, r.Bare.Total)), times(r.RecordedRatio()))
	}
	if child, ok := r.ChildCost(); ok {
		fmt.Fprintf(&b, "- the render child costs about %s per render (bare in a child − bare in process, per Order and worker)\n", child.Round(time.Millisecond))
	}
	for _, p := range []struct {
		what string
		pass Pass
	}{{"Kokumi created", r.Create}, {"Kokumi changed", r.Change}, {"bare", r.Bare}} {
		if p.pass.Registry > 0 {
			fmt.Fprintf(&b, "- registry requests, %s: %s\n", p.what, byVerb(p.pass.RegistryBy))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}
