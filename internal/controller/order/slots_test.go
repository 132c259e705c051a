package order

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestANamespaceHoldsAtMostHalfTheRenderSlots(t *testing.T) {
	ctx := context.Background()
	s := newSlots(4)
	var releases []func()
	for i := range 2 {
		release, ok, err := s.take(ctx, "noisy")
		if !ok || err != nil {
			t.Fatalf("render %d of noisy: ok %v, %v", i, ok, err)
		}
		releases = append(releases, release)
	}
	if _, ok, _ := s.take(ctx, "noisy"); ok {
		t.Fatal("a third render of noisy took a slot of four")
	}
	if !s.full("noisy") || s.full("quiet") {
		t.Fatalf("full: noisy %v (holds its share), quiet %v (holds none)", s.full("noisy"), s.full("quiet"))
	}
	quiet, ok, err := s.take(ctx, "quiet")
	if !ok || err != nil {
		t.Fatalf("quiet found no slot: ok %v, %v", ok, err)
	}
	releases[0]()
	releases[0]() // twice gives back once
	if _, ok, _ := s.take(ctx, "noisy"); !ok {
		t.Fatal("noisy's slot given back was not taken again")
	}
	quiet()

	// Every slot held by others: a namespace waits for one, and gets it when one is given back.
	full := newSlots(2)
	a, _, _ := full.take(ctx, "a")
	b, _, _ := full.take(ctx, "b")
	got := make(chan bool)
	go func() {
		_, ok, _ := full.take(ctx, "c")
		got <- ok
	}()
	select {
	case <-got:
		t.Fatal("c took a slot while a and b held both")
	case <-time.After(50 * time.Millisecond):
	}
	a()
	if !<-got {
		t.Fatal("c got no slot when a gave one back")
	}
	b()
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := newSlots(1).take(done, "x"); err != nil {
		t.Fatalf("a free slot refused on a done context: %v", err)
	}
}

// Two namespaces whose renders hold every slot longer than an ordinary render keep a third
// namespace's render no longer than that: it takes the spare, and only a namespace that runs
// none does; at most size + 1 renders run.
func TestTheSpareSlotTakesARenderOfANamespaceThatRunsNone(t *testing.T) {
	ctx := context.Background()
	s := newSlots(2)
	s.share = 100 * time.Millisecond
	a, _, _ := s.take(ctx, "bomb-a")
	b, _, _ := s.take(ctx, "bomb-b")
	defer a()
	defer b()
	got := make(chan func())
	go func() {
		release, ok, err := s.take(ctx, "calm")
		if !ok || err != nil {
			t.Errorf("calm: ok %v, %v", ok, err)
		}
		got <- release
	}()
	var calm func()
	select {
	case calm = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("calm waited 10s for the spare, share being 100ms")
	}
	// The spare is taken: a fourth namespace waits for a slot given back.
	waiting, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, ok, err := s.take(waiting, "other"); ok || err == nil {
		t.Errorf("a fourth render took a slot beside 3 of 2 slots and the spare: ok %v, %v", ok, err)
	}
	calm()
	// A namespace that runs a render already does not take the spare.
	bombA := newSlots(2)
	bombA.share = time.Millisecond
	x, _, _ := bombA.take(ctx, "a")
	y, _, _ := bombA.take(ctx, "b")
	defer x()
	defer y()
	bombA.perNamespace = 2
	time.Sleep(5 * time.Millisecond)
	waiting, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, ok, _ := bombA.take(waiting, "a"); ok {
		t.Error("a namespace that runs a render took the spare")
	}
}

// Namespaces waiting for a slot take the slots given back in turn: a namespace with many Orders
// waiting takes one, then the namespace that waited after it takes the next.
func TestNamespacesWaitingTakeTheSlotsInTurn(t *testing.T) {
	ctx := context.Background()
	s := newSlots(1)
	s.perNamespace = 10
	s.share = time.Hour // no spare here
	hold, _, _ := s.take(ctx, "x")
	took := make(chan string, 8)
	releases := make(chan func(), 8)
	wait := func(ns string) {
		release, ok, err := s.take(ctx, ns)
		if !ok || err != nil {
			t.Errorf("%s: ok %v, %v", ns, ok, err)
			return
		}
		took <- ns
		releases <- release
	}
	waiters := func(ns string, n int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.waiting[ns] != n {
			t.Fatalf("%s: %d waiting, want %d", ns, s.waiting[ns], n)
		}
	}
	for range 3 {
		go wait("many")
	}
	for !func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.waiting["many"] == 3 }() {
		time.Sleep(time.Millisecond)
	}
	go wait("one")
	for !func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.waiting["one"] == 1 }() {
		time.Sleep(time.Millisecond)
	}
	waiters("many", 3)
	hold()
	var order []string
	for range 4 {
		order = append(order, <-took)
		(<-releases)()
	}
	if !slices.Equal(order, []string{"many", "one", "many", "many"}) {
		t.Errorf("the slots went to %v, want many, one, many, many", order)
	}
}
