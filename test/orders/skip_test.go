package orders

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// counting is a proxy on loopback in front of a registry that records every request: the tests
// see what the controller asked of the registry.
type counting struct {
	// Addr is the host:port the registry is reached at through the proxy.
	Addr string

	mu     sync.Mutex
	target *url.URL
	seen   []request
}

// request is one request the proxy passed on.
type request struct {
	Method string
	Path   string
	At     time.Time
}

// newCounting starts a counting proxy to the registry at target (host:port), closed when the
// test ends.
func newCounting(t *testing.T, target string) *counting {
	t.Helper()
	c := &counting{}
	c.retarget(target)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		c.mu.Lock()
		c.seen = append(c.seen, request{Method: pr.In.Method, Path: pr.In.URL.Path, At: time.Now()})
		target := c.target
		c.mu.Unlock()
		pr.SetURL(target)
		// The registry writes the addresses it answers with (upload locations) for the proxy.
		pr.Out.Host = pr.In.Host
	}}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	c.Addr = strings.TrimPrefix(srv.URL, "http://")
	return c
}

// retarget sends the requests to come to the registry at target (host:port).
func (c *counting) retarget(target string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.target = &url.URL{Scheme: "http", Host: target}
}

// requests lists the requests since the last reset with method (any when empty) whose path
// matches pattern.
func (c *counting) requests(method, pattern string) []request {
	re := regexp.MustCompile(pattern)
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []request
	for _, r := range c.seen {
		if (method == "" || r.Method == method) && re.MatchString(r.Path) {
			out = append(out, r)
		}
	}
	return out
}

// reset forgets the requests seen so far.
func (c *counting) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = nil
}

// through is src read through a counting proxy: the chart and the images the values name.
func (s *source) through(t *testing.T) (*source, *counting) {
	t.Helper()
	proxy := newCounting(t, s.reg.Addr)
	via := *s
	via.chartURL = strings.Replace(s.chartURL, s.reg.Addr, proxy.Addr, 1)
	via.podinfoRepo = strings.Replace(s.podinfoRepo, s.reg.Addr, proxy.Addr, 1)
	via.initImage = strings.Replace(s.initImage, s.reg.Addr, proxy.Addr, 1)
	return &via, proxy
}

func TestAResyncWithNothingChangedRendersNothing(t *testing.T) {
	src := newSource(t)
	via, proxy := src.through(t)
	ns := newNamespace(t)
	via.product(t, ns, "podinfo", "", via.values("one"))
	order(t, ns, "quiet", "podinfo", "", v1.PromotionAutomatic)
	o := waitReady(t, ns, "quiet", v1.ReasonRendered)
	first := o.Status.LatestPreparation
	if !strings.HasPrefix(o.Status.InputsHash, "sha256:") {
		t.Fatalf("status.inputsHash %q, want the hash of what was rendered", o.Status.InputsHash)
	}

	// Resyncs (every 3 s here) look at the source tag and the image tags, with HEAD requests
	// only: no pull, so no render and no push. The image tag's digest is kept for a second
	// (TagTTL): a resync that follows another reconcile within it (a loaded machine bunches
	// them) finds it kept, so the resyncs go on until the image tag was looked at twice.
	chartManifest := `^/v2/charts/podinfo/manifests/6\.14\.1$`
	imageTag := `^/v2/stefanprodan/podinfo/manifests/6\.14\.1$`
	proxy.reset()
	eventually(t, "four resyncs, and the image tag looked at twice", func() (bool, string) {
		n, m := len(proxy.requests(http.MethodHead, chartManifest)), len(proxy.requests(http.MethodHead, imageTag))
		return n >= 4 && m >= 2, fmt.Sprintf("%d HEAD requests of the chart's tag, %d of the image's", n, m)
	})
	// Any GET of a manifest or a blob is a pull (GET /v2/ only asks how to sign in).
	pull := `/(manifests|blobs)/`
	if pulls := proxy.requests(http.MethodGet, pull); len(pulls) != 0 {
		t.Errorf("resyncs with nothing changed pulled %d times: %+v", len(pulls), pulls)
	}
	o = getOrder(t, ns, "quiet")
	if n := len(preparations(t, ns, "quiet")); n != 1 || o.Status.LatestPreparation != first || !strings.HasPrefix(readyMessage(o), "Up to date") {
		t.Errorf("after resyncs: %d Preparations, latest %s (was %s), Ready %q", n, o.Status.LatestPreparation, first, readyMessage(o))
	}

	// A change of the Order that is not rendered (its promotion mode) renders nothing either.
	editOrder(t, ns, "quiet", func(o *v1.Order) { o.Spec.Promotion.Mode = v1.PromotionManual })
	eventually(t, "the edit reconciled", func() (bool, string) {
		o = getOrder(t, ns, "quiet")
		return o.Status.ObservedGeneration == o.Generation, fmt.Sprintf("observed %d of %d", o.Status.ObservedGeneration, o.Generation)
	})
	if pulls := proxy.requests(http.MethodGet, pull); len(pulls) != 0 {
		t.Errorf("a change of the promotion mode pulled %d times", len(pulls))
	}

	// The source tag moves: the next resync renders it into a new Preparation.
	files := map[string]string{}
	for k, v := range ocitest.PodinfoFiles {
		files[k] = v
	}
	files["templates/note.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: note}\ndata: {moved: \"yes\"}\n"
	movedChart := ocitest.PushChart(t, oci.TrimScheme(src.chartURL), "6.14.1", "podinfo", "6.14.1", ocitest.Chart(t, "podinfo", files))
	eventually(t, "a Preparation of the moved source tag", func() (bool, string) {
		for _, p := range preparations(t, ns, "quiet") {
			if p.Spec.Source.Digest == movedChart {
				return true, ""
			}
		}
		return false, readyMessage(getOrder(t, ns, "quiet"))
	})

	// An image tag moves: the next resync pins the new digest in a new Preparation.
	movedImage := ocitest.PushImage(t, src.podinfoRepo+":6.14.1", 1)
	eventually(t, "a Preparation of the moved image tag", func() (bool, string) {
		for _, p := range preparations(t, ns, "quiet") {
			for _, img := range p.Spec.Images {
				if img.Pinned == via.podinfoRepo+"@"+movedImage {
					return true, ""
				}
			}
		}
		return false, readyMessage(getOrder(t, ns, "quiet"))
	})
	if n := len(preparations(t, ns, "quiet")); n != 3 {
		t.Errorf("%d Preparations, want 3: the first, the moved chart's, the moved image's", n)
	}
}

// retryAt finds when a failure's Ready message says Kokumi tries again.
var retryAt = regexp.MustCompile(`tries again in [0-9a-z.]+, at (\S+),`)

func TestAFailingRenderIsTriedAgainLessAndLessOften(t *testing.T) {
	ctx := context.Background()
	src := newSource(t)
	via, proxy := src.through(t)
	broken := map[string]string{}
	for k, v := range ocitest.PodinfoFiles {
		broken[k] = v
	}
	broken["templates/broken.yaml"] = "{{ if }}"
	ocitest.PushChart(t, oci.TrimScheme(src.chartURL), "6.15.0-broken", "podinfo", "6.15.0", ocitest.Chart(t, "podinfo", broken))
	ns := newNamespace(t)
	prod := via.product(t, ns, "podinfo", "", via.values("one"))
	prod.Spec.Source.Version = "6.15.0-broken"
	if err := env.Client.Update(ctx, prod); err != nil {
		t.Fatal(err)
	}
	order(t, ns, "flaky", "podinfo", "", v1.PromotionManual)

	// Every try pulls the chart once. The suite's first wait is 2 s: the waits double, 2, 4,
	// 8, 16 s; a load that slows the controller makes them only longer.
	pulls := `^/v2/charts/podinfo/manifests/6\.15\.0-broken$`
	var tries []request
	eventuallyWithin(t, 3*waitTimeout, "five tries", func() (bool, string) {
		tries = proxy.requests(http.MethodGet, pulls)
		return len(tries) >= 5, fmt.Sprintf("%d tries", len(tries))
	})
	for i := 1; i < len(tries); i++ {
		gap, want := tries[i].At.Sub(tries[i-1].At), time.Duration(1<<(i-1))*2*time.Second
		if gap < want-200*time.Millisecond {
			t.Errorf("try %d came %s after the one before, want at least %s", i+1, gap.Round(time.Millisecond), want)
		}
	}

	// The Ready condition says how often it failed and when it is tried next.
	var failed string
	eventually(t, "the fifth failure in the status", func() (bool, string) {
		failed = readyMessage(getOrder(t, ns, "flaky"))
		return strings.Contains(failed, "Failed 5 times in a row: Kokumi tries again in 32s"), failed
	})
	if !strings.Contains(failed, "broken.yaml") {
		t.Errorf("Ready %q does not say what failed", failed)
	}
	m := retryAt.FindStringSubmatch(failed)
	if m == nil {
		t.Fatalf("Ready %q does not say when it is tried again", failed)
	}
	next, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		t.Fatal(err)
	}

	// A fix of the Product is tried at once, not when the wait is over.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
		t.Fatal(err)
	}
	prod.Spec.Source.Version = "6.14.1"
	if err := env.Client.Update(ctx, prod); err != nil {
		t.Fatal(err)
	}
	o := waitReady(t, ns, "flaky", v1.ReasonRendered)
	if at := meta.FindStatusCondition(o.Status.Conditions, v1.ConditionReady).LastTransitionTime; !at.Time.Before(next) {
		t.Errorf("rendered at %s, not before the failed input's next try at %s", at, next)
	}
	if n := len(proxy.requests(http.MethodGet, pulls)); n != 5 {
		t.Errorf("the broken version was pulled %d times, want 5", n)
	}
}

// eventuallyWithin polls cond until it holds, for up to timeout.
func eventuallyWithin(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	why := ""
	for time.Now().Before(deadline) {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %s", what, why)
}

// Orders rendering together share what each image tag points to (the controller's tag cache):
// a dozen Orders of three namespaces, created at once from Products of the same chart, each
// pull and render the chart, but resolve each image tag a few times in all, not once per
// Order.
func TestOrdersRenderingTogetherResolveEachImageTagAboutOnce(t *testing.T) {
	src := newSource(t)
	via, proxy := src.through(t)
	const namespaces, perNamespace = 3, 4
	var nss []string
	for range namespaces {
		ns := newNamespace(t)
		nss = append(nss, ns)
		via.product(t, ns, "podinfo", "", via.values("one"))
	}
	proxy.reset()
	for _, ns := range nss {
		for i := range perNamespace {
			order(t, ns, fmt.Sprintf("web-%d", i), "podinfo", "", v1.PromotionManual)
		}
	}
	for _, ns := range nss {
		for i := range perNamespace {
			waitReady(t, ns, fmt.Sprintf("web-%d", i), v1.ReasonRendered)
		}
	}
	renders := len(proxy.requests(http.MethodGet, `^/v2/charts/podinfo/manifests/`))
	heads := len(proxy.requests(http.MethodHead, `^/v2/stefanprodan/podinfo/manifests/6\.14\.1$`))
	t.Logf("%d Orders: %d pulls of the chart, %d HEAD requests of the image tag", namespaces*perNamespace, renders, heads)
	if renders < namespaces*perNamespace {
		t.Fatalf("%d pulls of the chart for %d Orders, want one each", renders, namespaces*perNamespace)
	}
	if heads == 0 || heads >= renders/2 {
		t.Errorf("the image tag was resolved %d times for %d renders, want a few at most", heads, renders)
	}
}
