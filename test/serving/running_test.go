package serving

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// In a roll-out stalled over more than status.targets' 64 clusters, a cluster still running an
// older release may be one the list leaves out: status.running counts every cluster by what it
// runs, so the collector keeps that release's Preparation (and its artifact, which Argo CD
// syncs there again on any drift).
func TestWhatRunsOnClustersPastTheTargetsCapIsCounted(t *testing.T) {
	f := newFixture(t)
	const n = v1.MaxTargets + 2
	var names []string
	for i := range n {
		name := fmt.Sprintf("d%03d", i)
		f.cluster(name, true)
		names = append(names, name)
	}
	old := f.cluster("z999", true) // sorts last: past the cap when the others are listed first
	p1 := f.preparation("podinfo-edge-1", "podinfo", false)
	p2 := f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", p2.Name)
	// Every d… cluster fails the new release (listed first, as Degraded); z999 still runs the
	// old one and is Progressing towards the new.
	for _, c := range names {
		f.playArgoCD(c, "Synced", "Degraded", p2.Spec.Artifact.Digest)
	}
	f.playArgoCD(old.Name, "Synced", "Healthy", p1.Spec.Artifact.Digest)
	var s *v1.Serving
	f.eventually("every cluster counted by what it runs", func() error {
		s = f.serving()
		want := []v1.RevisionCount{{Revision: p2.Spec.Artifact.Digest, Clusters: n}, {Revision: p1.Spec.Artifact.Digest, Clusters: 1}}
		if fmt.Sprint(s.Status.Running) != fmt.Sprint(want) || s.Status.RunningOmitted != 0 {
			return fmt.Errorf("running %+v (%d omitted), want %+v", s.Status.Running, s.Status.RunningOmitted, want)
		}
		return nil
	})
	if len(s.Status.Targets) != v1.MaxTargets || s.Status.TargetsOmitted != 3 {
		t.Fatalf("%d targets, %d omitted: want the cap, and 3 left out", len(s.Status.Targets), s.Status.TargetsOmitted)
	}
	for _, tg := range s.Status.Targets {
		if tg.Cluster == old.Name {
			t.Fatalf("%s is listed: the test does not reach past the cap", old.Name)
		}
	}
	order := &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-edge", Namespace: f.ns}, Status: v1.OrderStatus{LatestPreparation: p2.Name}}
	if !preparation.Keeps(order, s)(p1) {
		t.Errorf("the collector would delete %s, which %s still runs", p1.Name, old.Name)
	}
}
