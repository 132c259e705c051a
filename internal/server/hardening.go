package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
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
	// DefaultMaxStreamsPerIdentity caps the event streams of one identity across its sessions
	// and bearer tokens.
	DefaultMaxStreamsPerIdentity = 32
	// DefaultMaxStreams caps the event streams of everyone: each holds a goroutine and a
	// buffer of subscriberBuffer changes.
	DefaultMaxStreams = 2048
	// DefaultFailedLoginBurst is how many failed sign-ins a client may make at once before it
	// must wait; it then gets one more per DefaultFailedLoginInterval.
	DefaultFailedLoginBurst = 10
	// DefaultFailedLoginInterval is how often a throttled client gets one more try.
	DefaultFailedLoginInterval = time.Second
	// maxThrottledClients caps the clients whose failed sign-ins are counted.
	maxThrottledClients = 10000
	// addressBurstFactor is how many more failed sign-ins an address may make, whatever
	// tokens it tries, than one token from it: it bounds the TokenReviews of one address that
	// tries a new token each time, and leaves room for the other people behind a shared address.
	addressBurstFactor = 10
	// DefaultLoginBurst is how many logins one identity may make at once, successful or not,
	// before it must wait; it then gets one more per DefaultLoginInterval.
	DefaultLoginBurst = 20
	// DefaultLoginInterval is how often an identity that logged in too often gets one more.
	DefaultLoginInterval = 3 * time.Second
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

// clientOf is the address a request comes from, without its port: the connection's peer, or,
// when that peer is a trusted proxy (Options.TrustedProxies), the last address of
// X-Forwarded-For that is not one.
func (s *Server) clientOf(r *http.Request) string {
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		host = h
	}
	if len(s.trusted) == 0 || !s.isTrusted(host) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		if hop == "" {
			continue
		}
		if _, err := netip.ParseAddr(hop); err != nil {
			return host // a hop that is no address: the proxy's own address is all that is known
		}
		if !s.isTrusted(hop) {
			return hop
		}
	}
	return host
}

// isTrusted reports whether addr is within a trusted proxy's prefix.
func (s *Server) isTrusted(addr string) bool {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range s.trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies parses comma-separated addresses and CIDR prefixes (--trusted-proxies).
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range list {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if !strings.Contains(v, "/") {
			ip, err := netip.ParseAddr(v)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: an address or a CIDR prefix such as 10.0.0.0/8: %w", v, err)
			}
			out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: an address or a CIDR prefix such as 10.0.0.0/8: %w", v, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// throttleKey is the address a client's failures count against: an IPv4 address, or the /64
// of an IPv6 one (a host gets a whole /64, and would otherwise try from each of its addresses).
func throttleKey(client string) string {
	ip, err := netip.ParseAddr(client)
	if err != nil || ip.Unmap().Is4() {
		return client
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// tokenKey is a short prefix of token's SHA-256: the failures of one token are counted apart
// from those of other tokens of the same address, without keeping the token.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:6])
}

// throttle answers 429 with Retry-After, and reports false, when token has failed from r's
// address too often of late, or the address has failed with many tokens. A token the API server
// accepted of late is never throttled (the callers ask auth.knownGood first).
func (s *Server) throttle(w http.ResponseWriter, r *http.Request, token string) bool {
	addr := throttleKey(s.clientOf(r))
	ok, wait := s.limiter.allow(addr + "|" + tokenKey(token))
	if ok {
		ok, wait = s.addresses.allow(addr)
	}
	if ok {
		return true
	}
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	writeError(w, http.StatusTooManyRequests, "too many failed sign-ins from this address: wait and try again")
	return false
}

// failedSignIn counts and logs a failed sign-in with the client's address (never the token).
func (s *Server) failedSignIn(r *http.Request, how, token string) {
	client := s.clientOf(r)
	addr := throttleKey(client)
	throttled := s.limiter.fail(addr + "|" + tokenKey(token))
	throttled = s.addresses.fail(addr) || throttled
	s.log.Info("failed sign-in", "client", client, "how", how, "path", r.URL.Path, "throttled", throttled)
}

// hardened wraps the routes in the protections every request gets, outermost first: the
// security headers (on every answer, the 421 of a refused Host too), the Host check, and the
// refusal of cross-origin writes.
func (s *Server) hardened(next http.Handler) http.Handler {
	return withSecurityHeaders(s.checkHost(s.sameOrigin(next)))
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
			s.log.Info("refused a cross-origin request", "client", s.clientOf(r), "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"))
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
			s.log.Info("refused a request for another host", "client", s.clientOf(r), "host", r.Host)
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
