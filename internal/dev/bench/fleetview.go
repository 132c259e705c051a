package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// FleetViewHeader is the header and separator lines of RunFleetView's table.
const FleetViewHeader = "| clusters × Orders | Applications | server start → first full page | first page p50 | first page max | state filter p50 | server writes while serving |\n" +
	"|---:|---:|---:|---:|---:|---:|---:|\n"

// fleetViewToken is the admin token of the server RunFleetView starts.
const fleetViewToken = "bench-fleet-view-token-0123456789"

// FleetViewOptions configure RunFleetView. Of Options, N is the number of clusters; KokumiBinary,
// Timeout, WorkDir, KeepWorkDir and Log mean what they mean for Run; the rest is not used.
type FleetViewOptions struct {
	Options
	// Orders is how many Orders deploy to every cluster, each with an Application on each (1
	// when zero).
	Orders int
	// Requests is how many times each page is asked for once the server holds everything (20
	// when zero).
	Requests int
}

// FleetViewRow is what RunFleetView measured. A zero duration was not measured.
type FleetViewRow struct {
	Clusters, Orders, Applications int
	// Ready is from the server's start until it answers a first page of the whole fleet.
	Ready time.Duration
	// FirstP50 and FirstMax are the first page's (view.DefaultFleetLimit rows) answer times, as
	// the client measured them; StateP50 is a page filtered by state's.
	FirstP50, FirstMax, StateP50 time.Duration
	// Writes counts the server's write requests from its start until it stopped (-1: not
	// counted); WritesBy by verb and resource.
	Writes   int64
	WritesBy map[string]int64
	Notes    []string
}

// Markdown is the row of FleetViewHeader's table.
func (f FleetViewRow) Markdown() string {
	ms := func(d time.Duration) string {
		if d == 0 {
			return "—"
		}
		return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
	}
	writes := "—"
	if f.Writes >= 0 {
		writes = strconv.FormatInt(f.Writes, 10)
		if len(f.WritesBy) > 0 {
			writes += " (" + byVerb(f.WritesBy) + ")"
		}
	}
	row := fmt.Sprintf("| %d × %d | %d | %s | %s | %s | %s | %s |\n", f.Clusters, f.Orders, f.Applications,
		f.Ready.Round(time.Millisecond), ms(f.FirstP50), ms(f.FirstMax), ms(f.StateP50), writes)
	for _, n := range f.Notes {
		row += "\n- " + n
	}
	return row
}

// RunFleetView measures the fleet view's API on the real API server: opts.N Ready Clusters of
// one Environment, opts.Orders Orders deploying there, every cluster with an Application of each
// (as large as Argo CD writes them, put straight into etcd), and `kokumi server` reading them
// through its cache. It times the first page (view.DefaultFleetLimit clusters) and a page
// filtered by state, and counts the server's writes, from its start to its end (the server
// runs as the controller's ServiceAccount, whose writes the hub audits).
func RunFleetView(ctx context.Context, opts FleetViewOptions) (row *FleetViewRow, err error) {
	if opts.N <= 0 {
		return nil, fmt.Errorf("the number of clusters must be positive, not %d", opts.N)
	}
	if opts.KokumiBinary == "" {
		return nil, fmt.Errorf("no kokumi binary: build one with BuildKokumi")
	}
	if opts.Orders <= 0 {
		opts.Orders = 1
	}
	if opts.Requests <= 0 {
		opts.Requests = 20
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := newRun(ctx, opts.Options)
	if err != nil {
		return nil, err
	}
	defer r.finish(&err)
	row = &FleetViewRow{Clusters: opts.N, Orders: opts.Orders, Writes: -1}
	start := time.Now()
	if err := r.setUpHub(hubOptions{bulk: true}, bareNamespace); err != nil {
		return row, err
	}
	preps, err := r.manualOrders(opts.Orders)
	if err != nil {
		return row, err
	}
	if err := parallel(16, opts.N, func(i int) error { return r.readyCluster(ClusterName(i)) }); err != nil {
		return row, err
	}
	if err := r.createServings(preps); err != nil {
		return row, err
	}
	// Deployed at the Preparation: the clusters that run it are Healthy.
	for i := range preps {
		var sv v1.Serving
		if err := r.admin.Get(r.ctx, client.ObjectKey{Namespace: tenantNamespace, Name: servingName(i)}, &sv); err != nil {
			return row, fmt.Errorf("get Serving %s: %w", servingName(i), err)
		}
		sv.Status.Revision = preps[i].digest
		if err := r.admin.Status().Update(r.ctx, &sv); err != nil {
			return row, fmt.Errorf("write the status of Serving %s: %w", sv.Name, err)
		}
	}
	r.logf("hub, %d Orders and %d Ready Clusters in %s", opts.Orders, opts.N, time.Since(start).Round(time.Millisecond))
	filled := &MemoryRow{}
	if err := r.fillEtcd(filled, preps, 16); err != nil {
		return row, err
	}
	row.Applications = filled.Applications
	if err := r.serveFleet(row, opts); err != nil {
		return row, fmt.Errorf("run kokumi server: %w", err)
	}
	return row, nil
}

// manualOrders creates n Orders of the Environment that promote by hand (named servingName(i)),
// each with a Preparation and its artifact, and returns the Preparations.
func (r *run) manualOrders(n int) ([]prep, error) {
	preps := make([]prep, n)
	err := parallel(8, n, func(i int) error {
		name := servingName(i)
		p, err := r.preparation(name, name+"-1")
		if err != nil {
			return err
		}
		preps[i] = p
		if err := r.admin.Create(r.ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenantNamespace}, Spec: v1.OrderSpec{
			ProductRef: v1.LocalObjectReference{Name: productName}, EnvironmentRef: v1.LocalObjectReference{Name: environmentName},
			Promotion: v1.Promotion{Mode: v1.PromotionManual},
		}}); err != nil {
			return fmt.Errorf("create Order %s: %w", name, err)
		}
		return nil
	})
	return preps, err
}

// readyCluster creates the Cluster name of the Environment, Ready as its probe would say.
func (r *run) readyCluster(name string) error {
	if err := r.createCluster(name, environmentName); err != nil {
		return err
	}
	var c v1.Cluster
	if err := r.admin.Get(r.ctx, client.ObjectKey{Name: name}, &c); err != nil {
		return fmt.Errorf("get Cluster %s: %w", name, err)
	}
	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonConnected, Message: "the bench says so"})
	if err := r.admin.Status().Update(r.ctx, &c); err != nil {
		return fmt.Errorf("make Cluster %s Ready: %w", name, err)
	}
	return nil
}

// serveFleet starts `kokumi server` as the controller's ServiceAccount, waits until its first
// page of the fleet view holds every cell Healthy, times the pages, and counts its writes.
func (r *run) serveFleet(row *FleetViewRow, opts FleetViewOptions) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(r.dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(fleetViewToken), 0o600); err != nil {
		return fmt.Errorf("write the admin token: %w", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"server", "--bind-address=" + addr, "--health-probe-bind-address=0", "--admin-token-file=" + tokenFile,
		"--argocd-namespace=" + argocdNamespace, "--namespace=" + ControllerNamespace, "--bundled-registry=" + r.reg.Addr}
	began := time.Now()
	r.kokumi, err = startProcess("kokumi server", filepath.Join(r.dir, "kokumi-server.log"), opts.KokumiBinary, args,
		[]string{"KUBECONFIG=" + r.hub.controllerKubeconfig})
	if err != nil {
		return err
	}
	r.logf("kokumi %s", strings.Join(args, " "))
	base := "http://" + addr + "/api/v1/namespaces/" + tenantNamespace + "/environments/" + environmentName + "/fleet"
	hc := &http.Client{Timeout: time.Minute}
	healthy := opts.N * opts.Orders
	if row.Ready, err = waitCount(r.ctx, began, opts.Timeout, "a first page of the whole fleet", healthy, func() (int, error) {
		page, _, err := fleetPage(r.ctx, hc, base)
		if err != nil {
			return 0, nil // not up yet, or its cache not synced
		}
		return page.Counts["Healthy"], nil
	}, r.kokumi.alive); err != nil {
		return err
	}
	r.logf("the server answers a first page of %d clusters × %d Orders %s after its start", opts.N, opts.Orders, row.Ready.Round(time.Millisecond))
	times := func(url string) ([]time.Duration, error) {
		var out []time.Duration
		for range opts.Requests {
			_, took, err := fleetPage(r.ctx, hc, url)
			if err != nil {
				return nil, err
			}
			out = append(out, took)
		}
		slices.Sort(out)
		return out, nil
	}
	first, err := times(base)
	if err != nil {
		return err
	}
	row.FirstP50, row.FirstMax = first[len(first)/2], first[len(first)-1]
	state, err := times(base + "?state=Degraded")
	if err != nil {
		return err
	}
	row.StateP50 = state[len(state)/2]
	if m, err := r.kokumi.memory(); err == nil {
		row.Notes = append(row.Notes, fmt.Sprintf("the server's RSS after %d pages: %s (peak %s)", 2*opts.Requests, mib(m.RSS), mib(m.HWM)))
	}
	end := time.Now()
	r.kokumi.stop()
	time.Sleep(time.Second) // the audit log is written as the requests complete
	if row.Writes, row.WritesBy, err = r.hub.controllerWrites(began, end); err != nil {
		return err
	}
	r.logf("first page p50 %s, max %s; state filter p50 %s; %d writes by the server", row.FirstP50, row.FirstMax, row.StateP50, row.Writes)
	return nil
}

// fleetPage asks the server at url for a fleet page with the admin token, and returns it and how
// long the answer took.
func fleetPage(ctx context.Context, hc *http.Client, url string) (view.FleetPage, time.Duration, error) {
	var page view.FleetPage
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return page, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+fleetViewToken)
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return page, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		return page, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return page, 0, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return page, 0, fmt.Errorf("read the fleet page: %w", err)
	}
	return page, took, nil
}
