// Package status is the one policy of Kokumi's status writes: a merge patch of what a reconcile
// changed, from the object it read, under an optimistic lock; a conflict, of that write or of any
// other a reconcile makes from its cache (QuietConflicts), is a quiet requeue; and an Event on a
// Ready transition that a person needs to hear of, never one per loop nor one per object that
// simply became Ready.
package status

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Patch is a merge patch from base that applies only to the resourceVersion base was read
// at. A merge patch leaves out every field equal in base and the new object; from a cache that
// has not seen the reconciler's own last write, it would leave that write's fields in place
// (counts that no longer add up, a list entry dropped). The optimistic lock turns that into a
// conflict, and the reconcile runs again.
//
// A reconcile whose status patch conflicts runs again after ConflictRetry, without an error.
func Patch(base client.Object) client.Patch {
	return client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
}

// ConflictRetry is when a reconcile whose status write conflicted runs again: the cache has
// usually caught up by then.
const ConflictRetry = 500 * time.Millisecond

// ReadyTransitionEvent records an event when the Ready condition's status or reason changed, and
// a person needs to hear of it: a Warning when it is not True (a failure, or another failure
// than before); a Normal one when it turned True again after being False (a recovery). The
// first Ready of a new object records none: its condition says it, and onboarding 10,000
// Clusters would otherwise record 10,000 Events. The note is the condition's message.
func ReadyTransitionEvent(rec events.EventRecorder, obj client.Object, before, after []metav1.Condition) {
	now := meta.FindStatusCondition(after, v1.ConditionReady)
	if now == nil {
		return
	}
	was := meta.FindStatusCondition(before, v1.ConditionReady)
	if was != nil && was.Status == now.Status && was.Reason == now.Reason {
		return
	}
	kind := corev1.EventTypeWarning
	if now.Status == metav1.ConditionTrue {
		if was == nil || was.Status != metav1.ConditionFalse {
			return // the first Ready (or after Unknown): routine
		}
		kind = corev1.EventTypeNormal
	}
	rec.Eventf(obj, nil, kind, now.Reason, "Reconcile", "%s", now.Message)
}

// QuietConflicts wraps a reconciler so that a conflict is a quiet requeue wherever its reconcile
// meets one: a write from a cache that had not yet seen the reconciler's own last write (a
// finalizer added, a Secret updated, a status written) fails with a conflict, and the reconcile
// runs again after ConflictRetry on what the cache holds by then. Returned to controller-runtime,
// the conflict would be logged as an error line and retried with a growing backoff. Any other
// error is returned as it is.
func QuietConflicts(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := r.Reconcile(ctx, req)
		if err != nil && apierrors.IsConflict(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("the object changed since it was read; trying again", "reason", err.Error())
			return ctrl.Result{RequeueAfter: ConflictRetry}, nil
		}
		return res, err
	})
}

// Written is what Write did.
type Written struct {
	// Changed is true when the status differed from the one read and was written.
	Changed bool
	// Conflict is true when the write met a newer object (the cache had not seen the last
	// write): nothing was written, and the reconcile runs again after ConflictRetry.
	Conflict bool
}

// Result is the reconcile's result after the write: a quiet requeue after a conflict.
func (w Written) Result() ctrl.Result {
	if w.Conflict {
		return ctrl.Result{RequeueAfter: ConflictRetry}
	}
	return ctrl.Result{}
}

// Write is the one status write of every reconciler: when obj's status differs from base's
// (base is obj as read, before the reconcile changed its status), a merge patch of what changed
// through the status subresource, under an optimistic lock (Patch). A quiet fleet writes
// nothing. A conflict is no error (Written.Conflict: requeue after ConflictRetry), nor is an
// object deleted meanwhile; any other failure is, naming what was written.
func Write(ctx context.Context, c client.Client, obj, base client.Object, opts ...client.SubResourcePatchOption) (Written, error) {
	if equality.Semantic.DeepEqual(base, obj) {
		return Written{}, nil
	}
	err := c.Status().Patch(ctx, obj, Patch(base), opts...)
	switch {
	case err == nil:
		return Written{Changed: true}, nil
	case apierrors.IsConflict(err):
		return Written{Conflict: true}, nil
	case apierrors.IsNotFound(err):
		return Written{}, nil
	}
	return Written{}, fmt.Errorf("write the status of %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
}
