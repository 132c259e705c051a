package rollout

import (
	"slices"
	"testing"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
)

// A drifted cluster of a wave is not counted healthy, holds its wave back without failing the
// roll-out, and is not among the healthy clusters a record names.
func TestADriftedClusterIsNotHealthyInItsWave(t *testing.T) {
	p1, p2 := prepOf("p-1", oldDigest), prepOf("p-2", newDigest)
	pol := policy(v1.RolloutHalt, 0)
	pol.Waves[0].Soak = nil
	in := planInputs(t, pol, nil, p1, p2)
	drifted := appAt(t, in, "c1", p2, argocd.HealthHealthy)
	drifted.Status.Sync.Status, drifted.Status.LastDeployed = argocd.SyncOutOfSync, newDigest
	drifted.Status.OutOfSync = &argocd.OutOfSync{Names: []string{"Deployment/web"}, Count: 1}
	in = planInputs(t, pol, map[string]*argocd.Application{"c1": drifted, "r1": appAt(t, in, "r1", p1, argocd.HealthHealthy)}, p1, p2)
	in.DriftAfter = 0 // Drifted at once
	out, err := Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	c := out.Course
	if c == nil || c.Status.Wave != "canary" || c.Status.Waves[0].Healthy != 0 || c.Status.Waves[0].Failed != 0 || len(c.Passed) != 0 {
		t.Fatalf("course %+v", c)
	}
	if c.Status.State != v1.RolloutProgressing {
		t.Errorf("the roll-out is %s, want Progressing: drift does not fail it", c.Status.State)
	}
	f := Fold(in, out, make([]fleet.WriteResult, len(out.Decisions)), "prod")
	if f.Clusters.Drifted != 1 || slices.Contains(f.HealthyClusters, "c1") || f.Ready.Reason != v1.ReasonDrifted {
		t.Errorf("counts %+v, healthy %v, Ready %s", f.Clusters, f.HealthyClusters, f.Ready.Reason)
	}
	if StandingOf(fleet.Drifted, true) != Updating {
		t.Errorf("a drifted cluster stands %v, want Updating", StandingOf(fleet.Drifted, true))
	}
}
