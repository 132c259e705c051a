package fleet

import (
	"encoding/json"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// fleetOf returns a request of n Ready clusters, each with an up-to-date Application; a tenth
// are degraded, a tenth progressing, the rest healthy.
func fleetOf(n int) Request {
	r := request()
	for i := range n {
		c := ready(fmt.Sprintf("edge-%05d", i))
		r.Clusters = append(r.Clusters, c)
		st := status("Synced", "Healthy", rev)
		switch i % 10 {
		case 1:
			st.Health.Status = "Degraded"
		case 2:
			st.Sync.Status, st.Health.Status = "OutOfSync", "Progressing"
		}
		r.Applications[appName(c.Name)] = Observed{Ours: true, UpToDate: true, Status: st}
	}
	return r
}

func BenchmarkDecideAndFold(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		req := fleetOf(n)
		now := metav1.Now()
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			for b.Loop() {
				Fold(req.Preparation, "edge", Decide(req), nil, now)
			}
		})
	}
}

// TestServingStaysSmallAt10000Clusters serializes a Serving whose 10,000 clusters are all
// unhealthy, the largest status the fold makes.
func TestServingStaysSmallAt10000Clusters(t *testing.T) {
	req := fleetOf(10000)
	for name, o := range req.Applications {
		o.Status.Health.Status = "Degraded"
		o.Status.Health.Message = "Deployment podinfo exceeded its progress deadline; ReplicaSet podinfo-7c9f has timed out progressing"
		req.Applications[name] = o
	}
	sum := Fold(req.Preparation, "edge", Decide(req), nil, metav1.Now())
	s := v1.Serving{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo-edge", Namespace: "platform"},
		Spec:       v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "podinfo-edge"}, PreparationName: req.Preparation},
		Status: v1.ServingStatus{Revision: rev, Clusters: sum.Clusters, Targets: sum.Targets, TargetsOmitted: sum.Omitted,
			Conditions: []metav1.Condition{sum.Ready}},
	}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Serving at 10,000 clusters, all degraded: %d bytes", len(data))
	if len(data) > 32<<10 {
		t.Errorf("Serving is %d bytes at 10,000 clusters; it must stay well under 64 KiB", len(data))
	}
	if sum.Clusters.Degraded != 10000 || len(sum.Targets) != v1.MaxTargets || sum.Omitted != 10000-v1.MaxTargets {
		t.Errorf("fold %+v, %d targets, %d omitted", sum.Clusters, len(sum.Targets), sum.Omitted)
	}
}
