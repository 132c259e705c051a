package writes

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// A cluster's entry into drift is told once: not again while it stays Drifted, whether the
// last status shows it (written) or not (the write failed), and again after it left drift.
func TestDriftedTellsEachEntryOnce(t *testing.T) {
	var d Drifted
	key := types.NamespacedName{Namespace: "team", Name: "web"}
	drifted := func(clusters ...string) []v1.Target {
		var out []v1.Target
		for _, c := range clusters {
			out = append(out, v1.Target{Cluster: c, Conditions: []v1.TargetCondition{{Type: "Drifted", Reason: v1.ReasonDrifted}}})
		}
		return out
	}
	steps := []struct {
		now      []string
		previous []v1.Target
		want     string
	}{
		{[]string{"a"}, nil, "[a]"},
		{[]string{"a"}, nil, "[]"},                // the status write failed: not told again
		{[]string{"a", "b"}, drifted("a"), "[b]"}, // b joins
		{nil, drifted("a", "b"), "[]"},            // both synced again
		{[]string{"a"}, nil, "[a]"},               // a drifts again
		{[]string{"c"}, drifted("c"), "[]"},       // after a restart, the status says c drifted already
	}
	for i, s := range steps {
		if got := fmt.Sprint(d.Entered(key, s.now, s.previous)); got != s.want && !(got == "[]" && s.want == "[]") {
			t.Errorf("step %d: entered %s, want %s", i, got, s.want)
		}
	}
	d.Entered(key, nil, nil)
	if len(d.byServing) != 0 {
		t.Errorf("a Serving with no drifted cluster is remembered: %v", d.byServing)
	}
}
