package order

import (
	"context"
	"sync"
	"time"
)

// ordinaryRender is the wall time an ordinary render takes at most (a chart of a few hundred
// objects renders in well under a second): when every render slot has been held longer, the
// spare slot takes a render of a namespace that runs none.
const ordinaryRender = 2 * time.Second

// slots bound the renders that run at once: size in all, and perNamespace of one namespace, so
// that one namespace's hundred Orders, or a hostile Order's renders that run to their timeout,
// leave a slot to every other namespace. An Order of a namespace that runs its share already
// does not wait for a slot, holding an Order worker: it is tried again a moment later (busy),
// and the worker takes another Order.
//
// One slot more, the spare, is kept for a namespace that runs no render while every slot has
// been held longer than an ordinary render (share): two tenants' renders that run to their
// budgets hold the size slots, not a third tenant's Order, which waits at most share for the
// spare. At most size + 1 renders run at once.
type slots struct {
	mu           sync.Mutex
	size         int
	perNamespace int
	// share is how long a render holds a slot before it no longer keeps the spare from a
	// namespace that runs none (ordinaryRender).
	share   time.Duration
	running map[string]int
	// held are the times the slots held were taken, by the slot.
	held map[uint64]time.Time
	// taken counts the slots ever taken: each one's key in held.
	taken uint64
	// freed is closed, and made anew, each time a slot is given back.
	freed chan struct{}
}

// newSlots makes size slots (at least one), of which one namespace holds at most half
// (at least one), and the spare.
func newSlots(size int) *slots {
	size = max(size, 1)
	return &slots{size: size, perNamespace: max(size/2, 1), share: ordinaryRender, running: map[string]int{},
		held: map[uint64]time.Time{}, freed: make(chan struct{})}
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
		now := time.Now()
		youngest := s.youngest()
		spare := len(s.held) == s.size && s.running[namespace] == 0 && now.Sub(youngest) >= s.share
		if len(s.held) < s.size || spare {
			s.taken++
			slot := s.taken
			s.running[namespace]++
			s.held[slot] = now
			s.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { s.give(namespace, slot) }) }, true, nil
		}
		// The spare may be this namespace's once the youngest slot is older than share.
		var aged <-chan time.Time
		var timer *time.Timer
		if len(s.held) == s.size && s.running[namespace] == 0 {
			timer = time.NewTimer(s.share - now.Sub(youngest))
			aged = timer.C
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-freed:
		case <-aged:
		}
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return nil, false, err
		}
	}
}

// youngest is when the slot taken last was taken (zero when none is held); s.mu is held.
func (s *slots) youngest() time.Time {
	var y time.Time
	for _, t := range s.held {
		if t.After(y) {
			y = t
		}
	}
	return y
}

// full reports whether namespace runs its share of the renders: a take of it now would not get
// a slot.
func (s *slots) full(namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[namespace] >= s.perNamespace
}

// give returns slot, of namespace.
func (s *slots) give(namespace string, slot uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, slot)
	if s.running[namespace]--; s.running[namespace] <= 0 {
		delete(s.running, namespace)
	}
	close(s.freed)
	s.freed = make(chan struct{})
}
