package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/server"
)

// These tests play an attacker who holds no token, or one session, against the server's
// connections, sign-ins and headers.

// The timeouts of the server at hardBase: short, so that a held connection ends soon; the
// bounds the tests allow are several times longer, for a loaded machine.
const (
	shortReadHeader = time.Second
	shortRead       = 2 * time.Second
	shortWrite      = 4 * time.Second
	shortIdle       = 2 * time.Second
	closedWithin    = 15 * time.Second
)

func withShortTimeouts(o server.Options) server.Options {
	o.ReadHeaderTimeout, o.ReadTimeout, o.WriteTimeout, o.IdleTimeout = shortReadHeader, shortRead, shortWrite, shortIdle
	return o
}

// logBuffer keeps what a server logs.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBuffer) write(prefix, args string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, prefix+" "+args)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

// ownServer runs a server of its own with o (and the admin token), so that what the test does
// to it (exhaust its sign-ins) touches no other test.
func ownServer(t *testing.T, o server.Options) string {
	t.Helper()
	c, err := client.New(serverConfig, client.Options{Scheme: env.Scheme})
	must(t, err)
	o.AdminToken = token
	srv, err := server.New(serverConfig, c, c, nil, o)
	must(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestFailedSignInsAreThrottledAndLogged(t *testing.T) {
	var logs logBuffer
	url := ownServer(t, server.Options{Log: funcr.New(logs.write, funcr.Options{})})
	loginWith := func(tok string) *http.Response {
		return do(t, call{server: url, method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": tok}}, nil)
	}
	// Successful sign-ins are not counted.
	for i := range 2 * server.DefaultFailedLoginBurst {
		if res := loginWith(token); res.StatusCode != http.StatusOK {
			t.Fatalf("sign-in %d with the right token: status %d", i, res.StatusCode)
		}
	}
	// Guessing: a burst is answered, then 429 with Retry-After.
	const guess = "guessed-token-Zq8"
	start := time.Now()
	answered, throttled, retryAfter := 0, 0, ""
	for range 100 {
		res := loginWith(guess)
		switch res.StatusCode {
		case http.StatusUnauthorized:
			answered++
		case http.StatusTooManyRequests:
			throttled++
			retryAfter = res.Header.Get("Retry-After")
		default:
			t.Fatalf("a guessed token: status %d", res.StatusCode)
		}
	}
	// One more try comes back each second.
	if allowed := server.DefaultFailedLoginBurst + int(time.Since(start)/server.DefaultFailedLoginInterval) + 1; answered > allowed {
		t.Errorf("%d of 100 guesses were checked in %s, want at most %d", answered, time.Since(start), allowed)
	}
	if throttled == 0 || retryAfter == "" {
		t.Errorf("no guess was answered 429 with Retry-After (%d throttled, Retry-After %q)", throttled, retryAfter)
	}
	// A bearer token is a sign-in too.
	if res := do(t, call{server: url, path: "/api/v1/me", bearer: guess}, nil); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a guessed bearer token from a throttled client: status %d, want 429", res.StatusCode)
	}
	out := logs.String()
	if n := strings.Count(out, "failed sign-in"); n < answered {
		t.Errorf("%d failed sign-ins logged, want %d:\n%s", n, answered, out)
	}
	if !strings.Contains(out, `"client"="127.0.0.1"`) {
		t.Errorf("the failures do not name the client's address:\n%s", out)
	}
	if strings.Contains(out, guess) || strings.Contains(out, token) {
		t.Errorf("the log holds a token:\n%s", out)
	}
}

// closedBy sends what feed writes to a new connection to the server at hardBase, and fails
// when the server has not closed it within closedWithin.
func closedBy(t *testing.T, feed func(net.Conn) error) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(hardBase, "http://"))
	must(t, err)
	defer conn.Close()
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn) // until the server closes it
		close(closed)
	}()
	go func() { _ = feed(conn) }()
	select {
	case <-closed:
	case <-time.After(closedWithin):
		t.Fatalf("the connection is still open after %s", closedWithin)
	}
}

// trickle writes s one byte every 200 ms.
func trickle(conn net.Conn, s string) error {
	for i := range len(s) {
		if _, err := conn.Write([]byte{s[i]}); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

func TestSlowLorisConnectionsAreClosed(t *testing.T) {
	host := strings.TrimPrefix(hardBase, "http://")
	t.Run("headers", func(t *testing.T) {
		closedBy(t, func(c net.Conn) error {
			return trickle(c, "GET /healthz HTTP/1.1\r\nHost: "+host+"\r\nX-Slow: "+strings.Repeat("a", 1000))
		})
	})
	t.Run("body", func(t *testing.T) {
		closedBy(t, func(c net.Conn) error {
			head := "POST /api/v1/login HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
			if _, err := io.WriteString(c, head); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			return trickle(c, `{"token":"`+strings.Repeat("a", 980))
		})
	})
	t.Run("idle", func(t *testing.T) {
		closedBy(t, func(c net.Conn) error {
			_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			return err // then it keeps the connection, and says nothing
		})
	})
}

// openStream opens the event stream as c; cancel closes it.
func openStream(t *testing.T, c call) (res *http.Response, cancel context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.server+"/api/v1/events", nil)
	must(t, err)
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	res, err = http.DefaultClient.Do(req)
	must(t, err)
	t.Cleanup(func() { cancel(); _ = res.Body.Close() })
	return res, cancel
}

func TestLogoutEndsTheSessionsEventStreams(t *testing.T) {
	const ns = "team-logout-stream"
	serving(t, ns)
	session := call{server: hardBase, cookie: login(t, hardBase, token)}
	events := stream(t, session)
	// The stream outlives the server's read and write timeouts.
	time.Sleep(shortWrite + shortRead)
	touch(t, ns, "podinfo-edge")
	nextEvent(t, events, `"namespace":"`+ns+`"`)

	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, events)
		ended <- err
	}()
	if res := do(t, session.at(http.MethodPost, "/api/v1/logout", map[string]string{}), nil); res.StatusCode != http.StatusOK {
		t.Fatalf("logout: status %d", res.StatusCode)
	}
	select {
	case err := <-ended:
		if err != nil && !errors.Is(err, io.EOF) {
			t.Logf("the stream ended with %v", err)
		}
	case <-time.After(closedWithin):
		t.Fatal("the event stream is still open after its session logged out")
	}
	if res, _ := openStream(t, session); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a stream of the ended session: status %d, want 401", res.StatusCode)
	}
}

func TestASessionOpensAtMostEightStreams(t *testing.T) {
	session := call{server: hardBase, cookie: login(t, hardBase, token)}
	var first context.CancelFunc
	for i := range server.DefaultMaxStreamsPerSession {
		res, cancel := openStream(t, session)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: status %d", i+1, res.StatusCode)
		}
		if first == nil {
			first = cancel
		}
	}
	if res, _ := openStream(t, session); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("stream %d: status %d, want 429", server.DefaultMaxStreamsPerSession+1, res.StatusCode)
	}
	// Another session is not refused, and a closed stream makes room.
	if res, _ := openStream(t, call{server: hardBase, cookie: login(t, hardBase, token)}); res.StatusCode != http.StatusOK {
		t.Errorf("another session's stream: status %d", res.StatusCode)
	}
	first()
	deadline := time.Now().Add(closedWithin)
	for {
		res, cancel := openStream(t, session)
		if res.StatusCode == http.StatusOK {
			break
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("a stream after one closed: status %d", res.StatusCode)
		}
		time.Sleep(pollStep)
	}
}

func TestACrossSiteRequestIsRefused(t *testing.T) {
	session := call{cookie: login(t, base, token)}
	crossSite := http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}
	for _, c := range []call{
		{method: http.MethodPost, path: "/api/v1/logout", body: "x", contentType: "application/x-www-form-urlencoded"},
		{method: http.MethodPost, path: "/api/v1/logout", body: map[string]string{}},
		{method: http.MethodPost, path: "/api/v1/namespaces/default/orders", body: server.OrderRequest{Name: "x", Product: "p", Environment: "e"}},
		{method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": token}},
	} {
		c.cookie, c.header = session.cookie, crossSite
		if res := do(t, c, nil); res.StatusCode != http.StatusForbidden {
			t.Errorf("cross-site %s %s (%s): status %d, want 403", c.method, c.path, c.contentType, res.StatusCode)
		}
		// An Origin alone, as an older browser sends it, is enough.
		c.header = http.Header{"Origin": {"https://evil.example"}}
		if res := do(t, c, nil); res.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s from Origin evil.example: status %d, want 403", c.method, c.path, res.StatusCode)
		}
	}
	var me server.Me
	if res := do(t, session.at(http.MethodGet, "/api/v1/me", nil), &me); res.StatusCode != http.StatusOK || !me.Authenticated {
		t.Fatalf("the session after cross-site logouts: %d %+v, want it still signed in", res.StatusCode, me)
	}
	// The page's own logout works.
	own := session.at(http.MethodPost, "/api/v1/logout", map[string]string{})
	own.header = http.Header{"Origin": {base}, "Sec-Fetch-Site": {"same-origin"}}
	if res := do(t, own, nil); res.StatusCode != http.StatusOK {
		t.Fatalf("same-origin logout: status %d", res.StatusCode)
	}
}

func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	for _, c := range []call{
		{path: "/api/v1/me"},
		{path: "/api/v1/servings"},
		{path: "/api/v1/clusters", bearer: token},
		{path: "/api/v1/no-such-route"},
		{method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": "wrong"}},
		{path: "/"},
		{path: "/healthz"},
	} {
		res := do(t, c, nil)
		h := res.Header
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("%s %s (%d): headers %v", c.method, c.path, res.StatusCode, h)
		}
	}
}

// requestHost sends GET path to url with the given Host header.
func requestHost(t *testing.T, url, host, path string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+path, nil)
	must(t, err)
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

func TestAnotherHostIsRefused(t *testing.T) {
	_, port, err := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	must(t, err)
	// A page of evil.example rebinds its name to the server's address.
	for _, host := range []string{"evil.example", "evil.example:" + port, "localhost.evil.example"} {
		for _, path := range []string{"/", "/api/v1/me"} {
			if code := requestHost(t, base, host, path); code != http.StatusMisdirectedRequest {
				t.Errorf("GET %s with Host %s: status %d, want 421", path, host, code)
			}
		}
	}
	// What the server serves: its own address, localhost (kubectl port-forward), the Service.
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "kokumi-server.kokumi-system.svc"} {
		if code := requestHost(t, base, host, "/api/v1/me"); code != http.StatusOK {
			t.Errorf("GET /api/v1/me with Host %s: status %d, want 200", host, code)
		}
	}
	// An ingress's name is allowed with --allowed-hosts.
	url := ownServer(t, server.Options{AllowedHosts: []string{"kokumi.example.com", "*.ui.example.com"}})
	for host, want := range map[string]int{"kokumi.example.com": http.StatusOK, "a.ui.example.com": http.StatusOK, "evil.example": http.StatusMisdirectedRequest} {
		if code := requestHost(t, url, host, "/api/v1/me"); code != want {
			t.Errorf("GET /api/v1/me with Host %s on a server allowing kokumi.example.com: status %d, want %d", host, code, want)
		}
	}
}
