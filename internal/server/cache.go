package server

import (
	"sync"
	"time"
)

// ttlCache keeps values until their own deadline, and at most max of them: when full, it drops
// the expired entries, then the one that expires first. Sessions, reviewed tokens, RBAC answers
// and deployment records are kept in one each.
type ttlCache[K comparable, V any] struct {
	max int
	now func() time.Time

	mu      sync.Mutex
	entries map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	value V
	until time.Time
}

func newTTLCache[K comparable, V any](maxEntries int) *ttlCache[K, V] {
	return &ttlCache[K, V]{max: maxEntries, now: time.Now, entries: map[K]ttlEntry[V]{}}
}

// get returns the value of k while its deadline has not passed.
func (c *ttlCache[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !c.now().Before(e.until) {
		delete(c.entries, k)
		var zero V
		return zero, false
	}
	return e.value, true
}

// put keeps v under k until the deadline.
func (c *ttlCache[K, V]) put(k K, v V, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.max {
		now := c.now()
		var first K
		found := false
		for key, e := range c.entries {
			if !now.Before(e.until) {
				delete(c.entries, key)
				continue
			}
			if !found || e.until.Before(c.entries[first].until) {
				first, found = key, true
			}
		}
		if len(c.entries) >= c.max && found {
			delete(c.entries, first)
		}
	}
	c.entries[k] = ttlEntry[V]{value: v, until: until}
}

// delete forgets k.
func (c *ttlCache[K, V]) delete(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, k)
}
