package isolate_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
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
	if path := os.Getenv(envReadRestricted); path != "" {
		os.Exit(readRestricted(path))
	}
	os.Exit(m.Run())
}

// bomb is a chart whose one template is body.
func bomb(t testing.TB, body string) []oci.Layer {
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
	_, err := isolate.Process{Memory: 256 << 20, Timeout: 5 * time.Minute}.Render(context.Background(), layers, render.Options{ReleaseName: "b", TargetNamespace: "b"})
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
	// The loop runs for minutes: a render killed at its timeout returns long before, however
	// loaded the machine.
	if took > 30*time.Second {
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

// Kept children (Warm) render one request after another, each what this process renders; a
// hostile chart is still stopped at the memory and at the timeout, counted from its request,
// and the child it ran in renders nothing more: the next render has a new one.
func TestKeptChildrenRenderManyAndKeepTheLimits(t *testing.T) {
	layers := []oci.Layer{{MediaType: oci.MediaTypeHelmChart, Data: ocitest.PodinfoChart(t)}}
	opts := render.Options{ReleaseName: "web", TargetNamespace: "team-a"}
	want, err := render.Render(context.Background(), layers, opts)
	if err != nil {
		t.Fatal(err)
	}
	p := isolate.Process{Memory: 256 << 20, Timeout: 3 * time.Second, Warm: 1}
	seen := map[int]bool{}
	for i := range 5 {
		got, err := p.Render(context.Background(), layers, opts)
		if err != nil {
			t.Fatalf("render %d: %v", i, err)
		}
		if len(got.Objects) != len(want.Objects) {
			t.Fatalf("render %d: %d objects, want %d", i, len(got.Objects), len(want.Objects))
		}
		for _, pid := range p.Kept() {
			seen[pid] = true
		}
	}
	if len(seen) != 1 {
		t.Fatalf("5 renders ran in children %v, want one kept child", seen)
	}
	// A child waits for its request without a clock: one kept long since still has its whole
	// timeout.
	time.Sleep(4 * time.Second)
	start := time.Now()
	_, err = p.Render(context.Background(), bomb(t, "{{ range until 4000000 }}{{ range until 400 }}{{ end }}{{ end }}"), render.Options{ReleaseName: "b", TargetNamespace: "b"})
	var te *isolate.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("err %v, want a timeout", err)
	}
	// The timeout is wall time: the render ends at it, never before, however loaded the machine.
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("killed after %s, its timeout being 3s", took)
	}
	if _, err := p.Render(context.Background(), layers, opts); err != nil {
		t.Fatalf("the render after a timeout: %v", err)
	}
	for _, pid := range p.Kept() {
		if seen[pid] {
			t.Errorf("child %d, killed at the timeout, still renders", pid)
		}
	}
	// The memory limit, with a timeout long enough that a loaded machine reaches the memory
	// first; a child kept from a render before it.
	p = isolate.Process{Memory: 256 << 20, Timeout: 5 * time.Minute, Warm: 1}
	if _, err := p.Render(context.Background(), layers, opts); err != nil {
		t.Fatal(err)
	}
	kept := p.Kept()
	_, err = p.Render(context.Background(), bomb(t, "{{ range until 4000000 }}{{ range until 4000000 }}xxxxxxxx{{ end }}{{ end }}"), render.Options{ReleaseName: "b", TargetNamespace: "b"})
	var le *oci.LimitError
	if !errors.As(err, &le) || le.Limit != render.LimitMemory {
		t.Fatalf("err %v, want the memory limit", err)
	}
	if _, err := p.Render(context.Background(), layers, opts); err != nil {
		t.Fatalf("the render after the memory limit: %v", err)
	}
	if now := p.Kept(); len(kept) != 1 || len(now) != 1 || now[0] == kept[0] {
		t.Errorf("kept child %v before the memory limit, %v after: want another", kept, now)
	}
}

// A kept child's CPU time is held to its limit for each render, not for its life: renders that
// together take three times its limit each end well. Counted in the child's CPU time, which a
// loaded machine does not change (the wall timeout is long: it is not what is tested).
func TestAKeptChildsCPULimitIsPerRender(t *testing.T) {
	p := isolate.Process{Memory: 256 << 20, Timeout: 5 * time.Minute, CPU: time.Second, Warm: 1}
	busy := bomb(t, "{{ range until 10000 }}{{ range until 400 }}{{ end }}{{ end }}")
	opts := render.Options{ReleaseName: "b", TargetNamespace: "b"}
	var cpu time.Duration
	seen := map[int]bool{}
	for i := 0; cpu < 3*time.Second; i++ {
		if _, err := p.Render(context.Background(), busy, opts); err != nil {
			t.Fatalf("render %d, after %s of the child's CPU time in all: %v", i, cpu, err)
		}
		kept := p.Kept()
		if len(kept) != 1 {
			t.Fatalf("render %d: kept children %v, want one", i, kept)
		}
		seen[kept[0]] = true
		cpu = childCPU(t, kept[0])
		if i > ChildRendersInATest {
			t.Fatal("the renders take no CPU time")
		}
	}
	if len(seen) != 1 {
		t.Errorf("the renders ran in children %v, want one", seen)
	}
	t.Logf("one child rendered for %s of CPU time, its limit being 1s a render", cpu.Round(time.Millisecond))
}

// ChildRendersInATest is fewer than isolate.ChildRenders: the test's renders would otherwise
// see the child retire.
const ChildRendersInATest = isolate.ChildRenders - 10

// childCPU is the CPU time of the process pid.
func childCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	// utime and stime are fields 14 and 15 of stat, 12 and 13 after the comm.
	utime, _ := strconv.Atoi(fields[11])
	stime, _ := strconv.Atoi(fields[12])
	return time.Duration(utime+stime) * time.Second / 100
}

// A kept child renders one namespace's renders only: a tenant's chart that prints all a template
// sees (its values, release, chart, files and capabilities), rendered after another tenant's,
// runs in another child and finds nothing of the first's values; each namespace's next render
// runs in the child kept for it.
func TestAKeptChildRendersOneNamespacesRendersOnly(t *testing.T) {
	a := isolate.Process{Memory: 256 << 20, Timeout: 5 * time.Minute, Warm: 2, Namespace: "team-a"}
	b := a
	b.Namespace = "team-b"
	victim := bomb(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  token: {{ .Values.token | quote }}\n")
	const secret = "s3cr3t-of-team-a"
	got, err := a.Render(context.Background(), victim, render.Options{ReleaseName: "a", TargetNamespace: "team-a", Values: map[string]any{"token": secret}})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := manifests.Marshal(got.Objects); !strings.Contains(string(out), secret) {
		t.Fatalf("the victim's render does not hold its own value: %s", out)
	}
	attacker := bomb(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  all: {{ toJson . | quote }}\n")
	for i := range 2 {
		got, err = b.Render(context.Background(), attacker, render.Options{ReleaseName: "b", TargetNamespace: "team-b"})
		if err != nil {
			t.Fatal(err)
		}
		out, _ := manifests.Marshal(got.Objects)
		if strings.Contains(string(out), secret) || strings.Contains(string(out), "team-a") {
			t.Errorf("team b's render %d saw team a's: %s", i, out)
		}
		if !strings.Contains(string(out), "team-b") {
			t.Errorf("the attacker's render %d did not print what it sees: %s", i, out)
		}
	}
	keptA, keptB := a.Kept(), b.Kept()
	if len(keptA) != 1 || len(keptB) != 1 || keptA[0] == keptB[0] {
		t.Fatalf("kept for team-a %v, for team-b %v: want one child each, not the same", keptA, keptB)
	}
	if _, err := a.Render(context.Background(), victim, render.Options{ReleaseName: "a", TargetNamespace: "team-a", Values: map[string]any{"token": secret}}); err != nil {
		t.Fatal(err)
	}
	if again := a.Kept(); len(again) != 1 || again[0] != keptA[0] {
		t.Errorf("team-a's next render kept %v, want its child %v", again, keptA)
	}
	// Warm (2) children are kept after renders, those of the namespaces that rendered last: a
	// third namespace's render takes the place of team-b's, which rendered before team-a's last.
	c := a
	c.Namespace = "team-c"
	if _, err := c.Render(context.Background(), victim, render.Options{ReleaseName: "c", TargetNamespace: "team-c"}); err != nil {
		t.Fatal(err)
	}
	if ka, kb, kc := a.Kept(), b.Kept(), c.Kept(); len(ka) != 1 || len(kb) != 0 || len(kc) != 1 {
		t.Errorf("kept for team-a %v, team-b %v, team-c %v: want team-b's to have exited", ka, kb, kc)
	}
}

// manyKeys is a chart of configMaps ConfigMaps of keys short keys each: some 13 bytes of YAML a
// key, within the output budget, and some 90 bytes of the heap of whoever reads it.
func manyKeys(t testing.TB, configMaps, keys int) []oci.Layer {
	t.Helper()
	return bomb(t, "{{ range $i := until "+strconv.Itoa(configMaps)+" }}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m{{ $i }}\ndata:\n{{ range until "+strconv.Itoa(keys)+" }}  k{{ . }}: v\n{{ end }}{{ end }}")
}

// A chart of ConfigMaps of many short keys, within the output budget (4 MiB here, 2 MiB of
// YAML), would cost this process six times as much to read: its read stops at its budget (twice
// the output budget), named, and this process's heap stays below it.
func TestTheParentsReadOfARendersObjectsStopsAtItsBudget(t *testing.T) {
	p := isolate.Process{Memory: 512 << 20, Timeout: 5 * time.Minute}
	limits := render.Limits{OutputBytes: 4 << 20}
	before := heap()
	_, err := p.Render(context.Background(), manyKeys(t, 10, 15_000), render.Options{ReleaseName: "k", TargetNamespace: "k", Limits: limits})
	le := ocitest.LimitError(t, err, render.LimitDecodedBytes, isolate.DecodedBytes(limits.OutputBytes))
	t.Logf("%v; this process's heap %d MiB → %d MiB", le, before>>20, heap()>>20)
	if grown := int64(heap()) - int64(before); grown > isolate.DecodedBytes(limits.OutputBytes) {
		t.Errorf("this process's heap grew by %d MiB", grown>>20)
	}
	got, err := p.Render(context.Background(), manyKeys(t, 3, 1000), render.Options{ReleaseName: "k", TargetNamespace: "k", Limits: limits})
	if err != nil || len(got.Objects) != 3 {
		t.Fatalf("an ordinary chart of the same budgets: %v", err)
	}
}

// A render child runs below the controller (nice 10), all its threads; one whose render runs past
// its share beside another render is moved to the lowest priority (nice 19), all its threads, so
// that on a busy core the other render takes most of the CPU time; alone, it keeps its priority;
// and once moved it renders nothing more (no process may raise its priority again). Counted in
// the nice values the kernel reports and the child's CPU time, not in wall time.
func TestARenderPastItsShareBesideAnotherRunsAtTheLowestPriority(t *testing.T) {
	layers := []oci.Layer{{MediaType: oci.MediaTypeHelmChart, Data: ocitest.PodinfoChart(t)}}
	opts := render.Options{ReleaseName: "web", TargetNamespace: "team-a"}
	p := isolate.Process{Memory: 256 << 20, Timeout: 5 * time.Minute, Warm: 1, Namespace: "nice"}
	if _, err := p.Render(context.Background(), layers, opts); err != nil {
		t.Fatal(err)
	}
	kept := p.Kept()
	if len(kept) != 1 {
		t.Fatalf("kept children %v, want one", kept)
	}
	if got := niceOf(t, kept[0]); len(got) < 2 || !all(got, 10) {
		t.Errorf("the kept child's threads run at nice %v, want 10 each", got)
	}

	// A share of a nanosecond: every render runs past it.
	p.Share = time.Nanosecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Render(ctx, bomb(t, "{{ range until 4000000 }}{{ range until 400 }}{{ end }}{{ end }}"), render.Options{ReleaseName: "b", TargetNamespace: "b"})
		done <- err
	}()
	// Alone past its share (its render has taken CPU time), it keeps its priority.
	for deadline := time.Now().Add(time.Minute); childCPU(t, kept[0]) < 200*time.Millisecond; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the bomb's render took no CPU time in a minute")
		}
	}
	if got := niceOf(t, kept[0]); !all(got, 10) {
		t.Errorf("alone past its share, the child's threads run at nice %v, want 10 each", got)
	}
	// Another render starts beside it: the child is moved before that render runs.
	other := isolate.Process{Memory: 256 << 20, Timeout: 5 * time.Minute, Warm: 1, Namespace: "other"}
	if _, err := other.Render(context.Background(), layers, opts); err != nil {
		t.Fatal(err)
	}
	if got := niceOf(t, kept[0]); len(got) < 2 || !all(got, 19) {
		t.Errorf("past its share beside another render, the child's threads run at nice %v, want 19 each", got)
	}
	cancel()
	<-done
	p.Share = 0
	if _, err := p.Render(context.Background(), layers, opts); err != nil {
		t.Fatal(err)
	}
	if now := p.Kept(); len(now) != 1 || now[0] == kept[0] {
		t.Errorf("kept children %v after a render past its share in %d: want another one", now, kept[0])
	}
}

// niceOf is the nice value of each thread of process pid (none once it exited).
func niceOf(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil
	}
	var nice []int
	for _, task := range tasks {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/stat")
		if err != nil {
			continue
		}
		// nice is field 19 of stat, 17 after the comm.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		n, err := strconv.Atoi(fields[16])
		if err != nil {
			t.Fatalf("stat of thread %s of %d: %q", task.Name(), pid, stat)
		}
		nice = append(nice, n)
	}
	return nice
}

// all reports whether every one of ns is n.
func all(ns []int, n int) bool {
	for _, m := range ns {
		if m != n {
			return false
		}
	}
	return true
}
