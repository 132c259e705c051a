package server

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// The defaults of the protections the server puts in front of every route (docs/ui.md,
// "Hardening").
const (
	// DefaultReadHeaderTimeout is how long a client may take to send a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout is how long a client may take to send a whole request, body included.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout is how long the server may take to answer a request; an event stream
	// gets that long again for each event it sends.
	DefaultWriteTimeout = 60 * time.Second
	// DefaultIdleTimeout is how long a kept-alive connection may wait for its next request.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultMaxStreamsPerSession caps the event streams one session (or one bearer token) keeps
	// open.
	DefaultMaxStreamsPerSession = 8
	// DefaultFailedLoginBurst is how many failed sign-ins a client may make at once before it
	// must wait; it then gets one more per DefaultFailedLoginInterval.
	DefaultFailedLoginBurst = 10
	// DefaultFailedLoginInterval is how often a throttled client gets one more try.
	DefaultFailedLoginInterval = time.Second
	// maxThrottledClients caps the clients whose failed sign-ins are counted.
	maxThrottledClients = 10000
)

// limiter is a token bucket per client address for failed sign-ins: each failure takes a
// token, and a client with none left is refused until one has come back; a success takes none.
// It tracks at most max clients: when full, it forgets the buckets that have filled up again,
// then the fullest.
type limiter struct {
	burst float64
	every time.Duration
	max   int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(burst int, every time.Duration, maxClients int) *limiter {
	return &limiter{burst: float64(burst), every: every, max: maxClients, now: time.Now, buckets: map[string]*bucket{}}
}

// refill brings b up to date at now.
func (l *limiter) refill(b *bucket, now time.Time) {
	b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.last))/float64(l.every))
	b.last = now
}

// allow reports whether client may try to sign in; when not, how long until it may.
func (l *limiter) allow(client string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[client]
	if !ok {
		return true, 0
	}
	l.refill(b, l.now())
	if b.tokens >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.every))
}

// fail counts a failed sign-in of client, and reports whether it used up its last try.
func (l *limiter) fail(client string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[client]
	if !ok {
		l.makeRoom(now)
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[client] = b
	}
	l.refill(b, now)
	b.tokens = math.Max(0, b.tokens-1)
	return b.tokens < 1
}

// makeRoom forgets buckets when the limiter is full; l.mu is held.
func (l *limiter) makeRoom(now time.Time) {
	if len(l.buckets) < l.max {
		return
	}
	var fullest string
	most := -1.0
	for k, b := range l.buckets {
		l.refill(b, now)
		if b.tokens >= l.burst {
			delete(l.buckets, k)
			continue
		}
		if b.tokens > most {
			fullest, most = k, b.tokens
		}
	}
	if len(l.buckets) >= l.max && most >= 0 {
		delete(l.buckets, fullest)
	}
}

// clientOf is the address a request comes from, without its port.
func clientOf(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// throttle answers 429 with Retry-After, and reports false, when r's client has failed to sign
// in too often of late.
func (s *Server) throttle(w http.ResponseWriter, r *http.Request) bool {
	ok, wait := s.limiter.allow(clientOf(r))
	if ok {
		return true
	}
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	writeError(w, http.StatusTooManyRequests, "too many failed sign-ins from this address: wait and try again")
	return false
}

// failedSignIn counts and logs a failed sign-in with the client's address (never the token).
func (s *Server) failedSignIn(r *http.Request, how string) {
	client := clientOf(r)
	throttled := s.limiter.fail(client)
	s.log.Info("failed sign-in", "client", client, "how", how, "path", r.URL.Path, "throttled", throttled)
}

// hardened wraps the routes in the protections every request gets, outermost first: the Host
// check, the security headers, and the refusal of cross-origin writes.
func (s *Server) hardened(next http.Handler) http.Handler {
	return s.checkHost(withSecurityHeaders(s.sameOrigin(next)))
}

// withSecurityHeaders sets the headers every answer carries, the API's as the UI's files.
func withSecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses with 403 a write (any method but GET, HEAD and OPTIONS) that a browser
// sends from another origin, as its Sec-Fetch-Site or Origin header tells: a login, a logout,
// an Order or a promotion is the page's own. Scripts, which send neither header, pass.
func (s *Server) sameOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := cop.Check(r); err != nil {
			s.log.Info("refused a cross-origin request", "client", clientOf(r), "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"))
			writeError(w, http.StatusForbidden, "cross-origin request refused: "+err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostMatcher decides which Host headers the server answers: a page of another site that
// rebinds its own name to the server's address (DNS rebinding) sends that name, and is refused.
type hostMatcher struct {
	any      bool
	exact    map[string]bool
	suffixes []string
}

// newHostMatcher accepts the names of allowed ("*" for any, "*.example.com" for its
// subdomains), the host of the listen address, localhost, every IP address, and the in-cluster
// names of the shipped Service kokumi-server in namespace.
func newHostMatcher(allowed []string, addr, namespace string) *hostMatcher {
	m := &hostMatcher{exact: map[string]bool{"localhost": true}}
	add := func(h string) {
		h = normalizeHost(h)
		switch {
		case h == "":
		case h == "*":
			m.any = true
		case strings.HasPrefix(h, "*."):
			m.suffixes = append(m.suffixes, h[1:])
		default:
			m.exact[h] = true
		}
	}
	for _, h := range allowed {
		add(h)
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		add(host)
	}
	for _, n := range []string{"kokumi-server", "kokumi-server." + namespace, "kokumi-server." + namespace + ".svc", "kokumi-server." + namespace + ".svc.cluster.local"} {
		add(n)
	}
	return m
}

// normalizeHost lowercases a host and drops its port, brackets and trailing dot.
func normalizeHost(h string) string {
	h = strings.TrimSpace(strings.ToLower(h))
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(h, ".")
}

func (m *hostMatcher) allows(hostHeader string) bool {
	if m.any {
		return true
	}
	h := normalizeHost(hostHeader)
	if h == "" {
		return false
	}
	if m.exact[h] || strings.HasSuffix(h, ".localhost") || net.ParseIP(h) != nil {
		return true
	}
	for _, s := range m.suffixes {
		if strings.HasSuffix(h, s) {
			return true
		}
	}
	return false
}

// checkHost answers 421 to a request for a Host the server does not serve.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts.allows(r.Host) {
			s.log.Info("refused a request for another host", "client", clientOf(r), "host", r.Host)
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("this server does not serve the host %q: add it to --allowed-hosts", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loggerOf is l, or controller-runtime's logger named "server" when l is the zero Logger.
func loggerOf(l logr.Logger) logr.Logger {
	if l.GetSink() == nil {
		return logf.Log.WithName("server")
	}
	return l
}
