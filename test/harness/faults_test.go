package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// configMapServer answers GET and PUT of ConfigMaps as the API server does, and counts the
// requests that reach it.
func configMapServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", ResourceVersion: "1"}}
		if r.Method == http.MethodPut {
			body, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(body, &cm); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(cm)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func clientset(t *testing.T, srv *httptest.Server, f *Faults) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(f.Config(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// failures sends n GETs to distinct and repeated paths through a Faults and returns the
// indexes of those that failed.
func failures(t *testing.T, srv *httptest.Server, f *Faults, n int) []int {
	t.Helper()
	c := &http.Client{Transport: f.RoundTripper(http.DefaultTransport)}
	var failed []int
	for i := range n {
		resp, err := c.Get(fmt.Sprintf("%s/api/v1/namespaces/ns/configmaps/cm-%d", srv.URL, i%7))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			failed = append(failed, i)
		}
	}
	return failed
}

func TestFaultsFailTheirShareOfRequestsAndReplayWithTheSeed(t *testing.T) {
	srv, hits := configMapServer(t)
	f := &Faults{Rate: 0.1, Seed: 7, Kinds: []FaultKind{FaultServerError}}
	failed := failures(t, srv, f, 2000)
	if len(failed) < 150 || len(failed) > 250 {
		t.Errorf("%d of 2000 requests failed at a rate of 0.1", len(failed))
	}
	if got := f.Counts(); got.Requests != 2000 || got.Injected[FaultServerError] != int64(len(failed)) || got.Total() != int64(len(failed)) {
		t.Errorf("counts %v, want 2000 requests and %d server errors", got, len(failed))
	}
	if n := hits.Load(); n != int64(2000-len(failed)) {
		t.Errorf("%d requests reached the server, want %d: a failed one must not", n, 2000-len(failed))
	}
	if again := failures(t, srv, &Faults{Rate: 0.1, Seed: 7, Kinds: f.Kinds}, 2000); !slices.Equal(again, failed) {
		t.Errorf("the same seed failed other requests")
	}
	if other := failures(t, srv, &Faults{Rate: 0.1, Seed: 8, Kinds: f.Kinds}, 2000); slices.Equal(other, failed) {
		t.Errorf("another seed failed the same requests")
	}
}

func TestInjectedFaultsAreWhatClientGoSeesFromTheAPIServer(t *testing.T) {
	srv, hits := configMapServer(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", ResourceVersion: "1"}}

	// A conflict fails writes only.
	cs := clientset(t, srv, &Faults{Rate: 1, Kinds: []FaultKind{FaultConflict}})
	if _, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{}); err != nil {
		t.Errorf("a read failed with conflicts only: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update: %v, want a conflict", err)
	}

	// A server error.
	cs = clientset(t, srv, &Faults{Rate: 1, Kinds: []FaultKind{FaultServerError}})
	if _, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{}); !apierrors.IsInternalError(err) {
		t.Errorf("get: %v, want an internal error", err)
	}

	// Throttling: client-go waits as Retry-After says and tries again, by itself.
	f := &Faults{Rate: 0.5, Seed: 3, Kinds: []FaultKind{FaultThrottle}}
	cs = clientset(t, srv, f)
	start := time.Now()
	for range 4 {
		if _, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{}); err != nil {
			t.Fatalf("a throttled read was not retried: %v", err)
		}
	}
	throttled := f.Counts().Injected[FaultThrottle]
	t.Logf("%d of %d reads throttled, in %s", throttled, f.Counts().Requests, time.Since(start))
	if throttled == 0 {
		t.Fatalf("no request was throttled: %v", f.Counts())
	}
	if took := time.Since(start); took < time.Duration(throttled)*time.Second {
		t.Errorf("%d throttled requests took %s: Retry-After was not honoured", throttled, took)
	}

	// A timeout: the write reaches the server, the client sees a timeout after the delay.
	f = &Faults{Rate: 1, Kinds: []FaultKind{FaultTimeout}, TimeoutDelay: 300 * time.Millisecond}
	cs = clientset(t, srv, f)
	before := hits.Load()
	start = time.Now()
	_, err := cs.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{})
	if !utilnet.IsTimeout(err) {
		t.Errorf("update: %v, want a timeout", err)
	}
	if took := time.Since(start); took < f.TimeoutDelay {
		t.Errorf("the timeout came after %s, want at least %s", took, f.TimeoutDelay)
	}
	if hits.Load() != before+1 {
		t.Errorf("the timed-out write did not reach the server")
	}
	// A watch that times out is not sent: its stream never starts. (client-go retries a watch
	// that timed out every second; one attempt is enough here.)
	before = hits.Load()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	w, err := cs.CoreV1().ConfigMaps("ns").Watch(wctx, metav1.ListOptions{})
	if err == nil {
		w.Stop()
	}
	if hits.Load() != before {
		t.Errorf("a timed-out watch reached the server")
	}
	if got := f.Counts().Injected[FaultTimeout]; got < 2 {
		t.Errorf("%d timeouts counted, want 2 or more", got)
	}
}

func TestFaultsFromEnv(t *testing.T) {
	t.Setenv(EnvFaults, "")
	if f, err := FaultsFromEnv(); f != nil || err != nil {
		t.Errorf("unset: %v, %v", f, err)
	}
	t.Setenv(EnvFaults, "0.1")
	t.Setenv(EnvFaultsSeed, "42")
	if f, err := FaultsFromEnv(); err != nil || f.Rate != 0.1 || f.Seed != 42 {
		t.Errorf("0.1 and 42: %+v, %v", f, err)
	}
	if got := (&Faults{Rate: 0.1}).Patience(90 * time.Second); got != 270*time.Second {
		t.Errorf("patience at 0.1: %s", got)
	}
	for _, bad := range []string{"ten percent", "1.5", "-0.1"} {
		t.Setenv(EnvFaults, bad)
		if _, err := FaultsFromEnv(); err == nil {
			t.Errorf("%s=%q was accepted", EnvFaults, bad)
		}
	}
}
