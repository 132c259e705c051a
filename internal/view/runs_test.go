package view

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// What runs comes from status.running, not from the promoted Preparation; the promoted one is
// labelled by its state.
func TestRunsOfSaysWhatRunsAndHowThePromotedOneStands(t *testing.T) {
	preps := []v1.Preparation{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-2"}, Spec: v1.PreparationSpec{Artifact: v1.Artifact{Digest: "sha256:2"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Spec: v1.PreparationSpec{Artifact: v1.Artifact{Digest: "sha256:1"}}},
	}
	serving := func(rollout *v1.RolloutStatus, running ...v1.RevisionCount) *v1.Serving {
		return &v1.Serving{Spec: v1.ServingSpec{PreparationName: "web-2"}, Status: v1.ServingStatus{Running: running, Rollout: rollout}}
	}
	for _, c := range []struct {
		name           string
		sv             *v1.Serving
		current        string
		state          string
		label1, label2 string
	}{
		{"awaiting approval", serving(&v1.RolloutStatus{Preparation: "web-2", State: v1.RolloutProgressing, Awaiting: v1.EnvironmentGate}, v1.RevisionCount{Revision: "sha256:1", Clusters: 3}),
			"web-1", PromotedAwaitingApproval, "runs on 3 clusters", "promoted, awaiting approval"},
		{"aborted", serving(&v1.RolloutStatus{Preparation: "web-2", State: v1.RolloutAborted}, v1.RevisionCount{Revision: "sha256:1", Clusters: 3}),
			"web-1", PromotedAborted, "runs on 3 clusters", "promoted, aborted"},
		{"half way", serving(nil, v1.RevisionCount{Revision: "sha256:1", Clusters: 2}, v1.RevisionCount{Revision: "sha256:2", Clusters: 1}),
			"web-1", PromotedRollingOut, "runs on 2 clusters", "runs on 1 cluster; promoted, rolling out"},
		{"everywhere", serving(nil, v1.RevisionCount{Revision: "sha256:2", Clusters: 3}),
			"web-2", PromotedDeployed, "", "runs on 3 clusters"},
	} {
		r := RunsOf(c.sv, preps)
		if r.Current != c.current || r.PromotedState != c.state || r.Label("web-1") != c.label1 || r.Label("web-2") != c.label2 {
			t.Errorf("%s: current %q state %q labels %q, %q; want %q %q %q, %q", c.name, r.Current, r.PromotedState,
				r.Label("web-1"), r.Label("web-2"), c.current, c.state, c.label1, c.label2)
		}
	}
}
