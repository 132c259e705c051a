package build_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
)

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

// A registry that trickles the source's bytes (a byte every 20 ms: a chart of a few KiB would
// take minutes) holds the render no longer than its timeout, and the Order says so.
func TestASourceRegistryThatTricklesBytesFailsAtTheRenderTimeout(t *testing.T) {
	f := newFixture(t)
	target, err := url.Parse("http://" + f.reg.Addr)
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
	in := f.input()
	in.SourceURL = "oci://" + strings.TrimPrefix(slow.URL, "http://") + "/charts/podinfo"
	b := &build.Builder{Sources: &oci.Client{}, Images: &images.Resolver{}, Budgets: config.RenderBudgets{Timeout: 2 * time.Second}}
	start := time.Now()
	_, err = b.Build(context.Background(), in)
	took := time.Since(start)
	var be *build.Error
	if !errors.As(err, &be) || be.Reason != build.ReasonRenderTimeout || !strings.Contains(err.Error(), "did not end within 2s") ||
		!strings.Contains(err.Error(), "--"+config.FlagRenderTimeout) {
		t.Fatalf("err %v, want RenderTimeout after 2s naming --%s", err, config.FlagRenderTimeout)
	}
	if took > 5*time.Second {
		t.Errorf("the build returned after %s, its timeout being 2s", took)
	}
	t.Logf("stopped after %s: %v", took.Round(time.Millisecond), err)
}
