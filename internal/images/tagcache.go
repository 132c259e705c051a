package images

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// DefaultTagTTL is how long a TagCache trusts what a tag pointed to: a pass over a thousand
// Orders that render the same chart resolves each tag about once, and a tag moved is seen at
// most this late (its Orders' resync looks again, minutes apart, anyway).
const DefaultTagTTL = 5 * time.Second

// TagCache remembers for a short while the digest each image tag pointed to, so that the
// Orders rendering at the same moment resolve each tag once rather than once per Order; the
// lookups of one tag that run at the same time wait for one request.
//
// An answer is kept for the credentials that got it, never shared beyond them: the key is the
// image's full reference and a hash of the credential the Resolver signs in to its registry
// with (or anonymous). One tenant's Secret may reach a private image that another tenant's
// cannot; a digest resolved with the first is never an answer for the second, who would
// otherwise learn that the image exists and what it points to, and have it pinned into its
// Preparation without ever being allowed to read it. Two namespaces holding the same
// credential reach the same images anyway, and anonymous answers are what anyone gets. The
// cache is consulted after Resolver.Allow, so the namespace's own repositories of the bundled
// registry (reached by every Order with the controller's one pusher credential) stay its own.
// Failures are not kept: the next lookup asks the registry again.
type TagCache struct {
	// TTL is how long an answer is kept (DefaultTagTTL when zero).
	TTL time.Duration
	// now is the clock (time.Now when nil), for tests.
	now func() time.Time

	mu      sync.Mutex
	entries map[string]*tagEntry
	swept   time.Time
}

// tagEntry is one tag's answer, or the lookup that is getting it (done not yet closed).
type tagEntry struct {
	digest string
	at     time.Time
	done   chan struct{}
	ok     bool
}

// NewTagCache returns a cache that keeps answers for ttl (DefaultTagTTL when zero).
func NewTagCache(ttl time.Duration) *TagCache {
	return &TagCache{TTL: ttl}
}

func (c *TagCache) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

func (c *TagCache) ttl() time.Duration {
	if c.TTL > 0 {
		return c.TTL
	}
	return DefaultTagTTL
}

// credentialIdentity names the credential creds sign in to host with: a hash of it, so that
// the cache's keys hold no secret; "anonymous" without one.
func credentialIdentity(creds oci.Credentials, host string) string {
	cred, ok := creds.Lookup(host)
	if !ok {
		return "anonymous"
	}
	sum := sha256.Sum256([]byte(cred.Username + "\x00" + cred.Password))
	return hex.EncodeToString(sum[:])
}

// resolve returns the digest tag (a full reference, registry and repository and tag) points
// to for identity: a fresh answer kept, the answer of a lookup running now, or resolve's.
func (c *TagCache) resolve(identity, tag string, resolve func() (string, error)) (string, error) {
	key := identity + "\x00" + tag
	for {
		c.mu.Lock()
		if c.entries == nil {
			c.entries = map[string]*tagEntry{}
		}
		e, found := c.entries[key]
		if !found {
			break
		}
		select {
		case <-e.done:
			if e.ok && c.clock().Sub(e.at) < c.ttl() {
				c.mu.Unlock()
				return e.digest, nil
			}
			delete(c.entries, key)
			c.mu.Unlock()
			continue
		default:
		}
		c.mu.Unlock()
		<-e.done
		if e.ok {
			return e.digest, nil
		}
		// That lookup failed: ask the registry this time (its failure is this caller's).
		return resolve()
	}
	e := &tagEntry{done: make(chan struct{})}
	c.entries[key] = e
	c.sweep()
	c.mu.Unlock()

	digest, err := resolve()
	c.mu.Lock()
	if err == nil {
		e.digest, e.at, e.ok = digest, c.clock(), true
	} else if c.entries[key] == e {
		delete(c.entries, key)
	}
	close(e.done)
	c.mu.Unlock()
	return digest, err
}

// sweep drops the answers gone stale, at most once a TTL; c.mu is held.
func (c *TagCache) sweep() {
	now := c.clock()
	if now.Sub(c.swept) < c.ttl() {
		return
	}
	c.swept = now
	for key, e := range c.entries {
		select {
		case <-e.done:
			if !e.ok || now.Sub(e.at) >= c.ttl() {
				delete(c.entries, key)
			}
		default:
		}
	}
}

// len is how many answers and lookups the cache holds, for tests.
func (c *TagCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
