package preparation

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// chain makes n Preparations of one Order, each the parent of the next, created at the times
// second(i) gives.
func chain(n int, second func(i int) int) []*v1.Preparation {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out []*v1.Preparation
	parent := ""
	for i := range n {
		digest := fmt.Sprintf("sha256:%064d", i+1)
		out = append(out, &v1.Preparation{
			// Names sort against age, so that only the parents can order a second's Preparations.
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%02d", n-i), CreationTimestamp: metav1.NewTime(base.Add(time.Duration(second(i)) * time.Second))},
			Spec:       v1.PreparationSpec{Artifact: v1.Artifact{Digest: digest}, ParentDigest: parent},
		})
		parent = digest
	}
	return out
}

func names(preps []*v1.Preparation) []string {
	out := make([]string, len(preps))
	for i, p := range preps {
		out[i] = p.Name
	}
	return out
}

func TestCollectibleIsTheOldestBeyondTheHistoryThatNothingKeeps(t *testing.T) {
	none := func(*v1.Preparation) bool { return false }
	for name, tc := range map[string]struct {
		preps []*v1.Preparation
		keep  func(*v1.Preparation) bool
		want  []string
	}{
		"within the history": {chain(10, func(i int) int { return i }), none, nil},
		"one second each":    {chain(13, func(i int) int { return i }), none, []string{"app-13", "app-12", "app-11"}},
		// Listed newest first, all in one second: their parents say which are oldest.
		"all in one second": {reverse(chain(13, func(int) int { return 0 })), none, []string{"app-13", "app-12", "app-11"}},
		"kept ones stay": {chain(13, func(i int) int { return i / 4 }), func(p *v1.Preparation) bool { return p.Name == "app-13" || p.Name == "app-11" },
			[]string{"app-12"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := names(Collectible(tc.preps, 10, tc.keep))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("collectible: %v, want %v", got, tc.want)
			}
		})
	}
}

func reverse(preps []*v1.Preparation) []*v1.Preparation {
	out := make([]*v1.Preparation, len(preps))
	for i, p := range preps {
		out[len(preps)-1-i] = p
	}
	return out
}

func TestKeepsTheLatestTheNamedAndTheRunningOnes(t *testing.T) {
	prep := func(name, digest string) *v1.Preparation {
		return &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PreparationSpec{Artifact: v1.Artifact{Digest: digest}}}
	}
	order := &v1.Order{Status: v1.OrderStatus{LatestPreparation: "latest"}}
	serving := &v1.Serving{Spec: v1.ServingSpec{PreparationName: "promoted"},
		Status: v1.ServingStatus{Revision: "sha256:running", Targets: []v1.Target{{Cluster: "edge-1", Revision: "sha256:lagging"}}}}
	keep := Keeps(order, serving)
	for _, p := range []*v1.Preparation{prep("latest", "sha256:1"), prep("promoted", "sha256:2"), prep("a", "sha256:running"), prep("b", "sha256:lagging")} {
		if !keep(p) {
			t.Errorf("%s (%s) is not kept", p.Name, p.Spec.Artifact.Digest)
		}
	}
	if keep(prep("old", "sha256:3")) || Keeps(order, nil)(prep("promoted", "sha256:2")) {
		t.Error("a Preparation nothing names or runs is kept")
	}
	if Keeps(&v1.Order{}, &v1.Serving{})(prep("", "")) {
		t.Error("an empty name or revision keeps a Preparation")
	}
}

func TestAPreparationOfTheSameSecondAfterABrokenChainStays(t *testing.T) {
	// 13 Preparations; the second, third and fourth were made in one second. The third was
	// collected, so the fourth's parent is gone and the chain no longer says it is newer than
	// the second. The first two are kept (running, promoted): with 12 left and a history of
	// 10, nothing else may go.
	preps := chain(13, func(i int) int {
		if i >= 1 && i <= 3 {
			return 1
		}
		return i
	})
	preps = append(preps[:2:2], preps[3:]...)
	got := names(Collectible(preps, 10, func(p *v1.Preparation) bool { return p.Name == "app-13" || p.Name == "app-12" }))
	if len(got) != 0 {
		t.Errorf("collectible: %v, want none: the fourth may be newer than the second, which the history keeps", got)
	}
}

// What status.running counts is kept, and nothing goes while it leaves revisions out.
func TestKeepsWhatRunsAnywhereAndEverythingWhenRunningIsCut(t *testing.T) {
	order := &v1.Order{Status: v1.OrderStatus{LatestPreparation: "new"}}
	s := &v1.Serving{Spec: v1.ServingSpec{PreparationName: "new"}, Status: v1.ServingStatus{Revision: "sha256:new",
		Running: []v1.RevisionCount{{Revision: "sha256:new", Clusters: 99}, {Revision: "sha256:old", Clusters: 1}}}}
	prep := func(name, digest string) *v1.Preparation {
		return &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PreparationSpec{Artifact: v1.Artifact{Digest: digest}}}
	}
	keep := Keeps(order, s)
	if !keep(prep("old", "sha256:old")) || keep(prep("older", "sha256:older")) {
		t.Errorf("kept old %v, older %v: want old only", keep(prep("old", "sha256:old")), keep(prep("older", "sha256:older")))
	}
	s.Status.RunningOmitted = 1
	if !Keeps(order, s)(prep("older", "sha256:older")) {
		t.Error("a Preparation was collectible while status.running left revisions out")
	}
	if got := Runs(s); got[len(got)-1] != "+1 more" {
		t.Errorf("Runs %v does not change when revisions are left out", got)
	}
}
