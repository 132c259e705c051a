package sandbox

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deliveryv1alpha1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func serving(name, preparation, revision, reason string, healthy, selected int32) deliveryv1alpha1.Serving {
	return deliveryv1alpha1.Serving{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "platform"},
		Spec:       deliveryv1alpha1.ServingSpec{PreparationName: preparation},
		Status: deliveryv1alpha1.ServingStatus{
			Revision:   revision,
			Clusters:   deliveryv1alpha1.ClusterCounts{Selected: selected, Healthy: healthy},
			Conditions: []metav1.Condition{{Type: deliveryv1alpha1.ConditionReady, Reason: reason}},
		},
	}
}

func TestTheDemoSaysOnceWhenEachServingIsDeployed(t *testing.T) {
	seen := map[string]string{}
	got := newlyDeployed([]deliveryv1alpha1.Serving{
		serving("podinfo-staging", "podinfo-staging-1", "sha256:a", deliveryv1alpha1.ReasonDeployed, 1, 1),
		serving("podinfo-edge", "", "", deliveryv1alpha1.ReasonAwaitingStage, 0, 3),
	}, seen, 21400*time.Millisecond)
	if want := "Serving platform/podinfo-staging Deployed podinfo-staging-1 to 1 of 1 clusters, 21s after start"; len(got) != 1 || got[0] != want {
		t.Fatalf("lines %q, want [%q]", got, want)
	}
	// Nothing new: nothing printed again.
	if got := newlyDeployed([]deliveryv1alpha1.Serving{serving("podinfo-staging", "podinfo-staging-1", "sha256:a", deliveryv1alpha1.ReasonDeployed, 1, 1)}, seen, time.Minute); len(got) != 0 {
		t.Errorf("printed again: %q", got)
	}
	// edge after its soak, and staging at a new release.
	got = newlyDeployed([]deliveryv1alpha1.Serving{
		serving("podinfo-staging", "podinfo-staging-2", "sha256:b", deliveryv1alpha1.ReasonDeployed, 1, 1),
		serving("podinfo-edge", "podinfo-edge-1", "sha256:a", deliveryv1alpha1.ReasonDeployed, 3, 3),
	}, seen, 43*time.Second)
	if len(got) != 2 || !strings.Contains(got[0], "podinfo-staging-2") || !strings.Contains(got[1], "podinfo-edge Deployed podinfo-edge-1 to 3 of 3 clusters, 43s") {
		t.Errorf("lines %q", got)
	}
}
