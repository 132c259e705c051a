package isolate_test

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/render"
	"github.com/kokumi-dev/kokumi/internal/render/isolate"
)

// controllerMemoryLimit is resources.limits.memory of the controller in the Helm chart
// (charts/kokumi/values.yaml).
const controllerMemoryLimit = 1 << 30

// BenchmarkTwoTenantsChartsOfManyKeys renders, as the controller does with its two render slots
// and its default budgets, two tenants' charts of 40 ConfigMaps of 20,000 (and 40,000) short keys
// each (some 10 MiB, and 21 MiB, of YAML, within the 32 MiB output budget) at once, and a third tenant's ordinary chart
// beside them; it reports this process's peak RSS (the controller's: the children are processes
// of their own) and the third render's time, against its time alone.
//
//	go test -run '^$' -bench TwoTenantsChartsOfManyKeys -benchtime 1x ./internal/render/isolate
func BenchmarkTwoTenantsChartsOfManyKeys(b *testing.B) {
	for _, keys := range []int{20_000, 40_000} {
		b.Run(strconv.Itoa(40*keys)+"-keys", func(b *testing.B) { twoTenantsCharts(b, keys) })
	}
}

// twoTenantsCharts is BenchmarkTwoTenantsChartsOfManyKeys with ConfigMaps of keys keys.
func twoTenantsCharts(b *testing.B, keys int) {
	// The chart of manyKeys, written here again so that this benchmark runs on earlier code too.
	bombs := []oci.Layer{{MediaType: oci.MediaTypeHelmChart, Data: ocitest.Chart(b, "keys", map[string]string{"Chart.yaml": "apiVersion: v2\nname: keys\nversion: 0.1.0\n",
		"templates/cm.yaml": "{{ range $i := until 40 }}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m{{ $i }}\ndata:\n{{ range until " + strconv.Itoa(keys) + " }}  k{{ . }}: v\n{{ end }}{{ end }}"})}}
	good := []oci.Layer{{MediaType: oci.MediaTypeHelmChart, Data: ocitest.PodinfoChart(b)}}
	limits := render.Limits{OutputBytes: 32 << 20, Objects: 10_000}
	p := isolate.Process{Memory: 512 << 20, Timeout: 5 * time.Minute}
	goodOpts := render.Options{ReleaseName: "web", TargetNamespace: "team-c", Limits: limits}
	timeGood := func() time.Duration {
		start := time.Now()
		if _, err := p.Render(context.Background(), good, goodOpts); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range b.N {
		alone := min(timeGood(), timeGood(), timeGood())
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			b.Logf("cannot reset the peak RSS (%v): it is the process's since it started", err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := time.Now()
		for i, ns := range []string{"team-a", "team-b"} {
			wg.Go(func() {
				_, errs[i] = p.Render(context.Background(), bombs, render.Options{ReleaseName: "k", TargetNamespace: ns, Limits: limits})
			})
		}
		// The bombs' renders are under way, and have run past an ordinary render's share
		// (isolate.OrdinaryRender, written here so that this benchmark runs on earlier code too).
		time.Sleep(2*time.Second + 500*time.Millisecond)
		beside := timeGood()
		wg.Wait()
		peak := vmHWM(b)
		b.Logf("two tenants' charts of %d short keys: %v, %v after %s; peak RSS %d MiB (limit %d MiB); a third tenant's render %s beside them, %s alone",
			40*keys, errs[0], errs[1], time.Since(start).Round(time.Millisecond), peak>>20, controllerMemoryLimit>>20, beside.Round(time.Millisecond), alone.Round(time.Millisecond))
		b.ReportMetric(float64(peak>>20), "peak-RSS-MiB")
		b.ReportMetric(float64(beside)/float64(alone), "third-render-x-alone")
		if peak > controllerMemoryLimit*3/4 {
			b.Errorf("peak RSS %d MiB, over 75%% of the controller's memory limit of %d MiB", peak>>20, controllerMemoryLimit>>20)
		}
	}
}

// vmHWM is this process's peak RSS.
func vmHWM(b *testing.B) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}
