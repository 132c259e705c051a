package serving

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func TestServingsLookAtAClusterOnlyWhenWhatTheyReadChanges(t *testing.T) {
	base := func() *v1.Cluster {
		return &v1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Labels: map[string]string{"tier": "edge"}},
			Spec:       v1.ClusterSpec{Server: "https://edge-1:6443"},
			Status: v1.ClusterStatus{Version: "v1.37.2", Conditions: []metav1.Condition{{
				Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonConnected, Message: "v1.37.2",
			}}},
		}
	}
	now := metav1.NewTime(time.Now())
	for _, tc := range []struct {
		name   string
		change func(c *v1.Cluster)
		want   bool
	}{
		{"a probe that finds nothing new", func(c *v1.Cluster) { c.Status.LastProbeTime = &now }, false},
		{"another message, same reason", func(c *v1.Cluster) { c.Status.Conditions[0].Message = "v1.37.3" }, false},
		{"another version", func(c *v1.Cluster) { c.Status.Version = "v1.37.3" }, false},
		{"a label", func(c *v1.Cluster) { c.Labels["tier"] = "core" }, true},
		{"the server", func(c *v1.Cluster) { c.Spec.Server = "https://edge-1b:6443" }, true},
		{"deletion", func(c *v1.Cluster) { c.DeletionTimestamp = &now }, true},
		{"Ready turns False", func(c *v1.Cluster) {
			c.Status.Conditions[0].Status, c.Status.Conditions[0].Reason = metav1.ConditionFalse, v1.ReasonUnreachable
		}, true},
		{"another reason", func(c *v1.Cluster) { c.Status.Conditions[0].Reason = v1.ReasonUnauthorized }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed := base()
			tc.change(changed)
			if got := clusterChangeServingsRead.Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: changed}); got != tc.want {
				t.Errorf("Servings look again: %v, want %v", got, tc.want)
			}
		})
	}
}
