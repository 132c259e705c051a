package order

import (
	"context"
	"sync"
)

// slots bound the renders that run at once: size in all, and perNamespace of one namespace, so
// that one namespace's hundred Orders, or a hostile Order's renders that run to their timeout,
// leave a slot to every other namespace. An Order of a namespace that runs its share already
// does not wait for a slot, holding an Order worker: it is tried again a moment later (busy),
// and the worker takes another Order.
type slots struct {
	mu           sync.Mutex
	size         int
	perNamespace int
	running      map[string]int
	total        int
	// freed is closed, and made anew, each time a slot is given back.
	freed chan struct{}
}

// newSlots makes size slots (at least one), of which one namespace holds at most half
// (at least one).
func newSlots(size int) *slots {
	size = max(size, 1)
	return &slots{size: size, perNamespace: max(size/2, 1), running: map[string]int{}, freed: make(chan struct{})}
}

// take takes a slot for a render of namespace, waiting while other namespaces hold every slot;
// ok is false, at once, when namespace holds its share already. release gives the slot back.
func (s *slots) take(ctx context.Context, namespace string) (release func(), ok bool, err error) {
	for {
		s.mu.Lock()
		if s.running[namespace] >= s.perNamespace {
			s.mu.Unlock()
			return nil, false, nil
		}
		if s.total < s.size {
			s.running[namespace]++
			s.total++
			s.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { s.give(namespace) }) }, true, nil
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-freed:
		}
	}
}

// full reports whether namespace runs its share of the renders: a take of it now would not get
// a slot.
func (s *slots) full(namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[namespace] >= s.perNamespace
}

// give returns a slot of namespace.
func (s *slots) give(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.running[namespace]--; s.running[namespace] <= 0 {
		delete(s.running, namespace)
	}
	close(s.freed)
	s.freed = make(chan struct{})
}
