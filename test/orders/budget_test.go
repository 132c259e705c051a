package orders

import (
	"archive/tar"
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// controllerMemoryLimit is resources.limits.memory of the controller in config/manager.
const controllerMemoryLimit = 1 << 30

// peakRSS reads the process's peak resident set size (VmHWM), in bytes.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("parse VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// resetPeakRSS starts VmHWM again from the current RSS, so that the peak is this test's.
func resetPeakRSS(t *testing.T) bool {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak RSS (%v): it is the process's since it started", err)
		return false
	}
	return true
}

// Render runs inside the controller: a chart that renders 12,000 objects (over the budget of
// 10,000, and few enough to render within the timeout on a loaded machine), a layer that
// decompresses to 4 GiB and a template that asks for a list of 16 GB fail their Orders with
// BudgetExceeded, under the controller's memory limit, while a good Order renders in the same run.
func TestHostileSourcesGoOverBudgetWhileAGoodOrderRenders(t *testing.T) {
	ctx := context.Background()
	src := newSource(t)
	ns := newNamespace(t)
	budgets := config.DefaultRenderBudgets()

	manyURL := "oci://" + ocitest.Repo(src.reg, "charts/many")
	ocitest.PushChart(t, oci.TrimScheme(manyURL), "1.0.0", "many", "1.0.0", ocitest.ManyObjectsChart(t))
	bomb := ocitest.ZipBomb(t, 4<<30, tar.TypeReg)
	bombURL := "oci://" + ocitest.Repo(src.reg, "bundles/bomb")
	ocitest.PushLayers(t, oci.TrimScheme(bombURL), "v1", oci.MediaTypeLayerTarGzip, bomb)
	t.Logf("the chart of 12,000 objects is %d bytes; the layer of 4 GiB of zeros %d KiB", len(ocitest.ManyObjectsChart(t)), len(bomb)>>10)
	// A template that asks for a list of 16 GB before it writes a byte.
	loopURL := "oci://" + ocitest.Repo(src.reg, "charts/loop")
	ocitest.PushChart(t, oci.TrimScheme(loopURL), "1.0.0", "loop", "1.0.0", ocitest.Chart(t, "loop", map[string]string{
		"Chart.yaml":          "apiVersion: v2\nname: loop\nversion: 1.0.0\n",
		"templates/loop.yaml": "{{ range until 2000000000 }}{{ end }}\n",
	}))

	products := []*v1.Product{
		{ObjectMeta: metav1.ObjectMeta{Name: "many", Namespace: ns}, Spec: v1.ProductSpec{
			Source: v1.ProductSource{URL: manyURL, Version: "1.0.0"},
			Render: &v1.RenderSpec{Helm: &v1.HelmRender{Values: jsonValues(t, map[string]any{"count": 12_000})}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bomb", Namespace: ns}, Spec: v1.ProductSpec{Source: v1.ProductSource{URL: bombURL, Version: "v1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "loop", Namespace: ns}, Spec: v1.ProductSpec{Source: v1.ProductSource{URL: loopURL, Version: "1.0.0"}}},
	}
	for _, p := range products {
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	src.product(t, ns, "podinfo", "", src.values("good"))

	reset := resetPeakRSS(t)
	before := peakRSS(t)
	start := time.Now()
	order(t, ns, "many", "many", "", v1.PromotionManual)
	order(t, ns, "bomb", "bomb", "", v1.PromotionManual)
	order(t, ns, "loop", "loop", "", v1.PromotionManual)
	order(t, ns, "good", "podinfo", "", v1.PromotionManual)
	// The hostile Orders are retried until they go: stop them for the tests after this one.
	t.Cleanup(func() {
		for _, name := range []string{"many", "bomb", "loop"} {
			_ = env.Client.Delete(context.Background(), &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
		}
	})

	for _, c := range []struct {
		order string
		says  []string
	}{
		{"many", []string{manyURL + "@sha256:", "render budget of objects", "more than the limit of 10000 objects", "--" + config.FlagObjects}},
		{"bomb", []string{bombURL + "@sha256:", "render budget of uncompressed bytes", "over the limit of 128Mi", "--" + config.FlagUncompressedBytes}},
		{"loop", []string{loopURL + "@sha256:", "render budget of output bytes", "16000000000 output bytes, over the limit of 32Mi", "--" + config.FlagOutputBytes}},
	} {
		o := waitReady(t, ns, c.order, v1.ReasonBudgetExceeded)
		t.Logf("order %s: %s after %v", c.order, v1.ReasonBudgetExceeded, time.Since(start).Round(time.Millisecond))
		for _, want := range c.says {
			if !strings.Contains(readyMessage(o), want) {
				t.Errorf("order %s: message %q does not say %q", c.order, readyMessage(o), want)
			}
		}
		if n := len(preparations(t, ns, c.order)); n != 0 || o.Status.LatestPreparation != "" {
			t.Errorf("order %s over budget: %d Preparations, latest %q", c.order, n, o.Status.LatestPreparation)
		}
	}
	good := waitReady(t, ns, "good", v1.ReasonRendered)
	t.Logf("order good: %s after %v", v1.ReasonRendered, time.Since(start).Round(time.Millisecond))
	if n := len(preparations(t, ns, "good")); n != 1 || good.Status.LatestPreparation == "" {
		t.Errorf("the good Order: %d Preparations, latest %q", n, good.Status.LatestPreparation)
	}

	after := peakRSS(t)
	t.Logf("peak RSS of the test process (controller, registries, test): %d MiB before the Orders, %d MiB after (reset %v); budgets %+v; controller memory limit %d MiB",
		before>>20, after>>20, reset, budgets, controllerMemoryLimit>>20)
	if after > controllerMemoryLimit/2 {
		t.Errorf("peak RSS %d MiB, over half the controller's memory limit of %d MiB", after>>20, controllerMemoryLimit>>20)
	}
}
