package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
)

// Names of what a stall run creates for the gated Servings: a namespace each, one Cluster they
// all deploy to, and an AppProject of theirs.
const (
	gatedPrefix  = "gated-"
	gatedCluster = "gated-00000"
	gatedTier    = "gated"
	gatedProject = "bench-gated"
)

// StallOptions configure one stall run (RunStall). Of Options, N, KokumiBinary,
// ControllerArgs, Timeout, WorkDir, KeepWorkDir and Log are used; ControllerArgs must let the
// controller reach the hanging endpoint on 127.0.0.1 (--verify-allowed-cidrs=127.0.0.1/32).
type StallOptions struct {
	Options
	// Gated is how many Servings of other tenants verify against an endpoint that hangs.
	Gated int
	// Hang is how long the endpoint holds each request before it answers (and each check's
	// timeout, at most 60 s).
	Hang time.Duration
	// Hanging is how many checks must be held in the endpoint before the gated promotion is
	// timed; zero is Gated. A controller that runs its checks in its Serving workers (before
	// the checks had a pool of their own) holds at most --serving-concurrency of them: 4.
	Hanging int
	// HealthDelay is how long after Kokumi points an Application at a revision the harness,
	// playing Argo CD, reports it Synced and Healthy there.
	HealthDelay time.Duration
}

// StallRow is what one stall run measured.
type StallRow struct {
	N, GatedServings int
	Hang             time.Duration
	// Ungated is from promoting the measured tenant's Serving until it is Deployed on its N
	// clusters, with no gated Serving on the hub; Gated, the same while every gated Serving's
	// check hangs in its endpoint.
	Ungated, Gated time.Duration
	// HangingBefore and HangingAfter are how many checks were held in the endpoint when the
	// gated promotion started and when it was Deployed.
	HangingBefore, HangingAfter int
}

// Ratio is Gated over Ungated (0: not measured).
func (r StallRow) Ratio() float64 { return ratio(r.Gated, r.Ungated) }

// StallTable is a Markdown table of rows.
func StallTable(rows []StallRow) string {
	var b strings.Builder
	b.WriteString("| clusters | gated Servings (endpoint hangs) | promotion → Deployed, no gated Serving | the same, gated Servings' checks hanging | ratio | checks hanging at start / at Deployed |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %d (%s) | %s | %s | %.2f× | %d / %d |\n", r.N, r.GatedServings, r.Hang, r.Ungated.Round(time.Millisecond),
			r.Gated.Round(time.Millisecond), r.Ratio(), r.HangingBefore, r.HangingAfter)
	}
	return b.String()
}

// RunStall brings up a hub, opts.N fake members and the controller, plays Argo CD, and times a
// tenant's promotion to Deployed on its N clusters twice: with no other Serving on the hub,
// then while opts.Gated Servings of other tenants, each in a namespace of its own, verify
// against an endpoint that holds every request for opts.Hang. HTTP checks run off the
// reconcile, so the second promotion should take about as long as the first.
func RunStall(ctx context.Context, opts StallOptions) (row *StallRow, err error) {
	if opts.N <= 0 || opts.Gated <= 0 || opts.Hang <= 0 {
		return nil, fmt.Errorf("clusters (%d), gated Servings (%d) and the hang (%s) must be positive", opts.N, opts.Gated, opts.Hang)
	}
	if opts.KokumiBinary == "" {
		return nil, errors.New("no kokumi binary: build one with BuildKokumi")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := newRun(ctx, opts.Options)
	if err != nil {
		return nil, err
	}
	defer r.finish(&err)
	hang, err := startHanging(opts.Hang)
	if err != nil {
		return nil, err
	}
	defer hang.close()
	row = &StallRow{N: opts.N, GatedServings: opts.Gated, Hang: opts.Hang}
	return row, r.stall(row, opts, hang)
}

func (r *run) stall(row *StallRow, opts StallOptions, hang *hanging) error {
	start := time.Now()
	if err := r.setUpHub(hubOptions{}, argocdNamespace); err != nil {
		return err
	}
	var preps [3]prep
	for i := range preps {
		var err error
		if preps[i], err = r.preparationIn(tenantNamespace, orderName, fmt.Sprintf("%s-%d", orderName, i+1)); err != nil {
			return err
		}
	}
	if err := r.setUpGated(opts, hang.url); err != nil {
		return err
	}
	r.logf("hub, members, registry, RBAC and %d gated tenants up in %s", opts.Gated, time.Since(start).Round(time.Millisecond))
	if err := r.startController(); err != nil {
		return fmt.Errorf("run kokumi controller: %w", err)
	}
	alive := r.kokumi.alive

	n := r.opts.N
	start = time.Now()
	if err := parallel(16, n, func(i int) error { return r.createCluster(ClusterName(i), environmentName) }); err != nil {
		return err
	}
	if err := r.createLabeledCluster(gatedCluster, map[string]string{"tier": gatedTier}); err != nil {
		return err
	}
	argo, err := r.deployFirst(start, n+1, "", opts.HealthDelay, map[string]string{}, preps[0], alive)
	if err != nil {
		return err
	}
	defer argo.stop()

	// (a) No gated Serving.
	if row.Ungated, err = r.promote(preps[1], alive); err != nil {
		return err
	}
	r.logf("no gated Serving: promotion → %d clusters Deployed at %s in %s", n, preps[1].name, row.Ungated.Round(time.Millisecond))

	// (b) The gated Servings deploy, and their checks hang in the endpoint.
	for i := range opts.Gated {
		if err := r.createGatedOrder(gatedPrefix+fmt.Sprint(i), gatedPrefix+"1"); err != nil {
			return err
		}
	}
	hanging := opts.Hanging
	if hanging <= 0 {
		hanging = opts.Gated
	}
	if _, err := waitCount(r.ctx, time.Now(), r.opts.Timeout, fmt.Sprintf("%d gated Servings' checks held in the endpoint", hanging), hanging, func() (int, error) {
		return int(hang.holding.Load()), nil
	}, alive); err != nil {
		return err
	}
	row.HangingBefore = int(hang.holding.Load())
	if row.Gated, err = r.promote(preps[2], alive); err != nil {
		return err
	}
	row.HangingAfter = int(hang.holding.Load())
	r.logf("%d gated Servings, %d checks hanging: promotion → %d clusters Deployed at %s in %s (%d checks hanging then)",
		opts.Gated, row.HangingBefore, n, preps[2].name, row.Gated.Round(time.Millisecond), row.HangingAfter)
	return argo.failed()
}

// setUpGated creates the gated tenants' namespaces, their AppProject, and in each namespace an
// Environment of the gated Cluster that verifies against url (each run failing after the hang,
// a hundred of them before the verification fails) and a Preparation.
func (r *run) setUpGated(opts StallOptions, url string) error {
	var namespaces []string
	for i := range opts.Gated {
		namespaces = append(namespaces, gatedPrefix+fmt.Sprint(i))
	}
	project := sandbox.AppProject(argocdNamespace, gatedProject, sandbox.AppProjectSpec{
		SourceRepos: []string{"*"}, SourceNamespaces: namespaces,
		Destinations: []sandbox.AppProjectDestination{{Server: "*", Namespace: "*"}},
	})
	if err := r.admin.Create(r.ctx, project); err != nil {
		return fmt.Errorf("create the gated AppProject: %w", err)
	}
	timeout := min(opts.Hang, 60*time.Second)
	for _, ns := range namespaces {
		if err := r.admin.Create(r.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
		if err := r.admin.Create(r.ctx, &v1.Environment{
			ObjectMeta: metav1.ObjectMeta{Name: environmentName, Namespace: ns},
			Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": gatedTier}}, Project: gatedProject,
				Verify: []v1.Verification{{Name: "health", FailureLimit: 100, Interval: &metav1.Duration{Duration: time.Second},
					HTTP: &v1.HTTPVerification{URL: url + "/" + ns + "/healthz", SuccessCondition: "true", Timeout: &metav1.Duration{Duration: timeout}}}}},
		}); err != nil {
			return fmt.Errorf("create the Environment of %s: %w", ns, err)
		}
		if _, err := r.preparationIn(ns, orderName, gatedPrefix+"1"); err != nil {
			return err
		}
	}
	return nil
}

// createGatedOrder creates the Order and Serving of the gated tenant ns at preparation. They
// have the measured Serving's name, so that the harness plays Argo CD for them too.
func (r *run) createGatedOrder(ns, preparation string) error {
	if err := r.admin.Create(r.ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: ns}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: productName}, EnvironmentRef: v1.LocalObjectReference{Name: environmentName},
		Promotion: v1.Promotion{Mode: v1.PromotionManual},
	}}); err != nil {
		return fmt.Errorf("create the Order of %s: %w", ns, err)
	}
	if err := r.admin.Create(r.ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: ns}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: orderName}, PreparationName: preparation, PromotedBy: r.adminName,
	}}); err != nil {
		return fmt.Errorf("create the Serving of %s: %w", ns, err)
	}
	return nil
}

// hanging is an HTTP endpoint on loopback that holds each request for a while, or until its
// client goes, then answers 200.
type hanging struct {
	url     string
	srv     *http.Server
	holding atomic.Int32
}

func startHanging(d time.Duration) (*hanging, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the hanging endpoint: %w", err)
	}
	h := &hanging{url: "http://" + ln.Addr().String()}
	h.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.holding.Add(1)
		defer h.holding.Add(-1)
		select {
		case <-time.After(d):
		case <-req.Context().Done():
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	})}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

func (h *hanging) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
	_ = h.srv.Close()
}
