package order

import (
	"context"
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// inFlight returns what marks, when a render of the Order's input starts, the failure it would
// be should the controller die in it (killed at its memory limit, or its node gone): the
// Order's status.renderRetry of input with one failure more than it says, due after that
// failure's wait. A controller that starts again reads it back (retries.Restore) and waits
// rather than retrying at once what may have killed the one before it; a render that ends
// writes status.renderRetry again, cleared or with its failure. base is the Order as the
// reconcile read it, whose write of the status follows from the mark on.
func (r *Reconciler) inFlight(ctx context.Context, order, base *v1.Order, input string) func() error {
	return func() error {
		failures := 1
		if rr := base.Status.RenderRetry; rr != nil && rr.Input == input {
			failures = int(rr.Failures) + 1
		}
		now := time.Now()
		first, most := preparation.RetryWaits(r.RetryAfter, r.MaxRetryAfter)
		mark := base.DeepCopy()
		mark.Status.RenderRetry = &v1.RenderRetry{Input: input, Failures: int32(min(failures, math.MaxInt32)),
			NotBefore: metav1.NewTime(now.Add(preparation.Backoff(failures, first, most)).Truncate(time.Second).Add(time.Second))}
		if err := r.Status().Patch(ctx, mark, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("mark the render in flight in the status of Order %s/%s: %w", order.Namespace, order.Name, err)
		}
		base.ResourceVersion = mark.ResourceVersion
		base.Status.RenderRetry = mark.Status.RenderRetry
		order.ResourceVersion = mark.ResourceVersion
		return nil
	}
}
