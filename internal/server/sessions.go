package server

import (
	"errors"
	"sync"
	"time"
)

// The caps of the sessions table (docs/ui.md, "Hardening").
const (
	// DefaultMaxSessions caps the sessions the server keeps in all.
	DefaultMaxSessions = 10000
	// DefaultMaxSessionsPerIdentity caps the sessions of one identity: a new login of an
	// identity that has this many ends its own oldest session, never anyone else's.
	DefaultMaxSessionsPerIdentity = 16
	// DefaultRevalidate is how often a session's token is checked again with a TokenReview: a
	// revoked or deleted identity loses its session within this time.
	DefaultRevalidate = 2 * time.Minute
)

// errSessionsFull refuses a login when the table holds its maximum of live sessions: the new
// login waits, and nobody who is signed in is logged out.
var errSessionsFull = errors.New("the server holds its maximum of sessions: try again in a few minutes, or sign in with a bearer token")

// session is one login: whom it acts for (with the token, held only in memory, which acts for
// them on the API server and is reviewed again now and then), until when, and when its token
// was last reviewed.
type session struct {
	id       Identity
	owner    string
	until    time.Time
	reviewed time.Time
}

// sessionTable keeps the sessions: at most max in all and perIdentity per identity. A full table
// refuses a new login (errSessionsFull); an identity at its own cap loses its own oldest session.
type sessionTable struct {
	max, perIdentity int
	now              func() time.Time

	mu      sync.Mutex
	byID    map[string]*session
	byOwner map[string][]string // identity key → session ids, oldest first
}

func newSessionTable(maxSessions, perIdentity int) *sessionTable {
	return &sessionTable{max: maxSessions, perIdentity: perIdentity, now: time.Now,
		byID: map[string]*session{}, byOwner: map[string][]string{}}
}

// add keeps a session sid for id until until.
func (t *sessionTable) add(sid string, id Identity, until time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	owner := id.key()
	if own := t.byOwner[owner]; len(own) >= t.perIdentity {
		t.removeLocked(own[0])
	}
	if len(t.byID) >= t.max {
		t.expireLocked(now)
	}
	if len(t.byID) >= t.max {
		return errSessionsFull
	}
	t.byID[sid] = &session{id: id, owner: owner, until: until, reviewed: now}
	t.byOwner[owner] = append(t.byOwner[owner], sid)
	return nil
}

// get returns a copy of the live session sid.
func (t *sessionTable) get(sid string) (session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.byID[sid]
	if !ok {
		return session{}, false
	}
	if !t.now().Before(s.until) {
		t.removeLocked(sid)
		return session{}, false
	}
	return *s, true
}

// reviewed records that sid's token was reviewed at at, and acts for id from now on (the groups
// of a person may have changed).
func (t *sessionTable) reviewedAt(sid string, id Identity, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.byID[sid]; ok && s.owner == id.key() {
		s.id, s.reviewed = id, at
	}
}

// remove ends sid.
func (t *sessionTable) remove(sid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(sid)
}

// len counts the sessions kept, expired or not.
func (t *sessionTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

func (t *sessionTable) removeLocked(sid string) {
	s, ok := t.byID[sid]
	if !ok {
		return
	}
	delete(t.byID, sid)
	own := t.byOwner[s.owner]
	for i, x := range own {
		if x == sid {
			own = append(own[:i:i], own[i+1:]...)
			break
		}
	}
	if len(own) == 0 {
		delete(t.byOwner, s.owner)
	} else {
		t.byOwner[s.owner] = own
	}
}

// expireLocked drops the sessions past their deadline.
func (t *sessionTable) expireLocked(now time.Time) {
	for sid, s := range t.byID {
		if !now.Before(s.until) {
			t.removeLocked(sid)
		}
	}
}
