package memory

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// The child process measures one cache; the parent starts the API server and fills it.
const (
	envChild      = "KOKUMI_MEMORY_CHILD"      // the variant a child measures
	envKubeconfig = "KOKUMI_MEMORY_KUBECONFIG" // the API server it reads
	envN          = "KOKUMI_MEMORY_N"          // how many of Kokumi's Applications; unset skips
	argoNamespace = "argocd"
)

var env *harness.Env

// defaultN is how many of Kokumi's Applications are measured when KOKUMI_MEMORY_N is unset:
// enough for the cache's share to stand out, few enough for every test run.
const defaultN = 300

func TestMain(m *testing.M) {
	if variant := os.Getenv(envChild); variant != "" {
		// A child measures one cache and reports it; it runs no test and needs no API server.
		if err := measure(variant); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	harness.Main(m, &env)
}

// result is what a child reports.
type result struct {
	Variant      string  `json:"variant"`
	Cached       int     `json:"cached"`
	SyncSeconds  float64 `json:"syncSeconds"`
	HeapMiB      float64 `json:"heapMiB"`
	HeapDeltaMiB float64 `json:"heapDeltaMiB"`
	RSSMiB       float64 `json:"rssMiB"`
	PeakRSSMiB   float64 `json:"peakRssMiB"`
}

// TestCacheMemory creates KOKUMI_MEMORY_N (300 when unset) of Kokumi's Applications as Argo CD writes them
// (RealisticApplication, some 76 KB each) and a tenth as many of someone else's in a real API
// server, then measures, each in a process of its own, the cache of Argo CD's namespace as it
// was (every Application, whole) and as Kokumi now builds it (Kokumi's only, as argocd.Application):
//
//	KOKUMI_MEMORY_N=10000 go test ./test/memory -run TestCacheMemory -v -timeout 60m
func TestCacheMemory(t *testing.T) {
	n := defaultN
	if v := os.Getenv(envN); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number of Applications", envN, v)
		}
	}
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, argoNamespace); err != nil {
		t.Fatal(err)
	}
	foreign := n / 10
	fast := rest.CopyConfig(env.Config)
	fast.QPS, fast.Burst = 1000, 2000
	admin, err := client.New(fast, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var bytes int64
	var mu sync.Mutex
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				app := RealisticApplication(argoNamespace, fmt.Sprintf("team-%03d", i%100), fmt.Sprintf("svc-%d", (i/100)%100), fmt.Sprintf("edge-%05d", i), i)
				if i >= n { // someone else's: no Kokumi label
					app.SetName(fmt.Sprintf("other-%05d", i))
					app.SetLabels(map[string]string{"team": "other"})
					app.SetAnnotations(nil)
				}
				app.SetManagedFields(nil) // the API server writes its own
				b, _ := json.Marshal(app.Object)
				mu.Lock()
				bytes += int64(len(b))
				mu.Unlock()
				if err := admin.Create(ctx, app); err != nil {
					select {
					case errs <- fmt.Errorf("create Application %d: %w", i, err):
					default:
					}
				}
			}
		})
	}
	for i := range n + foreign {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("created %d of Kokumi's and %d other Applications, %.1f MiB of JSON (%.1f KB each), in %s",
		n, foreign, float64(bytes)/(1<<20), float64(bytes)/float64(n+foreign)/1000, time.Since(start).Round(time.Second))

	results := map[string]result{}
	for _, variant := range []string{"whole", "kokumi"} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envChild+"="+variant, envKubeconfig+"="+env.Kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child %s: %v\n%s", variant, err, out)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			if line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "RESULT "); ok {
				var r result
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				results[variant] = r
			}
		}
		r, ok := results[variant]
		if !ok {
			t.Fatalf("child %s reported nothing:\n%s", variant, out)
		}
		t.Logf("%-6s cached %6d in %5.1fs: heap %7.1f MiB (+%7.1f MiB for the cache), RSS %7.1f MiB, peak RSS %7.1f MiB",
			r.Variant, r.Cached, r.SyncSeconds, r.HeapMiB, r.HeapDeltaMiB, r.RSSMiB, r.PeakRSSMiB)
	}
	whole, kokumi := results["whole"], results["kokumi"]
	if kokumi.Cached != n || whole.Cached != n+foreign {
		t.Errorf("cached %d (want %d) and %d (want %d)", kokumi.Cached, n, whole.Cached, n+foreign)
	}
	perApp := kokumi.HeapDeltaMiB * (1 << 20) / float64(n)
	t.Logf("per Application: whole %.1f KB, Kokumi's cache %.2f KB of heap; 100,000 would hold %.0f MiB in Kokumi's cache, %.0f MiB whole",
		whole.HeapDeltaMiB*(1<<20)/float64(n+foreign)/1000, perApp/1000, perApp*100000/(1<<20), whole.HeapDeltaMiB*100000/float64(n+foreign))
	if kokumi.HeapDeltaMiB > whole.HeapDeltaMiB/5 {
		t.Errorf("Kokumi's cache holds %.1f MiB, more than a fifth of the whole one's %.1f MiB", kokumi.HeapDeltaMiB, whole.HeapDeltaMiB)
	}
}

// measure is one measurement of the cache variant, made by a child process TestCacheMemory
// starts; it prints its result on a line of its own after "RESULT ".
func measure(variant string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(envKubeconfig))
	if err != nil {
		return fmt.Errorf("read the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	scheme, err := kscheme.New()
	if err != nil {
		return fmt.Errorf("scheme: %w", err)
	}
	whole := &unstructured.Unstructured{}
	whole.SetGroupVersionKind(argocd.ApplicationGVK)
	wholeList := &unstructured.UnstructuredList{}
	wholeList.SetGroupVersionKind(argocd.ApplicationListGVK)
	var app client.Object = whole
	var list client.ObjectList = wholeList
	opts := cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{argoNamespace: {}}}
	if variant == "kokumi" {
		// As ArgoCDOf builds it for a manager of every shard: Kokumi's Applications, decoded into
		// what Kokumi reads of them.
		app, list = &argocd.Application{}, &argocd.ApplicationList{}
		opts.ByObject = map[client.Object]cache.ByObject{app: {
			Label: labels.SelectorFromSet(labels.Set{argocd.LabelManagedBy: argocd.ManagedByKokumi}),
		}}
	}
	heapBefore := heap()
	c, err := cache.New(cfg, opts)
	if err != nil {
		return fmt.Errorf("create the cache: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Start(ctx) }()
	start := time.Now()
	if _, err := c.GetInformer(ctx, app); err != nil {
		return fmt.Errorf("informer of Applications: %w", err)
	}
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the cache did not sync")
	}
	took := time.Since(start)
	if err := c.List(ctx, list, client.InNamespace(argoNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list the cached Applications: %w", err)
	}
	cached := meta.LenList(list) // list is not used after: the heap below does not count it
	h := heap()
	rss, peak := rssMiB()
	r := result{Variant: variant, Cached: cached, SyncSeconds: took.Seconds(), HeapMiB: h, HeapDeltaMiB: h - heapBefore, RSSMiB: rss, PeakRSSMiB: peak}
	b, _ := json.Marshal(r)
	fmt.Println("RESULT " + string(b))
	runtime.KeepAlive(c)
	return nil
}

// heap is the live heap in MiB after two collections.
func heap() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// rssMiB reads the process's resident set and its peak (Linux).
func rssMiB() (rss, peak float64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak
}
