package sandbox

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func serving(name, preparation, revision, reason string, healthy, selected int32) v1.Serving {
	return v1.Serving{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "platform"},
		Spec:       v1.ServingSpec{PreparationName: preparation},
		Status: v1.ServingStatus{
			Revision:   revision,
			Clusters:   v1.ClusterCounts{Selected: selected, Healthy: healthy},
			Conditions: []metav1.Condition{{Type: v1.ConditionReady, Reason: reason}},
		},
	}
}

func TestTheDemoSaysOnceWhenEachServingIsDeployed(t *testing.T) {
	seen := map[string]string{}
	got := newlyDeployed([]v1.Serving{
		serving("podinfo-staging", "podinfo-staging-1", "sha256:a", v1.ReasonDeployed, 1, 1),
		serving("podinfo-edge", "", "", v1.ReasonAwaitingStage, 0, 3),
	}, seen, 21400*time.Millisecond)
	if want := "Serving platform/podinfo-staging Deployed podinfo-staging-1 to 1 of 1 clusters, 21s after start"; len(got) != 1 || got[0] != want {
		t.Fatalf("lines %q, want [%q]", got, want)
	}
	// Nothing new: nothing printed again.
	if got := newlyDeployed([]v1.Serving{serving("podinfo-staging", "podinfo-staging-1", "sha256:a", v1.ReasonDeployed, 1, 1)}, seen, time.Minute); len(got) != 0 {
		t.Errorf("printed again: %q", got)
	}
	// edge after its soak, and staging at a new release.
	got = newlyDeployed([]v1.Serving{
		serving("podinfo-staging", "podinfo-staging-2", "sha256:b", v1.ReasonDeployed, 1, 1),
		serving("podinfo-edge", "podinfo-edge-1", "sha256:a", v1.ReasonDeployed, 3, 3),
	}, seen, 43*time.Second)
	if len(got) != 2 || !strings.Contains(got[0], "podinfo-staging-2") || !strings.Contains(got[1], "podinfo-edge Deployed podinfo-edge-1 to 3 of 3 clusters, 43s") {
		t.Errorf("lines %q", got)
	}
}
