package order

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/kokumi-dev/kokumi/internal/render/isolate"
)

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
	// namespace that runs none (isolate.OrdinaryRender).
	share   time.Duration
	running map[string]int
	// turn are the namespaces that wait for a slot, in the order they take one, and waiting how
	// many of each wait.
	turn    []string
	waiting map[string]int
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
	return &slots{size: size, perNamespace: max(size/2, 1), share: isolate.OrdinaryRender, running: map[string]int{}, waiting: map[string]int{},
		held: map[uint64]time.Time{}, freed: make(chan struct{})}
}

// take takes a slot for a render of namespace, waiting while other namespaces hold every slot;
// ok is false, at once, when namespace holds its share already. release gives the slot back.
// Namespaces that wait take the slots given back in turn (turn), however many of their Orders
// wait: a namespace with fifty Orders waiting takes one slot, then waits behind the others.
func (s *slots) take(ctx context.Context, namespace string) (release func(), ok bool, err error) {
	queued := false
	defer func() {
		if queued {
			s.mu.Lock()
			s.leave(namespace, ok)
			s.mu.Unlock()
		}
	}()
	for {
		s.mu.Lock()
		if s.running[namespace] >= s.perNamespace {
			s.mu.Unlock()
			return nil, false, nil
		}
		now := time.Now()
		youngest := s.youngest()
		spare := len(s.held) == s.size && s.running[namespace] == 0 && now.Sub(youngest) >= s.share
		if (len(s.held) < s.size && (len(s.turn) == 0 || s.turn[0] == namespace)) || spare {
			s.taken++
			slot := s.taken
			s.running[namespace]++
			s.held[slot] = now
			s.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { s.give(namespace, slot) }) }, true, nil
		}
		if !queued {
			queued = true
			if s.waiting[namespace]++; s.waiting[namespace] == 1 {
				s.turn = append(s.turn, namespace)
			}
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

// leave counts a waiter of namespace that stops waiting, having taken a slot or not: namespace
// leaves the turn when none of its waits, and goes to its end when it took a slot and more of it
// wait; s.mu is held.
func (s *slots) leave(namespace string, took bool) {
	s.waiting[namespace]--
	i := slices.Index(s.turn, namespace)
	switch {
	case s.waiting[namespace] <= 0:
		delete(s.waiting, namespace)
		s.turn = slices.Delete(s.turn, i, i+1)
	case took:
		s.turn = append(slices.Delete(s.turn, i, i+1), namespace)
	}
	// Whoever is first in the turn now may find a slot free.
	close(s.freed)
	s.freed = make(chan struct{})
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
