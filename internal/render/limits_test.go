package render_test

import (
	"archive/tar"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/manifests"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/render"
)

func chartLayer(chart []byte) []oci.Layer {
	return []oci.Layer{{MediaType: oci.MediaTypeHelmChart, Data: chart}}
}

func bundleLayer(t *testing.T, files map[string]string) oci.Layer {
	t.Helper()
	entries := map[string][]byte{}
	for k, v := range files {
		entries[k] = []byte(v)
	}
	layer, err := oci.TarGz(entries)
	if err != nil {
		t.Fatal(err)
	}
	return oci.Layer{MediaType: oci.MediaTypeLayerTarGzip, Data: layer}
}

func TestObjectsOverTheLimitStopTheRender(t *testing.T) {
	chart := ocitest.ManyObjectsChart(t)
	ctx := context.Background()
	opts := func(count, objects int) render.Options {
		return render.Options{ReleaseName: "many", TargetNamespace: "many", Values: map[string]any{"count": count},
			Limits: render.Limits{Objects: objects}}
	}
	res, err := render.Render(ctx, chartLayer(chart), opts(500, 500))
	if err != nil || len(res.Objects) != 500 {
		t.Fatalf("500 objects within 500: %v", err)
	}
	_, err = render.Render(ctx, chartLayer(chart), opts(501, 500))
	_ = ocitest.LimitError(t, err, manifests.LimitObjects, 500)
	if !strings.Contains(err.Error(), "more than the limit of 500 objects") {
		t.Errorf("message %q", err)
	}

	// The items of a List count one by one.
	var items []string
	for i := range 20 {
		items = append(items, fmt.Sprintf("{apiVersion: v1, kind: ConfigMap, metadata: {name: cm-%d}}", i))
	}
	list := bundleLayer(t, map[string]string{"list.yaml": "apiVersion: v1\nkind: List\nitems: [" + strings.Join(items, ", ") + "]\n"})
	_, err = render.Render(ctx, []oci.Layer{list}, render.Options{TargetNamespace: "x", Limits: render.Limits{Objects: 19}})
	_ = ocitest.LimitError(t, err, manifests.LimitObjects, 19)
	if res, err := render.Render(ctx, []oci.Layer{list}, render.Options{TargetNamespace: "x", Limits: render.Limits{Objects: 20}}); err != nil || len(res.Objects) != 20 {
		t.Fatalf("a List of 20 within 20: %v", err)
	}
}

func TestHelmOutputOverTheLimitStopsTheRender(t *testing.T) {
	chart := ocitest.ManyObjectsChart(t)
	ctx := context.Background()
	out, err := render.Helm(ctx, chart, render.HelmOptions{ReleaseName: "many", Namespace: "many", Values: map[string]any{"count": 2000}})
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(out))
	if _, err := render.Helm(ctx, chart, render.HelmOptions{ReleaseName: "many", Namespace: "many", Values: map[string]any{"count": 2000},
		Limits: render.Limits{OutputBytes: size}}); err != nil {
		t.Fatalf("an output of exactly the limit: %v", err)
	}
	_, err = render.Render(ctx, chartLayer(chart), render.Options{ReleaseName: "many", TargetNamespace: "many", Values: map[string]any{"count": 2000},
		Limits: render.Limits{OutputBytes: size / 2}})
	le := ocitest.LimitError(t, err, render.LimitOutputBytes, size/2)
	if le.Seen < size/2 {
		t.Errorf("seen %d, want over %d", le.Seen, size/2)
	}
}

func TestAChartThatDecompressesOverTheLimitIsNotLoaded(t *testing.T) {
	bomb := ocitest.ZipBomb(t, 1<<30, tar.TypeReg)
	_, err := render.Render(context.Background(), chartLayer(bomb), render.Options{Limits: render.Limits{UncompressedBytes: 32 << 20}})
	_ = ocitest.LimitError(t, err, oci.LimitUncompressedBytes, 32<<20)
	if !strings.Contains(err.Error(), "load chart") {
		t.Errorf("message %q does not say where", err)
	}
}

func TestABundleSharesItsLimitsAcrossLayers(t *testing.T) {
	ctx := context.Background()
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {pad: %q}\n"
	one := bundleLayer(t, map[string]string{"a.yaml": fmt.Sprintf(cm, "a", strings.Repeat("a", 4000))})
	two := bundleLayer(t, map[string]string{"b.yaml": fmt.Sprintf(cm, "b", strings.Repeat("b", 4000))})
	if _, err := render.Render(ctx, []oci.Layer{one, two}, render.Options{TargetNamespace: "x", Limits: render.Limits{UncompressedBytes: 20 << 10}}); err != nil {
		t.Fatalf("two layers of about 5 KiB uncompressed each within 20 KiB: %v", err)
	}
	// Each layer fits 8 KiB; both do not.
	_, err := render.Render(ctx, []oci.Layer{one, two}, render.Options{TargetNamespace: "x", Limits: render.Limits{UncompressedBytes: 8 << 10}})
	_ = ocitest.LimitError(t, err, oci.LimitUncompressedBytes, 8<<10)

	// The joined YAML counts against the output limit: each file fits 6000 bytes; both do not.
	_, err = render.Render(ctx, []oci.Layer{one, two}, render.Options{TargetNamespace: "x", Limits: render.Limits{OutputBytes: 6000}})
	_ = ocitest.LimitError(t, err, render.LimitOutputBytes, 6000)
	for _, l := range []oci.Layer{one, two} {
		if _, err := render.Render(ctx, []oci.Layer{l}, render.Options{TargetNamespace: "x", Limits: render.Limits{OutputBytes: 6000}}); err != nil {
			t.Fatalf("one file within 6000 bytes: %v", err)
		}
	}
}

func TestTemplateFunctionsThatAllocateAsAskedStayWithinTheOutputLimit(t *testing.T) {
	ctx := context.Background()
	chart := func(template string) []byte {
		return ocitest.Chart(t, "fns", map[string]string{
			"Chart.yaml":        "apiVersion: v2\nname: fns\nversion: 1.0.0\n",
			"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fns\ndata:\n  out: " + template + "\n",
		})
	}
	limits := render.Limits{OutputBytes: 32 << 20}
	// With sprig's meaning: the same output as sprig's own functions, without limits.
	fns := chart(`"{{ until 3 }} {{ until -3 }} {{ untilStep 10 0 -3 }} {{ untilStep 0 10 4 }} {{ untilStep 0 10 0 }} {{ untilStep 5 5 1 }} {{ untilStep 0 10 3 }} {{ repeat 3 "ab" }}"`)
	out, err := render.Helm(ctx, fns, render.HelmOptions{ReleaseName: "fns", Namespace: "fns", Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	if want := `out: "[0 1 2] [0 -1 -2] [10 7 4 1] [0 4 8] [] [] [0 3 6 9] ababab"`; !strings.Contains(string(out), want) {
		t.Errorf("output lacks %s:\n%s", want, out)
	}
	if sprig, err := render.Helm(ctx, fns, render.HelmOptions{ReleaseName: "fns", Namespace: "fns"}); err != nil || string(sprig) != string(out) {
		t.Errorf("sprig's functions rendered %s (%v), the bounded ones %s", sprig, err, out)
	}
	for _, tpl := range []string{`"{{ range until 2000000000 }}{{ end }}"`, `"{{ range untilStep 0 9000000000000000000 1 }}{{ end }}"`, `"{{ repeat 2000000000 "xx" }}"`} {
		var err error
		alloc := allocatedBy(func() {
			_, err = render.Helm(ctx, chart(tpl), render.HelmOptions{ReleaseName: "fns", Namespace: "fns", Limits: limits})
		})
		_ = ocitest.LimitError(t, err, render.LimitOutputBytes, 32<<20)
		if !strings.Contains(err.Error(), "a template asked for too much") {
			t.Errorf("%s: message %q", tpl, err)
		}
		if alloc > 64<<20 {
			t.Errorf("%s: allocated %d MiB", tpl, alloc>>20)
		}
	}
}

// allocatedBy runs f and returns the bytes it allocated.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
