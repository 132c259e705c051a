package preparation

import (
	"fmt"
	"math"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// The render backoff: a failed render waits before it is tried again, twice as long after each
// failure in a row of the same input.

const (
	// DefaultRetryAfter is when a failed render is first tried again without any change.
	DefaultRetryAfter = 5 * time.Second
	// DefaultMaxRetryAfter is the longest wait between two failed renders of the same input.
	DefaultMaxRetryAfter = 10 * time.Minute
)

// Failure is a failed render: the Order's Ready reason and message.
type Failure struct {
	Reason  string
	Message string
}

// RetryInput names what a failed render is tried again for: the Order's and its Product's
// generations. A failed input is tried again once its wait is over, or at once when the Order or
// its Product changes.
func RetryInput(order *v1.Order, product *v1.Product) string {
	return fmt.Sprintf("%d/%s/%d", order.Generation, product.UID, product.Generation)
}

// RetryWaits is the wait after one failure and the longest wait: first and most when set
// (most at least first), DefaultRetryAfter and DefaultMaxRetryAfter otherwise.
func RetryWaits(first, most time.Duration) (time.Duration, time.Duration) {
	if first <= 0 {
		first = DefaultRetryAfter
	}
	if most <= 0 {
		most = DefaultMaxRetryAfter
	}
	return first, max(most, first)
}

// Backoff is the wait after failures in a row: first, doubled for each failure after the
// first, at most most.
func Backoff(failures int, first, most time.Duration) time.Duration {
	wait := first
	for i := 1; i < failures && wait < most; i++ {
		wait *= 2
	}
	return min(wait, most)
}

// RetryNote is the Order's status.renderRetry after attempts failures in a row of input at now,
// the next try waiting wait, and what its Ready message says of it.
func RetryNote(input string, attempts int, wait time.Duration, now time.Time) (*v1.RenderRetry, string) {
	retry := &v1.RenderRetry{Input: input, Failures: int32(min(attempts, math.MaxInt32)),
		NotBefore: metav1.NewTime(now.Add(wait).Truncate(time.Second).Add(time.Second))}
	times := "once"
	if attempts > 1 {
		times = fmt.Sprintf("%d times in a row", attempts)
	}
	return retry, fmt.Sprintf("Failed %s: Kokumi tries again in %s, at %s, or at once when the Order or its Product changes.",
		times, wait, now.Add(wait).UTC().Format(time.RFC3339))
}

// Retries holds, per Order, the failures in a row of one input (RetryInput): a failed render
// waits before it is tried again, twice as long after each failure. The Order's
// status.renderRetry keeps it too, which a controller that starts again reads back (Restore).
// The zero value is ready to use.
type Retries struct {
	mu     sync.Mutex
	orders map[types.NamespacedName]retry
}

// retry is an Order's failures in a row of input, and when it may be tried again.
type retry struct {
	input    string
	failures int
	next     time.Time
}

// Wait is how long an Order's failed input still waits at now; 0 when it may render.
func (t *Retries) Wait(order types.NamespacedName, input string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, ok := t.orders[order]
	if !ok || last.input != input || !now.Before(last.next) {
		return 0
	}
	return last.next.Sub(now)
}

// Failed records a failure of the Order's input at now and returns how many in a row, and
// how long the next try waits: first after one failure, doubling with each, at most most.
func (t *Retries) Failed(order types.NamespacedName, input string, now time.Time, first, most time.Duration) (int, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.orders == nil {
		t.orders = map[types.NamespacedName]retry{}
	}
	last := t.orders[order]
	if last.input != input {
		last = retry{input: input}
	}
	last.failures++
	wait := Backoff(last.failures, first, most)
	last.next = now.Add(wait)
	t.orders[order] = last
	return last.failures, wait
}

// Restore takes an Order's failures of input from its status, when none of this input are
// known here (the controller started again since).
func (t *Retries) Restore(order types.NamespacedName, input string, failures int, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.orders == nil {
		t.orders = map[types.NamespacedName]retry{}
	}
	if last, ok := t.orders[order]; !ok || last.input != input {
		t.orders[order] = retry{input: input, failures: failures, next: next}
	}
}

// Forget drops an Order's failures: it rendered, or is gone.
func (t *Retries) Forget(order types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.orders, order)
}
