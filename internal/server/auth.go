package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The server asks the API server who a token belongs to.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// SessionCookie is the cookie that carries a login session's id; the token stays on the server's
// side, in memory only: it acts for its person on the API server and is reviewed again now and
// then (DefaultRevalidate).
const SessionCookie = "kokumi_session"

// AdminUser is the name the opt-in admin token signs in as, in the answers of /api/v1/me.
const AdminUser = "kokumi:admin-token"

const (
	// tokenTTL is how long the answer of a TokenReview is reused for a bearer token.
	tokenTTL = 30 * time.Second
	// maxTokens caps the reviewed bearer tokens kept, by their SHA-256.
	maxTokens = 4096
)

// Identity is whom a request acts for.
type Identity struct {
	// User is the Kubernetes user the token authenticated as (name, UID, groups, extra), as
	// the TokenReview returned it; the server asks RBAC about it.
	User authenticationv1.UserInfo
	// Admin is true for the opt-in admin token: the server acts with its own ServiceAccount
	// and asks RBAC nothing.
	Admin bool
	// token is the person's own token: the server writes with it (clientFor), so the API server
	// authenticates and authorizes every write itself, and the server holds no impersonation
	// grant. It is never logged nor sent anywhere else.
	token string
}

// auth checks tokens (the admin token, or any token the API server accepts) and keeps the
// sessions a login opens.
type auth struct {
	adminSum [sha256.Size]byte
	admin    bool
	// reviewer creates TokenReviews.
	reviewer client.Client
	ttl      time.Duration
	// revalidate is how often a session's token is reviewed again.
	revalidate time.Duration
	now        func() time.Time

	sessions *sessionTable
	tokens   *ttlCache[[sha256.Size]byte, Identity]
}

// newAuth checks tokens with reviewer's TokenReviews; adminToken, when not empty, also signs in
// as the admin. It keeps at most maxSessions sessions, perIdentity of one identity, and reviews
// a session's token again every revalidate.
func newAuth(adminToken string, reviewer client.Client, ttl time.Duration, maxSessions, perIdentity int, revalidate time.Duration) *auth {
	a := &auth{
		adminSum: sha256.Sum256([]byte(adminToken)), admin: adminToken != "", reviewer: reviewer, ttl: ttl, revalidate: revalidate, now: time.Now,
		sessions: newSessionTable(maxSessions, perIdentity), tokens: newTTLCache[[sha256.Size]byte, Identity](maxTokens),
	}
	a.sessions.now = func() time.Time { return a.now() }
	a.tokens.now = a.sessions.now
	return a
}

// knownGood reports whether token was reviewed and accepted in the last tokenTTL: such a
// request is never throttled.
func (a *auth) knownGood(token string) bool {
	if a.isAdminToken(token) {
		return true
	}
	_, ok := a.tokens.get(sha256.Sum256([]byte(token)))
	return ok
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
	id = Identity{User: review.Status.User, token: token}
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
	if err := a.sessions.add(sid, id, exp); err != nil {
		return "", err
	}
	return sid, nil
}

func (a *auth) close(sid string) { a.sessions.remove(sid) }

// session returns the identity of a live session. A session whose token was last reviewed
// revalidate ago or more is reviewed again first: a token the API server no longer accepts (a
// deleted ServiceAccount, a revoked or expired token) ends the session.
func (a *auth) session(ctx context.Context, sid string) (Identity, bool, error) {
	s, ok := a.sessions.get(sid)
	if !ok {
		return Identity{}, false, nil
	}
	if s.id.Admin || a.now().Sub(s.reviewed) < a.revalidate {
		return s.id, true, nil
	}
	id, _, ok, err := a.authenticate(ctx, s.id.token)
	if err != nil {
		return Identity{}, false, err
	}
	if !ok {
		a.sessions.remove(sid)
		return Identity{}, false, nil
	}
	a.sessions.reviewedAt(sid, id, a.now())
	return id, true, nil
}

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
	return a.session(r.Context(), c.Value)
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
	token := bearerToken(r)
	if bearer && !s.auth.knownGood(token) && !s.throttle(w, r, token) {
		return Identity{}, false, true
	}
	id, ok, err := s.auth.identify(r)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return Identity{}, false, true
	}
	if bearer && !ok {
		s.failedSignIn(r, "bearer token", token)
	}
	return id, ok, false
}

// bearerToken is the token of r's Authorization header, if any.
func bearerToken(r *http.Request) string {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(token)
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
	if !requireJSON(w, r) || !readJSON(w, r, &body) {
		return
	}
	token := strings.TrimSpace(body.Token)
	if !s.auth.knownGood(token) && !s.throttle(w, r, token) {
		return
	}
	id, until, ok, err := s.auth.authenticate(r.Context(), token)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !ok {
		s.failedSignIn(r, "login", token)
		msg := "token: the cluster does not accept it: use `kubectl create token <serviceaccount>` or your OIDC id-token"
		if s.auth.admin {
			msg += ", or the server's admin token (--admin-token-file)"
		}
		writeError(w, http.StatusUnauthorized, msg)
		return
	}
	// Logins of one identity are throttled too, successful or not: a loop of logins gains
	// nothing but its own sessions, which its cap ends oldest first.
	if ok, wait := s.logins.allow(id.key()); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
		writeError(w, http.StatusTooManyRequests, "too many sign-ins as "+id.User.Username+" of late: use the session you have, or wait and try again")
		return
	}
	s.logins.fail(id.key())
	sid, err := s.auth.open(id, until)
	if errors.Is(err, errSessionsFull) {
		s.log.Info("refused a sign-in: the sessions table is full", "client", s.clientOf(r), "user", id.User.Username)
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusServiceUnavailable, "sign-in refused: "+err.Error())
		return
	}
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
