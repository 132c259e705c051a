package orders

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// hostileChart pushes a chart whose one template is body, and a Product of it in ns with
// values; it returns the chart's URL.
func hostileChart(t *testing.T, src *source, ns, name, body string, values map[string]any) string {
	t.Helper()
	url := "oci://" + ocitest.Repo(src.reg, "charts/"+name)
	ocitest.PushChart(t, oci.TrimScheme(url), "1.0.0", name, "1.0.0", ocitest.Chart(t, name, map[string]string{
		"Chart.yaml":        "apiVersion: v2\nname: " + name + "\nversion: 1.0.0\n",
		"templates/cm.yaml": body,
	}))
	p := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1.ProductSpec{Source: v1.ProductSource{URL: url, Version: "1.0.0"}}}
	if values != nil {
		p.Spec.Render = &v1.RenderSpec{Helm: &v1.HelmRender{Values: jsonValues(t, values)}}
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return url
}

// renderGood creates a good Order in a namespace of its own and returns how long it took to be
// Rendered.
func renderGood(t *testing.T, src *source) time.Duration {
	t.Helper()
	ns := newNamespace(t)
	src.product(t, ns, "podinfo", "", src.values("calm"))
	start := time.Now()
	order(t, ns, "good", "podinfo", "", v1.PromotionManual)
	waitReady(t, ns, "good", v1.ReasonRendered)
	return time.Since(start)
}

// medianGood is the median time of three good Orders rendered one after the other.
func medianGood(t *testing.T, src *source) time.Duration {
	t.Helper()
	times := []time.Duration{renderGood(t, src), renderGood(t, src), renderGood(t, src)}
	slices.Sort(times)
	return times[1]
}

// noise is what a render's time varies by on a busy 2-core machine, attack or not (the API
// server, the registries and the test share it): a good render takes 100-300 ms.
const noise = 500 * time.Millisecond

// A tenant's templates that loop in loops, with output or without, a value passed through tpl
// that makes gigabytes, and a chart that allocates in a range: each render runs in a process
// of its own, held to --render-max-memory and --render-timeout, and each Order ends in a named
// condition; the controller's memory does not move; and another namespace's good Order, created
// at the same time, renders within twice the time it takes with no attack (the attacker's
// namespace holds at most half the render slots).
func TestNoTenantsRenderStallsOrCrashesTheController(t *testing.T) {
	src := newSource(t)
	calm := medianGood(t, src)

	attacker := newNamespace(t)
	// A kilobyte a turn: the render memory is reached in a few hundred thousand turns, a fraction of
	// a second of CPU time, before the timeout on a loaded machine too.
	nested := "{{ range until 4000000 }}{{ range until 4000000 }}" + strings.Repeat("x", 1024) + "{{ end }}{{ end }}"
	urls := map[string]string{
		"nested": hostileChart(t, src, attacker, "nested", nested+"\n", nil),
		"spin":   hostileChart(t, src, attacker, "spin", "{{ range until 4000000 }}{{ range until 400 }}{{ end }}{{ end }}\n", nil),
		"tpl":    hostileChart(t, src, attacker, "tpl", "{{ tpl .Values.greeting . }}\n", map[string]any{"greeting": nested}),
		"alloc":  hostileChart(t, src, attacker, "alloc", "{{ $l := list }}{{ range until 4000 }}{{ range until 4000 }}{{ $l = append $l \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\" }}{{ end }}{{ end }}\n", nil),
	}
	reset := resetPeakRSS(t)
	before := peakRSS(t)
	start := time.Now()
	for name := range urls {
		order(t, attacker, name, name, "", v1.PromotionManual)
	}
	t.Cleanup(func() {
		for name := range urls {
			_ = env.Client.Delete(context.Background(), &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: attacker}})
		}
	})
	underAttack := medianGood(t, src)
	t.Logf("a good Order of another namespace (median of 3): Rendered after %s with no attack, %s under attack", calm.Round(time.Millisecond), underAttack.Round(time.Millisecond))
	if underAttack > 2*calm+noise {
		t.Errorf("under attack the good Order took %s, over twice the %s it takes with no attack (and %s of noise)", underAttack, calm, noise)
	}

	memory := []string{"render budget of memory bytes", "more than the limit of 256Mi memory bytes", "--" + config.FlagMemory}
	timeout := []string{"did not end within 15s", "--" + config.FlagRenderTimeout}
	for name, reason := range map[string]string{"nested": v1.ReasonBudgetExceeded, "spin": v1.ReasonRenderTimeout, "tpl": v1.ReasonBudgetExceeded, "alloc": ""} {
		// The attacker's Orders render one after another (its namespace holds one slot), each
		// ending at the render timeout at the latest: the last may end that many timeouts late.
		o := waitFailed(t, attacker, name, time.Duration(len(urls))*cfg.RenderBudgets.Timeout+waitTimeout)
		c := readyMessage(o)
		t.Logf("order %s: %s after %s: %s", name, readyReason(o), time.Since(start).Round(time.Millisecond), c)
		r := readyReason(o)
		if r != v1.ReasonBudgetExceeded && r != v1.ReasonRenderTimeout {
			t.Errorf("order %s: reason %s, want %s or %s", name, r, v1.ReasonBudgetExceeded, v1.ReasonRenderTimeout)
		}
		// The allocating range reaches the memory or the timeout first as the machine's load has it.
		if reason != "" && r != reason {
			t.Errorf("order %s: reason %s, want %s", name, r, reason)
		}
		says := timeout
		if r == v1.ReasonBudgetExceeded {
			says = memory
		}
		for _, want := range append(says, urls[name]) {
			if !strings.Contains(c, want) {
				t.Errorf("order %s: message %q does not say %q", name, c, want)
			}
		}
	}
	after := peakRSS(t)
	t.Logf("peak RSS of the test process (controller, registries, test): %d MiB before the attack, %d MiB after (reset %v)", before>>20, after>>20, reset)
	if after > controllerMemoryLimit/2 {
		t.Errorf("peak RSS %d MiB, over half the controller's memory limit of %d MiB", after>>20, controllerMemoryLimit>>20)
	}
}

// waitFailed waits for the Order's Ready reason to be a render budget's or the timeout's, at most
// within.
func waitFailed(t *testing.T, ns, name string, within time.Duration) *v1.Order {
	t.Helper()
	var o *v1.Order
	eventuallyWithin(t, within, "order "+name+" failed by a render limit", func() (bool, string) {
		o = getOrder(t, ns, name)
		r := readyReason(o)
		return r == v1.ReasonBudgetExceeded || r == v1.ReasonRenderTimeout, r
	})
	return o
}

func readyReason(o *v1.Order) string {
	if c := meta.FindStatusCondition(o.Status.Conditions, v1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}

// A controller that starts again while an Order's render keeps failing (a source that takes
// each render to its limits, or a crash) does not render it first: the Order's status says when
// it is due, and the restarted controller renders the other Orders meanwhile.
func TestARestartedControllerDoesNotRetryAFailedRenderBeforeItIsDue(t *testing.T) {
	ns := movedNamespace
	src, stop, spin := spinInMoved(t, "spin", "good")
	failed := waitFailed(t, ns, "spin", waitTimeout)
	rr := failed.Status.RenderRetry
	if rr == nil || rr.Failures != 1 || rr.Input == "" || time.Until(rr.NotBefore.Time) < 50*time.Minute {
		t.Fatalf("status.renderRetry %+v after one failure of %s: want 1 failure, due in an hour", rr, spin)
	}
	stop()

	// Started again, with an empty memory: the good Order renders, the failed one waits.
	again := restartAndRender(t, src, "good", "spin")
	if got := again.Status.RenderRetry; got == nil || got.Failures != 1 || !got.NotBefore.Equal(&rr.NotBefore) {
		t.Errorf("after the restart status.renderRetry is %+v, was %+v: the failed render was tried again before it was due", got, rr)
	}
	if readyMessage(again) != readyMessage(failed) {
		t.Errorf("after the restart the Ready message changed:\n%s\nwas\n%s", readyMessage(again), readyMessage(failed))
	}
}

// spinInMoved starts an Order reconciler of movedNamespace whose failed renders wait an hour, and
// an Order name there of a chart that spins until the render timeout; the Orders name and good
// go when the test ends, with their Products, so that the test runs again (go test -count=2).
// It returns the source, the reconciler's stop and the chart's URL.
func spinInMoved(t *testing.T, name, good string) (src *source, stop func(), url string) {
	t.Helper()
	ns := movedNamespace
	if err := env.CreateNamespace(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	src = newSource(t)
	stop = startOrdersWith(t, bundled.Addr, time.Hour)
	url = hostileChart(t, src, ns, name, "{{ range until 4000000 }}{{ range until 400 }}{{ end }}{{ end }}\n", nil)
	order(t, ns, name, name, "", v1.PromotionManual)
	t.Cleanup(func() {
		for _, n := range []string{name, good} {
			_ = env.Client.Delete(context.Background(), &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns}})
			_ = env.Client.Delete(context.Background(), &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns}})
		}
	})
	return src, stop, url
}

// restartAndRender starts the Order reconciler of movedNamespace again (spinInMoved's stopped),
// waits for a good Order to render there, then 2 s more, and returns the Order watched.
func restartAndRender(t *testing.T, src *source, good, watched string) *v1.Order {
	t.Helper()
	src.product(t, movedNamespace, good, "", src.values(good))
	order(t, movedNamespace, good, good, "", v1.PromotionManual)
	startOrdersWith(t, bundled.Addr, time.Hour)
	waitReady(t, movedNamespace, good, v1.ReasonRendered)
	time.Sleep(2 * time.Second)
	return getOrder(t, movedNamespace, watched)
}

// trickle passes each response body on a byte every interval.
type trickle struct {
	w        http.ResponseWriter
	interval time.Duration
}

func (t trickle) Header() http.Header  { return t.w.Header() }
func (t trickle) WriteHeader(code int) { t.w.WriteHeader(code) }
func (t trickle) Write(p []byte) (int, error) {
	for i := range p {
		if _, err := t.w.Write(p[i : i+1]); err != nil {
			return i, err
		}
		if f, ok := t.w.(http.Flusher); ok {
			f.Flush()
		}
		time.Sleep(t.interval)
	}
	return len(p), nil
}

// A tenant's Product names a registry that trickles its chart's bytes (a byte every 20 ms: the
// podinfo chart would take minutes): the controller stops the pull at --render-timeout, the
// Order says so, and a good Order of another namespace renders meanwhile.
func TestASourceRegistryThatTricklesFailsTheOrderAtTheRenderTimeout(t *testing.T) {
	src := newSource(t)
	target, err := url.Parse("http://" + src.reg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") {
			proxy.ServeHTTP(trickle{w, 20 * time.Millisecond}, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	ns := newNamespace(t)
	p := src.product(t, ns, "slow", "", src.values("slow"))
	p.Spec.Source.URL = "oci://" + strings.TrimPrefix(slow.URL, "http://") + "/charts/podinfo"
	if err := env.Client.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	order(t, ns, "slow", "slow", "", v1.PromotionManual)
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: ns}})
	})
	good := renderGood(t, src)
	o := waitFailed(t, ns, "slow", waitTimeout)
	took := time.Since(start)
	t.Logf("the good Order of another namespace rendered in %s; the trickled one failed after %s: %s", good.Round(time.Millisecond), took.Round(time.Millisecond), readyMessage(o))
	if r := readyReason(o); r != v1.ReasonRenderTimeout || !strings.Contains(readyMessage(o), "did not end within 15s") ||
		!strings.Contains(readyMessage(o), "--"+config.FlagRenderTimeout) {
		t.Errorf("the trickled Order: %s %q, want RenderTimeout after 15s naming --%s", r, readyMessage(o), config.FlagRenderTimeout)
	}
	if took > 45*time.Second {
		t.Errorf("the trickled Order failed after %s, its render timeout being 15s", took)
	}
}

// A controller killed while it renders (at its memory limit, by a tenant's chart) wrote before
// the render what the render would be as a failure: the controller that starts again finds the
// Order's status.renderRetry due later and renders its other Orders meanwhile, rather than
// rendering at once, and dying of, the same input again.
func TestAControllerKilledInARenderIsFollowedByOneThatWaits(t *testing.T) {
	ns := movedNamespace
	src, stop, _ := spinInMoved(t, "inflight", "calm")
	var marked *v1.Order
	eventually(t, "the render in flight marked in status.renderRetry", func() (bool, string) {
		marked = getOrder(t, ns, "inflight")
		return marked.Status.RenderRetry != nil, readyReason(marked)
	})
	rr := marked.Status.RenderRetry
	if rr.Failures != 1 || time.Until(rr.NotBefore.Time) < 50*time.Minute || readyReason(marked) == v1.ReasonRenderTimeout {
		t.Fatalf("in flight: status.renderRetry %+v, Ready %s: want 1 failure due in an hour, the render not ended", rr, readyReason(marked))
	}
	// The controller dies in the render: nothing it does after is written.
	stop()

	// A render of the marked input would mark a second failure as it starts.
	again := restartAndRender(t, src, "calm", "inflight")
	if got := again.Status.RenderRetry; got == nil || got.Failures != 1 || !got.NotBefore.Equal(&rr.NotBefore) {
		t.Errorf("after the restart status.renderRetry is %+v, was %+v: the render the controller died in was tried again at once", got, rr)
	}
}

// Two tenants' Orders whose renders run to the render timeout hold both render slots; a third
// tenant's ordinary Order takes the spare slot once they have held theirs longer than an
// ordinary render, and is Rendered within 5 s rather than after their timeout (15 s here).
func TestATenantsRenderFindsASlotBesideTwoTenantsBombs(t *testing.T) {
	src := newSource(t)
	alone := medianGood(t, src)
	var bombs []string
	for range 2 {
		ns := newNamespace(t)
		hostileChart(t, src, ns, "spin", "{{ range until 4000000 }}{{ range until 400 }}{{ end }}{{ end }}\n", nil)
		order(t, ns, "spin", "spin", "", v1.PromotionManual)
		bombs = append(bombs, ns)
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "spin", Namespace: ns}})
		})
	}
	// Both bombs render: each marked its render in flight in status.renderRetry.
	for _, ns := range bombs {
		eventually(t, "the bomb of "+ns+" rendering", func() (bool, string) {
			o := getOrder(t, ns, "spin")
			return o.Status.RenderRetry != nil && readyReason(o) != v1.ReasonRenderTimeout, readyReason(o)
		})
	}
	beside := renderGood(t, src)
	t.Logf("a third tenant's Order: Rendered after %s beside two tenants' bombs, %s alone (median of 3)", beside.Round(time.Millisecond), alone.Round(time.Millisecond))
	for _, ns := range bombs {
		if r := readyReason(getOrder(t, ns, "spin")); r == v1.ReasonRenderTimeout {
			t.Fatalf("the bomb of %s ended before the third tenant's render: the slots were not held", ns)
		}
	}
	if beside > 5*time.Second {
		t.Errorf("beside two tenants' bombs the third tenant's Order took %s, over 5s", beside)
	}
}

// A tenant's twenty slow Orders take the render slots one after the other, a namespace's share
// at a time: another tenant's single Order, created while they wait, takes the next slot and is
// Rendered while the twenty have rendered at most two more (one render's time), not after them.
func TestATenantsTwentySlowRendersDoNotQueueAnotherTenantsOne(t *testing.T) {
	src := newSource(t)
	a := newNamespace(t)
	// About a second of template work, then one ConfigMap.
	hostileChart(t, src, a, "slow", "{{ range until 2500 }}{{ range until 4000 }}{{ end }}{{ end }}\n"+
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: slow\ndata: {}\n", nil)
	const many = 20
	names := make([]string, many)
	for i := range names {
		names[i] = "slow-" + strconv.Itoa(i)
		order(t, a, names[i], "slow", "", v1.PromotionManual)
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: a}})
		})
	}
	rendered := func() int {
		n := 0
		for _, name := range names {
			if readyReason(getOrder(t, a, name)) == v1.ReasonRendered {
				n++
			}
		}
		return n
	}
	// The first of the twenty is through: the others wait their namespace's turn.
	eventually(t, "the first of "+a+"'s slow Orders Rendered", func() (bool, string) {
		n := rendered()
		return n >= 1, strconv.Itoa(n) + " Rendered"
	})
	before := rendered()
	took := renderGood(t, src)
	after := rendered()
	t.Logf("another tenant's Order: Rendered after %s, while %d of the %d slow Orders rendered (%d before it)", took.Round(time.Millisecond), after-before, many, before)
	if after >= many {
		t.Fatalf("all %d slow Orders rendered before the other tenant's: they are not slow enough to show the queue", many)
	}
	if after-before > 2 {
		t.Errorf("while the other tenant's one Order waited, %d of the slow tenant's Orders rendered: it waited behind them, not one render's time", after-before)
	}
}
