package sandbox

import (
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// The fleet's KWOK stage fails the Pods of Jobs of JobFailImage, and only those, and outweighs
// KWOK's pod-complete (weight 0), which selects them too: a Job of that image always fails, and
// the docs and tests that name the image name what the stage selects. The e2e scenario of the
// Job gate runs it on the fleet.
func TestJobStagesFailTheJobsOfJobFailImage(t *testing.T) {
	var stage struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			ResourceRef struct {
				Kind string `json:"kind"`
			} `json:"resourceRef"`
			Selector struct {
				MatchExpressions []struct {
					Key      string   `json:"key"`
					Operator string   `json:"operator"`
					Values   []string `json:"values"`
				} `json:"matchExpressions"`
			} `json:"selector"`
			Weight int `json:"weight"`
			Next   struct {
				StatusTemplate string `json:"statusTemplate"`
			} `json:"next"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(jobStages, &stage); err != nil {
		t.Fatalf("the fleet's KWOK stages: %v", err)
	}
	if stage.APIVersion != "kwok.x-k8s.io/v1alpha1" || stage.Kind != "Stage" || stage.Spec.ResourceRef.Kind != "Pod" {
		t.Fatalf("a %s %s of %s, want a kwok.x-k8s.io/v1alpha1 Stage of Pods", stage.APIVersion, stage.Kind, stage.Spec.ResourceRef.Kind)
	}
	if stage.Spec.Weight < 1 {
		t.Errorf("weight %d: KWOK's pod-complete (weight 0) could be drawn instead", stage.Spec.Weight)
	}
	want := map[string][]string{
		".spec.containers.[0].image":        {JobFailImage},
		".metadata.ownerReferences.[].kind": {"Job"},
		".status.phase":                     {"Running"},
	}
	for _, e := range stage.Spec.Selector.MatchExpressions {
		if v, ok := want[e.Key]; ok && e.Operator == "In" && slices.Equal(e.Values, v) {
			delete(want, e.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("stage %s does not select %v", stage.Metadata.Name, want)
	}
}
