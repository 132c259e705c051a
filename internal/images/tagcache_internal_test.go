package images

import (
	"errors"
	"testing"
	"time"
)

// An answer is kept for the TTL, then asked again; a failure is not kept.
func TestTagCacheKeepsAnAnswerForItsTTLAndNoFailure(t *testing.T) {
	now := time.Unix(0, 0)
	c := &TagCache{TTL: 5 * time.Second, now: func() time.Time { return now }}
	asked := 0
	answer := func(digest string, err error) func() (string, error) {
		return func() (string, error) {
			asked++
			return digest, err
		}
	}
	if _, err := c.resolve("id", "r/a:1", answer("", errors.New("down"))); err == nil {
		t.Fatal("the failure was not returned")
	}
	if d, err := c.resolve("id", "r/a:1", answer("sha256:1", nil)); err != nil || d != "sha256:1" || asked != 2 {
		t.Fatalf("after a failure: %q, %v, asked %d times, want the registry asked again", d, err, asked)
	}
	now = now.Add(4 * time.Second)
	if d, _ := c.resolve("id", "r/a:1", answer("sha256:2", nil)); d != "sha256:1" || asked != 2 {
		t.Errorf("within the TTL: %q, asked %d times, want the answer kept", d, asked)
	}
	if d, _ := c.resolve("other", "r/a:1", answer("sha256:3", nil)); d != "sha256:3" || asked != 3 {
		t.Errorf("another identity: %q, asked %d times, want its own answer", d, asked)
	}
	now = now.Add(2 * time.Second)
	if d, _ := c.resolve("id", "r/a:1", answer("sha256:2", nil)); d != "sha256:2" || asked != 4 {
		t.Errorf("after the TTL: %q, asked %d times, want the tag resolved again", d, asked)
	}
	now = now.Add(time.Minute)
	_, _ = c.resolve("id", "r/b:1", answer("sha256:4", nil))
	if n := c.len(); n != 1 {
		t.Errorf("%d entries after a sweep, want only the fresh one", n)
	}
}
