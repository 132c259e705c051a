package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cluster"
)

const server = "https://edge-1.example.com:6443"

func TestClassifyTellsRefusedCredentialsFromAnUnreachableServer(t *testing.T) {
	creds := cluster.Credentials{BearerToken: token}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	for _, tc := range []struct {
		name       string
		err        error
		wantReason string
		wantText   []string
	}{
		{"a 401 means the server refused the credentials", apierrors.NewUnauthorized("Unauthorized"),
			v1.ReasonUnauthorized, []string{"401 Unauthorized", "credentials Secret"}},
		{"a 403 on /version means the identity may not even read it", apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("RBAC: access denied")),
			v1.ReasonUnauthorized, []string{"403 Forbidden", "access denied"}},
		{"a refused connection carries the network error", fmt.Errorf("Get %q: %w", server+"/version", refused),
			v1.ReasonUnreachable, []string{"connection refused", server}},
		{"a TLS failure carries the TLS error", errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority"),
			v1.ReasonUnreachable, []string{"x509: certificate signed by unknown authority"}},
		{"a 503 from a starting server is unreachable, with the code", apierrors.NewServiceUnavailable("starting"),
			v1.ReasonUnreachable, []string{"HTTP 503"}},
		{"an error that quotes the token is redacted", errors.New("bad header Authorization: Bearer " + token),
			v1.ReasonUnreachable, []string{"[redacted]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cluster.Classify(server, creds, tc.err)
			if got.Reason != tc.wantReason {
				t.Fatalf("reason %s, want %s (message %q)", got.Reason, tc.wantReason, got.Message)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(got.Message, w) {
					t.Errorf("message %q does not carry %q", got.Message, w)
				}
			}
			if strings.Contains(got.Message, token) {
				t.Errorf("message %q carries the token", got.Message)
			}
		})
	}
}

func TestProbeReadsTheVersionWithTheToken(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`)
			return
		}
		fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
	}))
	defer srv.Close()
	insecure := cluster.Credentials{BearerToken: token, Insecure: true}

	if got := cluster.Probe(context.Background(), srv.URL, insecure, 2*time.Second); !got.Connected() || got.Version != "v1.37.2" {
		t.Fatalf("probe with the token: %+v", got)
	}
	wrong := cluster.Credentials{BearerToken: "wrong-token-value", Insecure: true}
	if got := cluster.Probe(context.Background(), srv.URL, wrong, 2*time.Second); got.Reason != v1.ReasonUnauthorized {
		t.Fatalf("probe with a wrong token: %+v", got)
	}
	untrusted := cluster.Credentials{BearerToken: token}
	got := cluster.Probe(context.Background(), srv.URL, untrusted, 2*time.Second)
	if got.Reason != v1.ReasonUnreachable || !strings.Contains(got.Message, "x509") {
		t.Fatalf("probe of a server whose certificate no CA vouches for: %+v", got)
	}
	srv.Close()
	got = cluster.Probe(context.Background(), srv.URL, insecure, 2*time.Second)
	if got.Reason != v1.ReasonUnreachable || !strings.Contains(got.Message, "connection refused") {
		t.Fatalf("probe of a stopped server: %+v", got)
	}
}

func TestProbeGivesUpAfterTheTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	got := cluster.Probe(context.Background(), srv.URL, cluster.Credentials{Insecure: true}, 300*time.Millisecond)
	if got.Reason != v1.ReasonUnreachable {
		t.Fatalf("a server that never answers: %+v", got)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("the probe waited %v, far past its timeout", elapsed)
	}
}

func TestOneFailureIsRetriedBeforeReadyTurnsFalse(t *testing.T) {
	for _, tc := range []struct {
		wasReady bool
		failures int
		want     bool
	}{
		{wasReady: true, failures: 1, want: false},
		{wasReady: true, failures: 2, want: true},
		{wasReady: true, failures: 5, want: true},
		{wasReady: false, failures: 1, want: true},
	} {
		if got := cluster.ReportFailure(tc.wasReady, tc.failures); got != tc.want {
			t.Errorf("ReportFailure(wasReady=%v, failures=%d) = %v, want %v", tc.wasReady, tc.failures, got, tc.want)
		}
	}
}

func TestJitterSpreadsProbesAroundThePeriod(t *testing.T) {
	period := 30 * time.Second
	if lo, hi := cluster.Jitter(period, 0), cluster.Jitter(period, 0.999999); lo != 27*time.Second || hi < 32*time.Second || hi > 33*time.Second {
		t.Fatalf("jitter spans [%v, %v], want about [27s, 33s)", lo, hi)
	}
	if cluster.Jitter(period, 0.25) == cluster.Jitter(period, 0.75) {
		t.Fatal("jitter does not depend on the random number")
	}
}

func TestTimeoutsFollowThePeriodWithinBounds(t *testing.T) {
	for _, tc := range []struct {
		period, timeout, retry time.Duration
	}{
		{time.Second, 2 * time.Second, time.Second},
		{12 * time.Second, 6 * time.Second, 2 * time.Second},
		{30 * time.Second, 10 * time.Second, 5 * time.Second},
		{10 * time.Minute, 10 * time.Second, 5 * time.Second},
	} {
		if got := cluster.Timeout(tc.period); got != tc.timeout {
			t.Errorf("Timeout(%v) = %v, want %v", tc.period, got, tc.timeout)
		}
		if got := cluster.RetryDelay(tc.period); got != tc.retry {
			t.Errorf("RetryDelay(%v) = %v, want %v", tc.period, got, tc.retry)
		}
	}
}

// BenchmarkProbe measures one probe of a loopback TLS server: a fresh transport, a TLS
// handshake and GET /version, as every probe of a Cluster does.
func BenchmarkProbe(b *testing.B) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
	}))
	defer srv.Close()
	creds := cluster.Credentials{BearerToken: token, Insecure: true}
	b.ReportAllocs()
	for b.Loop() {
		if r := cluster.Probe(context.Background(), srv.URL, creds, 2*time.Second); !r.Connected() {
			b.Fatal(r.Message)
		}
	}
}

// A Client built to keep alive probes over one connection; one built not to holds no
// connection between probes. It speaks HTTP/1.1, also to a server that offers HTTP/2, and holds
// no goroutine of net/http's transport for a kept connection (10,000 idle connections were
// 20,000 goroutines).
func TestAClientKeepsItsConnectionOnlyWhenAskedTo(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, keep := range []bool{true, false} {
			name := map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2] + map[bool]string{true: " keep-alive", false: " close"}[keep]
			t.Run(name, func(t *testing.T) {
				var opened, closed atomic.Int64
				var protos sync.Map
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					protos.Store(r.Proto, true)
					fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
				}))
				srv.EnableHTTP2 = h2
				srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
					switch s {
					case http.StateNew:
						opened.Add(1)
					case http.StateClosed, http.StateHijacked:
						closed.Add(1)
					}
				}
				srv.StartTLS()
				defer srv.Close()
				c := newClient(t, srv.URL, keep)
				const probes = 5
				for i := range probes {
					if got := c.Probe(context.Background()); !got.Connected() {
						t.Fatalf("probe: %+v", got)
					}
					if keep {
						continue
					}
					// The server sees the client's close a moment after the answer.
					deadline := time.Now().Add(5 * time.Second)
					for closed.Load() != opened.Load() && time.Now().Before(deadline) {
						time.Sleep(5 * time.Millisecond)
					}
					if o, cl := opened.Load(), closed.Load(); o != int64(i+1) || cl != o {
						t.Fatalf("after probe %d: %d connections opened, %d closed; want %d and %d", i+1, o, cl, i+1, i+1)
					}
				}
				if o, cl := opened.Load(), closed.Load(); keep && (o != 1 || cl != 0) {
					t.Errorf("%d probes opened %d connections and closed %d; want 1 kept open", probes, o, cl)
				}
				if _, ok := protos.Load("HTTP/1.1"); !ok {
					t.Error("the probes did not speak HTTP/1.1")
				}
				if _, ok := protos.Load("HTTP/2.0"); ok {
					t.Error("the probes spoke HTTP/2")
				}
				if stacks := goroutines(); strings.Contains(stacks, "net/http.(*persistConn)") {
					t.Errorf("a kept connection holds net/http's goroutines:\n%s", stacks)
				}
			})
		}
	}
}

// newClient builds a Client of the test server at url with the test token, closed when the
// test ends.
func newClient(t *testing.T, url string, keepAlive bool) *cluster.Client {
	t.Helper()
	c, res := cluster.NewClient(url, cluster.Credentials{BearerToken: token, Insecure: true}, 2*time.Second, keepAlive)
	if c == nil {
		t.Fatalf("no client: %+v", res)
	}
	t.Cleanup(c.Close)
	return c
}

// goroutines is the stacks of every goroutine.
func goroutines() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// A server closes a kept connection that stayed idle (its idle timeout, a load balancer's): the
// next probe sends its request again on a new connection, and the Cluster stays Connected.
func TestAProbeRedialsWhenTheServerClosedTheKeptConnection(t *testing.T) {
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
	}))
	srv.Config.IdleTimeout = 50 * time.Millisecond
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	c := newClient(t, srv.URL, true)
	for i := range 3 {
		if got := c.Probe(context.Background()); !got.Connected() {
			t.Fatalf("probe %d after the server closed the idle connection: %+v", i+1, got)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if o := opened.Load(); o != 3 {
		t.Errorf("3 probes, each after the server closed the last connection, opened %d connections; want 3", o)
	}
}

// A token with a line break cannot be sent in a header (it would add a header of its own
// making): the Client is not built, and the Result says to check the Secret, without the token.
func TestATokenWithALineBreakIsRefused(t *testing.T) {
	bad := "abc\r\nX-Injected: yes"
	c, res := cluster.NewClient(server, cluster.Credentials{BearerToken: bad}, time.Second, true)
	if c != nil || res.Reason != v1.ReasonUnreachable || !strings.Contains(res.Message, "credentials Secret") || strings.Contains(res.Message, "abc") {
		t.Fatalf("a token with a line break: client %v, %+v", c != nil, res)
	}
}

func TestKeyChangesWithTheServerAndEachCredential(t *testing.T) {
	base := cluster.Credentials{BearerToken: token, CAData: testCert}
	keys := map[string]string{}
	for name, k := range map[string]string{
		"base":        cluster.Key(server, base),
		"server":      cluster.Key(server+"/x", base),
		"token":       cluster.Key(server, cluster.Credentials{BearerToken: token + "x", CAData: testCert}),
		"ca":          cluster.Key(server, cluster.Credentials{BearerToken: token}),
		"insecure":    cluster.Key(server, cluster.Credentials{BearerToken: token, CAData: testCert, Insecure: true}),
		"server name": cluster.Key(server, cluster.Credentials{BearerToken: token, CAData: testCert, ServerName: "edge"}),
	} {
		if other, dup := keys[k]; dup {
			t.Errorf("%s and %s have the same key", name, other)
		}
		keys[k] = name
		if strings.Contains(k, token) {
			t.Errorf("the key of %s carries the token", name)
		}
	}
	if first, again := cluster.Key(server, base), cluster.Key(server, base); first != again {
		t.Error("the key is not stable")
	}
}

// BenchmarkClientProbe measures one probe of a loopback TLS server over a Client kept from
// probe to probe with its connection kept, as the Prober does by default: no handshake after the
// first. BenchmarkProbe is the cost of a probe that dials and handshakes.
func BenchmarkClientProbe(b *testing.B) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
	}))
	defer srv.Close()
	c, res := cluster.NewClient(srv.URL, cluster.Credentials{BearerToken: token, Insecure: true}, 2*time.Second, true)
	if c == nil {
		b.Fatal(res.Message)
	}
	defer c.Close()
	b.ReportAllocs()
	for b.Loop() {
		if r := c.Probe(context.Background()); !r.Connected() {
			b.Fatal(r.Message)
		}
	}
}
