package harness

import (
	"testing"
	"time"
)

// Eventually polls check every 100 ms until it returns nil, and fails the test with what and
// check's last error when within has passed.
func Eventually(t testing.TB, what string, within time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Must fails the test at once on an error: for the steps a test cannot go on without.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
