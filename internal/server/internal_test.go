package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/text"
)

func TestTruncateTextCutsAtALineAndSaysSo(t *testing.T) {
	long := strings.Repeat("0123456789\n", 10000)
	got := text.TruncateLines(long, MaxObjectText, "the object's YAML")
	if len(got) > MaxObjectText || !strings.HasSuffix(got, fmt.Sprintf("the object's YAML is %d bytes, only the first %d are shown\n", len(long), len(got)-len(got[strings.LastIndex(got[:len(got)-1], "\n")+1:]))) {
		t.Errorf("%d bytes ending %q", len(got), got[len(got)-120:])
	}
	if text.TruncateLines("short\n", MaxObjectText, "x") != "short\n" {
		t.Error("a short text was changed")
	}
}

func TestSlowSubscriberIsToldToResync(t *testing.T) {
	b := newBroker()
	s, _ := b.subscribe("session:a", "a", streamLimits{})
	for i := 0; i < subscriberBuffer+3; i++ {
		b.publish(Change{Kind: "Serving", Name: fmt.Sprint(i)})
	}
	if len(s.ch) != subscriberBuffer || !s.overflow.Load() || len(s.kick) != 1 {
		t.Fatalf("buffered %d, overflow %v, kicked %d", len(s.ch), s.overflow.Load(), len(s.kick))
	}
	b.unsubscribe(s)
	b.publish(Change{Kind: "Serving", Name: "after"})
	if len(s.ch) != subscriberBuffer {
		t.Fatal("an unsubscribed client still receives changes")
	}
}
