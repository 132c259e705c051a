package preparation

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestFailedRendersWaitTwiceAsLongEachTimeUntilTheInputChanges(t *testing.T) {
	first, most := 5*time.Second, 10*time.Minute
	for failures, want := range map[int]time.Duration{
		1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 7: 320 * time.Second, 8: 10 * time.Minute, 60: 10 * time.Minute,
	} {
		if got := Backoff(failures, first, most); got != want {
			t.Errorf("after %d failures: wait %s, want %s", failures, got, want)
		}
	}

	var r Retries
	order := types.NamespacedName{Namespace: "team", Name: "web"}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second} {
		if n, wait := r.Failed(order, "1/uid/1", now, first, most); n != i+1 || wait != want {
			t.Fatalf("failure %d: %d in a row, wait %s; want %d, %s", i+1, n, wait, i+1, want)
		}
		if got := r.Wait(order, "1/uid/1", now.Add(time.Second)); got != want-time.Second {
			t.Errorf("a second later the same input waits %s, want %s", got, want-time.Second)
		}
		now = now.Add(want)
		if got := r.Wait(order, "1/uid/1", now); got != 0 {
			t.Errorf("once the wait is over the input still waits %s", got)
		}
	}
	// A changed Order or Product is tried at once, and starts again from the first wait.
	if got := r.Wait(order, "2/uid/1", now.Add(-time.Second)); got != 0 {
		t.Errorf("a changed input waits %s", got)
	}
	if n, wait := r.Failed(order, "2/uid/1", now, first, most); n != 1 || wait != first {
		t.Errorf("a changed input's first failure: %d in a row, wait %s", n, wait)
	}
	r.Forget(order)
	if got := r.Wait(order, "2/uid/1", now); got != 0 {
		t.Errorf("a forgotten Order waits %s", got)
	}
}
