package order

import (
	"context"
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
