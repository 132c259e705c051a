package isolate_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/manifests"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/render"
	"github.com/kokumi-dev/kokumi/internal/render/isolate"
)

// The renders these tests start run this very test binary as their child.
func TestMain(m *testing.M) {
	isolate.MainIfChild()
	os.Exit(m.Run())
}

// bomb is a chart whose one template is body.
func bomb(t *testing.T, body string) []oci.Layer {
	t.Helper()
	return []oci.Layer{{MediaType: oci.MediaTypeHelmChart, Data: ocitest.Chart(t, "bomb", map[string]string{"Chart.yaml": "apiVersion: v2\nname: bomb\nversion: 0.1.0\n", "templates/cm.yaml": body})}}
}

func TestARenderInItsOwnProcessGivesWhatOneInThisProcessGives(t *testing.T) {
	layers := []oci.Layer{{MediaType: oci.MediaTypeHelmChart, Data: ocitest.PodinfoChart(t)}}
	opts := render.Options{ReleaseName: "web", TargetNamespace: "team-a", Values: map[string]any{"replicaCount": 3}}
	want, err := render.Render(context.Background(), layers, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := isolate.Process{Memory: 256 << 20, Timeout: 30 * time.Second}.Render(context.Background(), layers, opts)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := manifests.Marshal(want.Objects)
	b, _ := manifests.Marshal(got.Objects)
	if string(a) != string(b) || got.Chart != want.Chart || len(got.Objects) == 0 {
		t.Errorf("the child rendered %d objects (chart %v), this process %d (chart %v), or other bytes", len(got.Objects), got.Chart, len(want.Objects), want.Chart)
	}
}

// A template that loops in a loop makes gigabytes inside Helm's engine, past every budget that
// counts lists or output: the child reaches its memory limit and dies; this process keeps its
// memory, and the failure names the limit.
func TestATemplateThatLoopsInALoopStopsAtTheRendersMemory(t *testing.T) {
	layers := bomb(t, "{{ range until 4000000 }}{{ range until 4000000 }}xxxxxxxx{{ end }}{{ end }}")
	before := heap()
	start := time.Now()
	_, err := isolate.Process{Memory: 256 << 20, Timeout: time.Minute}.Render(context.Background(), layers, render.Options{ReleaseName: "b", TargetNamespace: "b"})
	var le *oci.LimitError
	if !errors.As(err, &le) || le.Limit != render.LimitMemory || le.Max != 256<<20 {
		t.Fatalf("err %v, want the memory limit of 256Mi", err)
	}
	t.Logf("stopped after %s: %v; this process's heap %d MiB → %d MiB", time.Since(start).Round(time.Millisecond), err, before>>20, heap()>>20)
	if grown := int64(heap()) - int64(before); grown > 64<<20 {
		t.Errorf("this process's heap grew by %d MiB", grown>>20)
	}
}

// A loop with nothing in it that allocates little (a short list each turn: a list of millions
// each turn may reach the memory limit first, under load) runs for minutes and makes nothing:
// the child is killed at the timeout.
func TestATemplateThatNeverEndsIsKilledAtTheTimeout(t *testing.T) {
	layers := bomb(t, "{{ range until 4000000 }}{{ range until 400 }}{{ end }}{{ end }}")
	start := time.Now()
	_, err := isolate.Process{Memory: 256 << 20, Timeout: 2 * time.Second}.Render(context.Background(), layers, render.Options{ReleaseName: "b", TargetNamespace: "b"})
	took := time.Since(start)
	var te *isolate.TimeoutError
	if !errors.As(err, &te) || te.After != 2*time.Second {
		t.Fatalf("err %v, want a timeout after 2s", err)
	}
	if took > 10*time.Second {
		t.Errorf("the render returned after %s, its timeout being 2s", took)
	}
	t.Logf("killed after %s: %v", took.Round(time.Millisecond), err)
}

// The render's own failures come back as they are, a budget still an *oci.LimitError.
func TestARendersOwnFailuresComeBackWhole(t *testing.T) {
	p := isolate.Process{Memory: 256 << 20, Timeout: 30 * time.Second}
	_, err := p.Render(context.Background(), bomb(t, "{{ fail \"no values\" }}"), render.Options{ReleaseName: "b", TargetNamespace: "b"})
	if err == nil || !strings.Contains(err.Error(), "no values") {
		t.Errorf("err %v, want the chart's own failure", err)
	}
	layers := []oci.Layer{{MediaType: oci.MediaTypeHelmChart, Data: ocitest.ManyObjectsChart(t)}}
	_, err = p.Render(context.Background(), layers, render.Options{ReleaseName: "m", TargetNamespace: "m", Values: map[string]any{"count": 30},
		Limits: render.Limits{Objects: 20}})
	_ = ocitest.LimitError(t, err, manifests.LimitObjects, 20)
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Children started ahead (Warm) render as any: each once, what this process renders, and a
// hostile chart is still stopped at the memory and at the timeout, counted from its request.
func TestWarmChildrenRenderOnceEachAndKeepTheLimits(t *testing.T) {
	layers := []oci.Layer{{MediaType: oci.MediaTypeHelmChart, Data: ocitest.PodinfoChart(t)}}
	opts := render.Options{ReleaseName: "web", TargetNamespace: "team-a"}
	want, err := render.Render(context.Background(), layers, opts)
	if err != nil {
		t.Fatal(err)
	}
	p := isolate.Process{Memory: 256 << 20, Timeout: 3 * time.Second, Warm: 2}
	for i := range 5 {
		got, err := p.Render(context.Background(), layers, opts)
		if err != nil {
			t.Fatalf("render %d: %v", i, err)
		}
		if len(got.Objects) != len(want.Objects) {
			t.Fatalf("render %d: %d objects, want %d", i, len(got.Objects), len(want.Objects))
		}
	}
	// A child waits for its request without a clock: one started long before still has its
	// whole timeout.
	time.Sleep(4 * time.Second)
	start := time.Now()
	_, err = p.Render(context.Background(), bomb(t, "{{ range until 4000000 }}{{ range until 400 }}{{ end }}{{ end }}"), render.Options{ReleaseName: "b", TargetNamespace: "b"})
	var te *isolate.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("err %v, want a timeout", err)
	}
	if took := time.Since(start); took < 3*time.Second || took > 10*time.Second {
		t.Errorf("killed after %s, its timeout being 3s", took)
	}
	// The memory limit, with a timeout long enough that a loaded machine reaches the memory
	// first.
	p = isolate.Process{Memory: 256 << 20, Timeout: 60 * time.Second, Warm: 1}
	_, err = p.Render(context.Background(), bomb(t, "{{ range until 4000000 }}{{ range until 4000000 }}xxxxxxxx{{ end }}{{ end }}"), render.Options{ReleaseName: "b", TargetNamespace: "b"})
	var le *oci.LimitError
	if !errors.As(err, &le) || le.Limit != render.LimitMemory {
		t.Fatalf("err %v, want the memory limit", err)
	}
}
