package server

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"
)

// SessionCookie is the cookie that carries a login session.
const SessionCookie = "kokumi_session"

// maxSessions caps the sessions kept in memory; the oldest goes first.
const maxSessions = 10000

// auth checks the admin token and keeps the sessions a login opens.
type auth struct {
	tokenSum [sha256.Size]byte
	ttl      time.Duration
	now      func() time.Time

	mu       sync.Mutex
	sessions map[string]time.Time // session id -> expiry
}

func newAuth(token string, ttl time.Duration) *auth {
	return &auth{tokenSum: sha256.Sum256([]byte(token)), ttl: ttl, now: time.Now, sessions: map[string]time.Time{}}
}

// tokenMatches compares in constant time, whatever the lengths.
func (a *auth) tokenMatches(token string) bool {
	sum := sha256.Sum256([]byte(token))
	return token != "" && subtle.ConstantTimeCompare(sum[:], a.tokenSum[:]) == 1
}

// open starts a session and returns its id.
func (a *auth) open() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for k, exp := range a.sessions {
		if now.After(exp) {
			delete(a.sessions, k)
		}
	}
	if len(a.sessions) >= maxSessions {
		var oldest string
		for k, exp := range a.sessions {
			if oldest == "" || exp.Before(a.sessions[oldest]) {
				oldest = k
			}
		}
		delete(a.sessions, oldest)
	}
	a.sessions[id] = now.Add(a.ttl)
	return id, nil
}

func (a *auth) close(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, id)
}

func (a *auth) valid(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.sessions[id]
	if ok && a.now().After(exp) {
		delete(a.sessions, id)
		return false
	}
	return ok
}

// authenticated reports whether r carries the admin token as a bearer token, or the cookie of
// a live session.
func (a *auth) authenticated(r *http.Request) bool {
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		return ok && a.tokenMatches(token)
	}
	c, err := r.Cookie(SessionCookie)
	return err == nil && a.valid(c.Value)
}

// require answers 401 to a request that is not authenticated. A write that authenticates by
// cookie must be JSON, which a cross-site form cannot send without the browser asking first.
func (a *auth) require(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.authenticated(r) {
			writeError(w, http.StatusUnauthorized, "log in first: POST /api/v1/login with the server's token, or send it as a bearer token")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get("Authorization") == "" &&
			!strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			writeError(w, http.StatusUnsupportedMediaType, "send the request body as application/json")
			return
		}
		next(w, r)
	}
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if !s.auth.tokenMatches(body.Token) {
		writeError(w, http.StatusUnauthorized, "token: not the server's token (see --token-file)")
		return
	}
	id, err := s.auth.open()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "open a session: "+err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(s.auth.ttl.Seconds()),
	})
	writeJSON(w, http.StatusOK, map[string]bool{"authenticated": true})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.auth.close(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, MaxAge: -1, SameSite: http.SameSiteStrictMode})
	writeJSON(w, http.StatusOK, map[string]bool{"authenticated": false})
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"authenticated": s.auth.authenticated(r)})
}
