package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The server asks the API server who a token belongs to.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// SessionCookie is the cookie that carries a login session's id; the token stays on the server's
// side (it is not even kept: the session remembers whom the token authenticated).
const SessionCookie = "kokumi_session"

// AdminUser is the name the opt-in admin token signs in as, in the answers of /api/v1/me.
const AdminUser = "kokumi:admin-token"

const (
	// maxSessions caps the sessions kept in memory; the one that expires first goes first.
	maxSessions = 10000
	// tokenTTL is how long the answer of a TokenReview is reused for a bearer token.
	tokenTTL = 30 * time.Second
	// maxTokens caps the reviewed bearer tokens kept, by their SHA-256.
	maxTokens = 4096
)

// Identity is whom a request acts for.
type Identity struct {
	// User is the Kubernetes user the token authenticated as (name, UID, groups, extra), as
	// the TokenReview returned it; the server impersonates it and asks RBAC about it.
	User authenticationv1.UserInfo
	// Admin is true for the opt-in admin token: the server acts with its own ServiceAccount
	// and asks RBAC nothing.
	Admin bool
}

// auth checks tokens (the admin token, or any token the API server accepts) and keeps the
// sessions a login opens.
type auth struct {
	adminSum [sha256.Size]byte
	admin    bool
	// reviewer creates TokenReviews.
	reviewer client.Client
	ttl      time.Duration
	now      func() time.Time

	sessions *ttlCache[string, Identity]
	tokens   *ttlCache[[sha256.Size]byte, Identity]
}

// newAuth checks tokens with reviewer's TokenReviews; adminToken, when not empty, also signs in
// as the admin.
func newAuth(adminToken string, reviewer client.Client, ttl time.Duration) *auth {
	a := &auth{
		adminSum: sha256.Sum256([]byte(adminToken)), admin: adminToken != "", reviewer: reviewer, ttl: ttl, now: time.Now,
		sessions: newTTLCache[string, Identity](maxSessions), tokens: newTTLCache[[sha256.Size]byte, Identity](maxTokens),
	}
	a.sessions.now = func() time.Time { return a.now() }
	a.tokens.now = a.sessions.now
	return a
}

// isAdminToken compares in constant time, whatever the lengths; without an admin token
// configured, nothing matches.
func (a *auth) isAdminToken(token string) bool {
	sum := sha256.Sum256([]byte(token))
	return a.admin && token != "" && subtle.ConstantTimeCompare(sum[:], a.adminSum[:]) == 1
}

// authenticate says whom token belongs to: the admin, when it is the admin token, or else the
// user a TokenReview names. ok is false when the API server does not accept it; until is when a
// token that says so expires (zero when it does not say).
func (a *auth) authenticate(ctx context.Context, token string) (id Identity, until time.Time, ok bool, err error) {
	if token == "" {
		return Identity{}, time.Time{}, false, nil
	}
	if a.isAdminToken(token) {
		return Identity{Admin: true, User: authenticationv1.UserInfo{Username: AdminUser}}, time.Time{}, true, nil
	}
	until, _ = tokenExpiry(token)
	sum := sha256.Sum256([]byte(token))
	if id, ok := a.tokens.get(sum); ok {
		return id, until, true, nil
	}
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := a.reviewer.Create(ctx, review); err != nil {
		return Identity{}, time.Time{}, false, fmt.Errorf("check the token with a TokenReview: %w", err)
	}
	if !review.Status.Authenticated || review.Status.User.Username == "" {
		return Identity{}, time.Time{}, false, nil
	}
	id = Identity{User: review.Status.User}
	keep := a.now().Add(tokenTTL)
	if !until.IsZero() && until.Before(keep) {
		keep = until
	}
	a.tokens.put(sum, id, keep)
	return id, until, true, nil
}

// tokenExpiry reads the exp claim of a JWT (a ServiceAccount token, an OIDC id-token) that a
// TokenReview accepted or will check; ok is false for a token that is no JWT or has no exp.
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == "" {
		return time.Time{}, false
	}
	exp, err := claims.Exp.Float64()
	if err != nil || exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(int64(exp), 0), true
}

// open starts a session for id and returns its id. It lasts the session TTL, and no longer than
// until when that is set (the token's own expiry).
func (a *auth) open(id Identity, until time.Time) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a session id: %w", err)
	}
	sid := hex.EncodeToString(b)
	exp := a.now().Add(a.ttl)
	if !until.IsZero() && until.Before(exp) {
		exp = until
	}
	a.sessions.put(sid, id, exp)
	return sid, nil
}

func (a *auth) close(sid string) { a.sessions.delete(sid) }

// session returns the identity of a live session.
func (a *auth) session(sid string) (Identity, bool) { return a.sessions.get(sid) }

// identify finds whom r acts for: its bearer token, or else its session cookie. A request with
// an Authorization header is judged by that header alone.
func (a *auth) identify(r *http.Request) (Identity, bool, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return Identity{}, false, nil
		}
		id, _, ok, err := a.authenticate(r.Context(), strings.TrimSpace(token))
		return id, ok, err
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return Identity{}, false, nil
	}
	id, ok := a.session(c.Value)
	return id, ok, nil
}

type identityKey struct{}

// identityOf returns whom the request acts for, as require found it.
func identityOf(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}

// require answers 401 to a request that is not authenticated, and passes on the identity of one
// that is. A write that authenticates by cookie must be JSON, which a cross-site form cannot send
// without the browser asking first.
func (s *Server) require(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok, answered := s.identify(w, r)
		if answered {
			return
		}
		if !ok {
			writeError(w, http.StatusUnauthorized, "log in first: POST /api/v1/login with your Kubernetes token (kubectl create token <serviceaccount>, or your OIDC id-token), or send it as a bearer token")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get("Authorization") == "" && !requireJSON(w, r) {
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	}
}

// identify finds whom r acts for, as auth.identify does; a bearer token is a sign-in, throttled
// and, when it fails, logged as a login is. answered is true when it answered the request (429, or
// 503 when the token cannot be checked).
func (s *Server) identify(w http.ResponseWriter, r *http.Request) (id Identity, ok, answered bool) {
	bearer := r.Header.Get("Authorization") != ""
	if bearer && !s.throttle(w, r) {
		return Identity{}, false, true
	}
	id, ok, err := s.auth.identify(r)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return Identity{}, false, true
	}
	if bearer && !ok {
		s.failedSignIn(r, "bearer token")
	}
	return id, ok, false
}

// requireJSON answers 415 unless r's body is JSON, and reports whether it is: a cross-site form
// cannot send JSON without the browser asking first (and the server allows no cross-site
// request), so a write by cookie, a login or a logout is the page's own.
func requireJSON(w http.ResponseWriter, r *http.Request) bool {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		return true
	}
	writeError(w, http.StatusUnsupportedMediaType, "send the request body as application/json")
	return false
}

// secureCookies reports whether the session cookie of a server with these options is marked
// Secure: always when it serves TLS itself; else as SecureCookies says; else unless Addr is a
// loopback address (a server behind a TLS-terminating proxy sees plain HTTP, but its browser
// does not).
func (o Options) secureCookies() bool {
	if o.TLSCertFile != "" && o.TLSKeyFile != "" {
		return true
	}
	if o.SecureCookies != nil {
		return *o.SecureCookies
	}
	return !IsLoopback(o.Addr)
}

// IsLoopback reports whether addr (host:port, or a host) names a loopback address; an empty host
// (every interface) is not one.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) setSessionCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: value, Path: "/", HttpOnly: true, Secure: s.secureCookies || r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: maxAge,
	})
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	if !requireJSON(w, r) || !readJSON(w, r, &body) || !s.throttle(w, r) {
		return
	}
	id, until, ok, err := s.auth.authenticate(r.Context(), strings.TrimSpace(body.Token))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !ok {
		s.failedSignIn(r, "login")
		msg := "token: the cluster does not accept it: use `kubectl create token <serviceaccount>` or your OIDC id-token"
		if s.auth.admin {
			msg += ", or the server's admin token (--admin-token-file)"
		}
		writeError(w, http.StatusUnauthorized, msg)
		return
	}
	sid, err := s.auth.open(id, until)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "open a session: "+err.Error())
		return
	}
	maxAge := s.auth.ttl
	if !until.IsZero() {
		maxAge = min(maxAge, time.Until(until))
	}
	s.setSessionCookie(w, r, sid, max(1, int(maxAge.Seconds())))
	writeJSON(w, http.StatusOK, meOf(id, true))
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if !requireJSON(w, r) {
		return
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.auth.close(c.Value)
		// The session's event streams end with it.
		s.broker.end(sessionStream(c.Value))
	}
	s.setSessionCookie(w, r, "", -1)
	writeJSON(w, http.StatusOK, Me{})
}

// Me is the answer of GET /api/v1/me: whether the request is signed in, and as whom.
type Me struct {
	Authenticated bool     `json:"authenticated"`
	User          string   `json:"user,omitempty"`
	Groups        []string `json:"groups,omitempty"`
	// Admin is true for the opt-in admin token.
	Admin bool `json:"admin,omitempty"`
}

func meOf(id Identity, ok bool) Me {
	if !ok {
		return Me{}
	}
	return Me{Authenticated: true, User: id.User.Username, Groups: slices.Clone(id.User.Groups), Admin: id.Admin}
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	id, ok, answered := s.identify(w, r)
	if answered {
		return
	}
	writeJSON(w, http.StatusOK, meOf(id, ok))
}
