package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// What RunMemory writes into each Application's status, as Argo CD leaves it after some syncs
// of a chart of that many objects.
const (
	memoryResources = 50
	memoryHistory   = 8
)

// MemoryHeader is the header and separator lines of RunMemory's table.
const MemoryHeader = "| Servings × clusters | Applications | average size | etcd fill | start → all cached | start → every Serving Deployed | controller writes (of which Applications) | GOMEMLIMIT | Kokumi RSS |\n" +
	"|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

// MemoryOptions configure RunMemory. Of Options, N is the number of clusters; KokumiBinary,
// ControllerArgs, GoMemLimit (900MiB, the Helm chart's, when empty), Settle (10 s when zero),
// Timeout, WorkDir, KeepWorkDir and Log mean what they mean for Run; the rest is not used.
type MemoryOptions struct {
	Options
	// Servings is how many Servings deploy to every one of the N clusters (100 when zero).
	Servings int
	// FillWorkers is how many puts into etcd run at a time (16 when zero).
	FillWorkers int
	// Live starts the controller first, on a hub without Applications, puts them into etcd
	// while it watches, and creates the Servings once its cache holds them all: what the
	// controller holds once settled, without the first list of a cold start. Cached is then
	// timed from the first put, and Deployed from creating the Servings.
	Live bool
}

// MemoryRow is what RunMemory measured. A zero duration was not measured.
type MemoryRow struct {
	Servings, Clusters int
	// Applications is how many the API server lists; AverageSize is their average size as
	// JSON in etcd, in bytes.
	Applications int
	AverageSize  int64
	// Fill is how long the Applications took to put into etcd.
	Fill time.Duration
	// Cached is from the controller's start until kokumi_applications_cached counted every
	// Application; Deployed, until every Serving was Ready, Deployed, with every cluster healthy.
	Cached, Deployed time.Duration
	// Writes counts the controller's write requests from its start until its memory was read
	// (-1: not counted), by verb and resource in WritesBy; ApplicationWrites, those to
	// Applications.
	Writes, ApplicationWrites int64
	WritesBy                  map[string]int64
	// GoMemLimit is the controller's GOMEMLIMIT; Memory, its memory once every Serving was
	// Deployed and Settle passed (HWM: the peak since its start).
	GoMemLimit string
	Memory     Memory
	// Live is MemoryOptions.Live.
	Live bool
	// Notes say what else was seen.
	Notes []string
}

// Markdown is the row as a line of MemoryHeader's table.
func (m MemoryRow) Markdown() string {
	size, writes, rss := "–", "–", "–"
	if m.AverageSize > 0 {
		size = fmt.Sprintf("%.1f KB", float64(m.AverageSize)/1000)
	}
	if m.Writes >= 0 {
		writes = fmt.Sprintf("%d (%d)", m.Writes, m.ApplicationWrites)
	}
	if m.Memory.RSS > 0 {
		rss = fmt.Sprintf("%s (peak %s)", mib(m.Memory.RSS), mib(m.Memory.HWM))
	}
	mode := ""
	if m.Live {
		mode = " (live)"
	}
	return fmt.Sprintf("| %s × %s%s | %s | %s | %s | %s | %s | %s | %s | %s |\n", text.Thousands(m.Servings), text.Thousands(m.Clusters), mode,
		text.Thousands(m.Applications), size, secs(m.Fill), secs(m.Cached), secs(m.Deployed), writes, m.GoMemLimit, rss)
}

// Details lists the controller's writes by verb and resource, and the notes.
func (m MemoryRow) Details() string {
	var b strings.Builder
	what := text.Thousands(m.Servings) + " × " + text.Thousands(m.Clusters)
	if m.Live {
		fmt.Fprintf(&b, "- %s: live: the controller started on a hub without Applications; all cached is timed from the first put into etcd, every Serving Deployed from creating the Servings\n", what)
	}
	if m.Writes >= 0 {
		fmt.Fprintf(&b, "- %s: the controller's writes from its start: %d (%s)\n", what, m.Writes, byVerb(m.WritesBy))
	}
	for _, n := range m.Notes {
		fmt.Fprintf(&b, "- %s: %s\n", what, n)
	}
	return b.String()
}

// servingName names the i-th Serving of RunMemory (and its Order).
func servingName(i int) string { return fmt.Sprintf("podinfo-%03d", i) }

// RunMemory measures the controller at fleet scale: opts.Servings Servings deploying to
// opts.N clusters each, whose Applications, as large as Argo CD writes them, are put straight
// into etcd before the controller starts (through the API server that would take over an
// hour at 100,000). It times the controller's start until its cache holds them all and until
// every Serving is Deployed, counts its writes, and reads its memory (opts.Live: the controller
// starts first and the Applications arrive while it watches). The hub runs without its watch
// cache and without compaction (hubOptions.bulk).
func RunMemory(ctx context.Context, opts MemoryOptions) (row *MemoryRow, err error) {
	if opts.N <= 0 || opts.Servings < 0 {
		return nil, fmt.Errorf("the number of clusters must be positive and that of Servings not negative, not %d and %d", opts.N, opts.Servings)
	}
	if opts.KokumiBinary == "" {
		return nil, fmt.Errorf("no kokumi binary: build one with BuildKokumi")
	}
	if opts.Servings == 0 {
		opts.Servings = 100
	}
	if opts.GoMemLimit == "" {
		opts.GoMemLimit = "900MiB"
	}
	if opts.FillWorkers == 0 {
		opts.FillWorkers = 16
	}
	if opts.Settle == 0 {
		opts.Settle = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := newRun(ctx, opts.Options)
	if err != nil {
		return nil, err
	}
	defer r.finish(&err)
	row = &MemoryRow{Servings: opts.Servings, Clusters: opts.N, Writes: -1, GoMemLimit: opts.GoMemLimit, Live: opts.Live}
	start := time.Now()
	// The observer watches the Applications of an empty namespace: the bench does not cache
	// 100,000 of them too.
	if err := r.setUpHub(hubOptions{bulk: true}, bareNamespace); err != nil {
		return row, err
	}
	preps, err := r.manualOrders(opts.Servings)
	if err != nil {
		return row, err
	}
	if err := parallel(16, opts.N, func(i int) error { return r.createCluster(ClusterName(i), environmentName) }); err != nil {
		return row, err
	}
	r.logf("hub, %d Orders and Preparations and %d Clusters in %s", opts.Servings, opts.N, time.Since(start).Round(time.Millisecond))
	if !opts.Live {
		if err := r.createServings(preps); err != nil {
			return row, err
		}
		if err := r.fillEtcd(row, preps, opts.FillWorkers); err != nil {
			return row, err
		}
	}
	if err := r.memoryController(row, preps, opts); err != nil {
		return row, fmt.Errorf("run kokumi controller: %w", err)
	}
	return row, nil
}

// createServings creates one Serving of each Order, at its Preparation.
func (r *run) createServings(preps []prep) error {
	return parallel(8, len(preps), func(i int) error {
		name := servingName(i)
		if err := r.admin.Create(r.ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenantNamespace}, Spec: v1.ServingSpec{
			OrderRef: v1.LocalObjectReference{Name: name}, PreparationName: preps[i].name, PromotedBy: r.adminName,
		}}); err != nil {
			return fmt.Errorf("create Serving %s: %w", name, err)
		}
		return nil
	})
}

// fillEtcd puts every Serving's Application for every cluster into etcd through its JSON
// gateway, as the API server stores it, and counts them through the API server.
func (r *run) fillEtcd(row *MemoryRow, preps []prep, workers int) error {
	base := r.hub.env.ControlPlane.Etcd.URL.String() + "/v3/kv/put"
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	n, created := r.opts.N*len(preps), metav1.Now()
	var size atomic.Int64
	start := time.Now()
	if err := parallel(workers, n, func(i int) error {
		s, c := i/r.opts.N, i%r.opts.N
		spec := r.servingSpec(servingName(s), c, preps[s], argocdNamespace)
		value, err := json.Marshal(SyncedApplication(spec, created, memoryResources, memoryHistory, c).Object)
		if err != nil {
			return fmt.Errorf("encode Application %s: %w", spec.Name, err)
		}
		size.Add(int64(len(value)))
		key := "/registry/argoproj.io/applications/" + argocdNamespace + "/" + spec.Name
		body, _ := json.Marshal(map[string][]byte{"key": []byte(key), "value": value}) // []byte is base64
		resp, err := hc.Post(base, "application/json", bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("put %s into etcd: %w", key, err)
		}
		defer func() { _ = resp.Body.Close() }()
		msg, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("put %s into etcd: %s: %s", key, resp.Status, msg)
		}
		return nil
	}); err != nil {
		return err
	}
	row.Fill, row.AverageSize = time.Since(start), size.Load()/int64(n)
	r.logf("put %d Applications into etcd in %s, %d bytes each on average", n, row.Fill.Round(time.Millisecond), row.AverageSize)

	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	if err := r.admin.List(r.ctx, list, client.InNamespace(argocdNamespace), client.Limit(1)); err != nil {
		return fmt.Errorf("list Applications through the API server: %w", err)
	}
	row.Applications = len(list.Items)
	if rest := list.GetRemainingItemCount(); rest != nil {
		row.Applications += int(*rest)
	}
	if row.Applications != n {
		return fmt.Errorf("the API server lists %d Applications, not the %d put into etcd", row.Applications, n)
	}
	if st, _, _ := unstructured.NestedString(list.Items[0].Object, "status", "sync", "status"); st != argocd.SyncSynced {
		return fmt.Errorf("the API server reads Application %s with sync status %q, not %s", list.Items[0].GetName(), st, argocd.SyncSynced)
	}
	r.logf("the API server lists %d Applications", row.Applications)
	return nil
}

// memoryController starts the controller with GOMEMLIMIT and plain-HTTP metrics on loopback,
// times it until its cache holds every Application and every Serving is Deployed (with
// opts.Live, fills etcd and creates the Servings on the way), and reads its memory and writes.
func (r *run) memoryController(row *MemoryRow, preps []prep, opts MemoryOptions) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	metricsAddr := "127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"controller",
		"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false", "--health-probe-bind-address=0",
		"--argocd-namespace=" + argocdNamespace, "--namespace=" + ControllerNamespace,
		"--bundled-registry=" + r.reg.Addr, "--cache-sync-timeout=" + opts.Timeout.String(),
	}, opts.ControllerArgs...)
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		row.Notes = append(row.Notes, "the machine's load average (1, 5, 15 min) when the controller started: "+strings.Join(strings.Fields(string(load))[:3], ", "))
	}
	start := time.Now()
	r.kokumi, err = startProcess("kokumi controller", filepath.Join(r.dir, "kokumi-controller.log"), opts.KokumiBinary, args,
		[]string{"KUBECONFIG=" + r.hub.controllerKubeconfig, "GOMEMLIMIT=" + opts.GoMemLimit})
	if err != nil {
		return err
	}
	r.logf("GOMEMLIMIT=%s kokumi %s", opts.GoMemLimit, strings.Join(args, " "))
	began := start
	if opts.Live {
		// Up, its caches synced: its controllers probed every Cluster Ready.
		if _, err := waitCount(r.ctx, start, opts.Timeout, "every Cluster Ready", opts.N, func() (int, error) {
			return r.obs.readyClusters(r.ctx)
		}, r.kokumi.alive); err != nil {
			return err
		}
		start = time.Now()
		if err := r.fillEtcd(row, preps, opts.FillWorkers); err != nil {
			return err
		}
	}
	n := opts.N * opts.Servings
	hc := &http.Client{Timeout: 10 * time.Second}
	var last time.Time
	cached := 0
	if row.Cached, err = waitCount(r.ctx, start, opts.Timeout, "kokumi_applications_cached", n, func() (int, error) {
		if time.Since(last) >= 250*time.Millisecond { // scraped 4 times a second, not 20
			last, cached = time.Now(), scrapeGauge(hc, "http://"+metricsAddr+"/metrics", kmetrics.ApplicationsCachedName)
		}
		return cached, nil
	}, r.kokumi.alive); err != nil {
		return err
	}
	if m, err := r.kokumi.memory(); err == nil {
		row.Notes = append(row.Notes, fmt.Sprintf("the controller's RSS when its cache held every Application: %s (peak %s)", mib(m.RSS), mib(m.HWM)))
	}
	r.logf("the controller's cache holds %d Applications %s after %s", n, row.Cached.Round(time.Millisecond), since(opts.Live, "its start", "the first put"))
	if opts.Live {
		start = time.Now()
		if err := r.createServings(preps); err != nil {
			return err
		}
	}
	if row.Deployed, err = waitCount(r.ctx, start, opts.Timeout, "every Serving Deployed", opts.Servings, func() (int, error) {
		return r.obs.servingsDeployed(r.ctx, opts.N)
	}, r.kokumi.alive); err != nil {
		return err
	}
	r.logf("every Serving Deployed to %d healthy clusters %s after %s", opts.N, row.Deployed.Round(time.Millisecond), since(opts.Live, "the controller's start", "the Servings' creation"))
	select {
	case <-time.After(opts.Settle):
	case <-r.ctx.Done():
		return r.ctx.Err()
	}
	if row.Memory, err = r.kokumi.memory(); err != nil {
		return err
	}
	end := time.Now()
	r.kokumi.stop()
	time.Sleep(time.Second) // the audit log is written as the requests complete
	if row.Writes, row.WritesBy, err = r.hub.controllerWrites(began, end); err != nil {
		return err
	}
	for k, v := range row.WritesBy {
		if _, res, _ := strings.Cut(k, " "); strings.HasPrefix(res, "applications") {
			row.ApplicationWrites += v
		}
	}
	r.logf("RSS %s (peak %s); %d writes by the controller, %d of them to Applications: %s", mib(row.Memory.RSS), mib(row.Memory.HWM),
		row.Writes, row.ApplicationWrites, byVerb(row.WritesBy))
	return nil
}

// since names what a time is measured from: cold, or with MemoryOptions.Live.
func since(live bool, cold, hot string) string {
	if live {
		return hot
	}
	return cold
}

// scrapeGauge reads an unlabelled gauge from a Prometheus text endpoint; 0 while the endpoint
// does not answer or does not show it yet.
func scrapeGauge(hc *http.Client, url, name string) int {
	resp, err := hc.Get(url)
	if err != nil {
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(f)
			}
		}
	}
	return 0
}

// servingsDeployed counts the Servings that are Ready, Deployed, at their generation, with
// clusters healthy clusters.
func (o *observer) servingsDeployed(ctx context.Context, clusters int) (int, error) {
	var list v1.ServingList
	if err := o.cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("list Servings: %w", err)
	}
	n := 0
	for i := range list.Items {
		s := &list.Items[i]
		ready := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
		if ready != nil && ready.Status == metav1.ConditionTrue && ready.Reason == v1.ReasonDeployed &&
			s.Status.ObservedGeneration == s.Generation && int(s.Status.Clusters.Healthy) == clusters {
			n++
		}
	}
	return n, nil
}

// SyncedApplication is the Application of spec as the API server stores it once Argo CD synced
// it at spec.Revision, some syncs in: metadata with a uid, generation and managedFields, and a
// status with resources resources (and as many in the last sync's result) and history entries
// of history, Synced and Healthy. i varies the history's revisions.
func SyncedApplication(spec argocd.ApplicationSpec, created metav1.Time, resources, history, i int) *unstructured.Unstructured {
	app := spec.Build()
	app.SetUID(uuid.NewUUID())
	app.SetGeneration(1)
	app.SetCreationTimestamp(created)
	ts := func(d time.Duration) string { return created.Add(d).UTC().Format(time.RFC3339) }
	source := func(revision string) map[string]any {
		return map[string]any{"repoURL": spec.RepoURL, "targetRevision": revision, "path": "."}
	}
	kinds := [][3]string{{"apps", "v1", "Deployment"}, {"", "v1", "Service"}, {"", "v1", "ConfigMap"}, {"", "v1", "ServiceAccount"},
		{"rbac.authorization.k8s.io", "v1", "Role"}, {"rbac.authorization.k8s.io", "v1", "RoleBinding"}, {"networking.k8s.io", "v1", "Ingress"},
		{"autoscaling", "v2", "HorizontalPodAutoscaler"}, {"policy", "v1", "PodDisruptionBudget"}, {"monitoring.coreos.com", "v1", "ServiceMonitor"}}
	statusResources, results := make([]any, 0, resources), make([]any, 0, resources)
	for j := range resources {
		k := kinds[j%len(kinds)]
		obj := fmt.Sprintf("%s-%s-%02d", spec.ServingName, strings.ToLower(k[2]), j)
		res := map[string]any{"version": k[1], "kind": k[2], "namespace": spec.TargetNamespace, "name": obj,
			"status": "Synced", "health": map[string]any{"status": "Healthy"}}
		if k[0] != "" { // omitempty in status.resources, always in the sync result
			res["group"] = k[0]
		}
		statusResources = append(statusResources, res)
		results = append(results, map[string]any{"group": k[0], "version": k[1], "kind": k[2], "namespace": spec.TargetNamespace,
			"name": obj, "status": "Synced", "message": strings.ToLower(k[2]) + "/" + obj + " configured", "syncPhase": "Sync"})
	}
	entries := make([]any, 0, history)
	for h := range history {
		revision := fmt.Sprintf("sha256:%064x", i*history+h+1)
		if h == history-1 {
			revision = spec.Revision
		}
		entries = append(entries, map[string]any{"id": int64(h), "revision": revision, "source": source(revision),
			"deployStartedAt": ts(time.Duration(h)*time.Hour - time.Minute), "deployedAt": ts(time.Duration(h) * time.Hour),
			"initiatedBy": map[string]any{"automated": true}})
	}
	images := make([]any, 0, 6)
	for j := range 6 {
		images = append(images, fmt.Sprintf("ghcr.io/stefanprodan/podinfo-component-%d@sha256:%064x", j, j+1))
	}
	synced := ts(time.Duration(history) * time.Hour)
	app.Object["status"] = map[string]any{
		"sync": map[string]any{"status": argocd.SyncSynced, "revision": spec.Revision, "comparedTo": map[string]any{
			"source": source(spec.Revision), "destination": map[string]any{"server": spec.Server, "namespace": spec.TargetNamespace}}},
		"health":              map[string]any{"status": argocd.HealthHealthy, "lastTransitionTime": synced},
		"resources":           statusResources,
		"history":             entries,
		"summary":             map[string]any{"images": images, "externalURLs": []any{"https://" + spec.ServingName + "." + spec.Cluster + ".example"}},
		"reconciledAt":        synced,
		"sourceType":          "Directory",
		"controllerNamespace": spec.Namespace,
		"operationState": map[string]any{
			"phase": "Succeeded", "message": "successfully synced (all tasks run)", "startedAt": ts(time.Duration(history)*time.Hour - time.Minute), "finishedAt": synced,
			"operation": map[string]any{
				"sync":        map[string]any{"revision": spec.Revision, "prune": true, "syncOptions": []any{"CreateNamespace=true"}},
				"initiatedBy": map[string]any{"automated": true},
				"retry":       map[string]any{"limit": int64(5), "backoff": map[string]any{"duration": "5s", "factor": int64(2), "maxDuration": "3m0s"}},
			},
			"syncResult": map[string]any{"revision": spec.Revision, "source": source(spec.Revision), "resources": results},
		},
	}
	app.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "kokumi", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "argoproj.io/v1alpha1", Time: &created, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:delivery.kokumi.dev/owner":{}},"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{},"f:delivery.kokumi.dev/cluster":{},"f:delivery.kokumi.dev/serving":{},"f:delivery.kokumi.dev/serving-namespace":{}}},"f:spec":{".":{},"f:destination":{".":{},"f:namespace":{},"f:server":{}},"f:project":{},"f:source":{".":{},"f:path":{},"f:repoURL":{},"f:targetRevision":{}},"f:syncPolicy":{".":{},"f:automated":{".":{},"f:prune":{},"f:selfHeal":{}},"f:retry":{".":{},"f:backoff":{".":{},"f:duration":{},"f:factor":{},"f:maxDuration":{}},"f:limit":{}},"f:syncOptions":{}}}}`)},
		{Manager: "argocd-application-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "argoproj.io/v1alpha1", Time: &created, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{".":{},"f:controllerNamespace":{},"f:health":{".":{},"f:lastTransitionTime":{},"f:status":{}},"f:history":{},"f:operationState":{".":{},"f:finishedAt":{},"f:message":{},"f:operation":{".":{},"f:initiatedBy":{".":{},"f:automated":{}},"f:retry":{".":{},"f:backoff":{".":{},"f:duration":{},"f:factor":{},"f:maxDuration":{}},"f:limit":{}},"f:sync":{".":{},"f:prune":{},"f:revision":{},"f:syncOptions":{}}},"f:phase":{},"f:startedAt":{},"f:syncResult":{".":{},"f:resources":{},"f:revision":{},"f:source":{".":{},"f:path":{},"f:repoURL":{},"f:targetRevision":{}}}},"f:reconciledAt":{},"f:resources":{},"f:sourceType":{},"f:summary":{".":{},"f:externalURLs":{},"f:images":{}},"f:sync":{".":{},"f:comparedTo":{".":{},"f:destination":{".":{},"f:namespace":{},"f:server":{}},"f:source":{".":{},"f:path":{},"f:repoURL":{},"f:targetRevision":{}}},"f:revision":{},"f:status":{}}}}`)},
	})
	return app
}
