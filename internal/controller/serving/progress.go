package serving

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/rollout/writes"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// maxEventNames is how many clusters one Event names; it counts the others.
const maxEventNames = 10

// startSlice sizes this reconcile's share of the writes the decisions ask for.
func (r *Reconciler) startSlice(s *v1.Serving, decisions []fleet.Decision, byName map[string]*argocd.Application) *writes.Slice {
	key := client.ObjectKeyFromObject(s)
	return writes.NewSlice(key, r.Config.ApplicationWriteSlice, decisions, byName, r.writes.InFlight(key, byName, time.Now()))
}

// sliceOutcome says whether the roll-out goes on in another slice. When it does, Ready says how
// far the writes got ("writing Applications: 4,000 of 10,000"), and the status stays as it was
// at entry if the last progress was written less than writes.ProgressInterval ago.
func (r *Reconciler) sliceOutcome(s *v1.Serving, sl *writes.Slice, preparation string, entry *v1.ServingStatus) bool {
	more := sl.More()
	if !r.writes.ProgressDue(sl.Key(), time.Now(), !more) {
		s.Status = *entry.DeepCopy()
		return true
	}
	if more {
		current, total := sl.Progress()
		r.outcome(s, metav1.ConditionFalse, v1.ReasonProgressing, fmt.Sprintf(
			"Rolling out Preparation %s: writing Applications: %s of %s; the rest follow in the next reconcile",
			preparation, text.Thousands(current), text.Thousands(total)))
	}
	return more
}

// joinedEvent records one Event for the clusters whose Applications this reconcile created.
func (r *Reconciler) joinedEvent(s *v1.Serving, joined []string) {
	switch len(joined) {
	case 0:
	case 1:
		r.Recorder.Eventf(s, clusterRef(joined[0]), corev1.EventTypeNormal, "ClusterJoined", "CreateApplication",
			"Cluster %s: created Application %s/%s", joined[0], r.Config.ArgoCDNamespace, fleet.ApplicationName(s.Namespace, s.Name, joined[0]))
	default:
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "ClusterJoined", "CreateApplications",
			"Deployed to %s joining clusters: %s (created their Argo CD Applications in %s)",
			text.Thousands(len(joined)), text.FirstNames(joined, maxEventNames), r.Config.ArgoCDNamespace)
	}
}

// leftEvent records one Event for the clusters that left the Environment and whose
// Applications were deleted.
func (r *Reconciler) leftEvent(s *v1.Serving, environment string, left []string, apps []string) {
	switch len(left) {
	case 0:
	case 1:
		r.Recorder.Eventf(s, clusterRef(left[0]), corev1.EventTypeNormal, "ClusterLeft", "DeleteApplication",
			"Cluster %s left Environment %s: deleted Application %s/%s; what runs there keeps running",
			left[0], environment, r.Config.ArgoCDNamespace, apps[0])
	default:
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "ClusterLeft", "DeleteApplications",
			"%s clusters left Environment %s: %s; deleted their Applications; what runs there keeps running",
			text.Thousands(len(left)), environment, text.FirstNames(left, maxEventNames))
	}
}

// driftEvents records a Warning Event of the clusters of s that entered drift (entered, by
// name), and tells the webhooks of env (spec.notifications) that want Drifted: their count and
// the first maxEventNames of them.
func (r *Reconciler) driftEvents(s *v1.Serving, env *v1.Environment, entered []string) {
	if len(entered) == 0 {
		return
	}
	clusters := "clusters"
	if len(entered) == 1 {
		clusters = "cluster"
	}
	msg := fmt.Sprintf("%s %s of Preparation %s drifted: %s; what runs there is no longer what Argo CD deployed, and its self-heal did not undo it (status.targets names the objects out of sync)",
		text.Thousands(len(entered)), clusters, s.Spec.PreparationName, text.FirstNames(entered, maxEventNames))
	r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, v1.ReasonDrifted, "Drift", "%s", msg)
	if r.Notifier != nil && env != nil && len(env.Spec.Notifications) > 0 {
		r.Notifier.Notify(env, s, rollout.Transition{Reason: v1.NotificationDrifted, Message: msg, Warning: true})
	}
}
