// Package status is the one policy of Kokumi's status writes: a merge patch of what a reconcile
// changed, from the object it read, under an optimistic lock; a conflict is a quiet requeue; and
// an Event on a Ready transition, never one per loop.
package status

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// ReadyTransitionEvent records an event when the Ready condition's status or reason changed:
// Normal when it turned True, Warning otherwise. The note is the condition's message.
func ReadyTransitionEvent(rec events.EventRecorder, obj client.Object, before, after []metav1.Condition) {
	now := meta.FindStatusCondition(after, v1.ConditionReady)
	if now == nil {
		return
	}
	if was := meta.FindStatusCondition(before, v1.ConditionReady); was != nil && was.Status == now.Status && was.Reason == now.Reason {
		return
	}
	kind := corev1.EventTypeWarning
	if now.Status == metav1.ConditionTrue {
		kind = corev1.EventTypeNormal
	}
	rec.Eventf(obj, nil, kind, now.Reason, "Reconcile", "%s", now.Message)
}
