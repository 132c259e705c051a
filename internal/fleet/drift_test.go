package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// deployed is what Argo CD reports of an Application whose last deployment was of revision
// deployedRev (status.history), now sync/revision, with outOfSync objects named in
// status.resources.
func deployed(sync, revision, deployedRev string, outOfSync ...string) argocd.Status {
	st := status(sync, argocd.HealthHealthy, revision)
	st.LastDeployed = deployedRev
	if len(outOfSync) > 0 {
		st.OutOfSync = &argocd.OutOfSync{Names: outOfSync, Count: len(outOfSync)}
	}
	return st
}

// The rule of drift: Argo CD deployed the revision and reports it out of sync since, with no
// operation running, or synced at another revision.
func TestDrifting(t *testing.T) {
	running := deployed(argocd.SyncOutOfSync, rev, rev)
	running.OperationState = &argocd.OperationState{Phase: argocd.OperationRunning}
	running.OperationState.Operation.Sync.Revision = rev
	succeeded := status(argocd.SyncOutOfSync, argocd.HealthHealthy, rev)
	succeeded.OperationState = &argocd.OperationState{Phase: argocd.OperationSucceeded}
	succeeded.OperationState.Operation.Sync.Revision = rev
	cases := []struct {
		name   string
		st     argocd.Status
		state  State
		reason string
	}{
		{"a first roll-out not synced yet is not drift", deployed(argocd.SyncOutOfSync, rev, ""), Progressing, v1.ReasonProgressing},
		{"a roll-out over an older release not synced yet is not drift", deployed(argocd.SyncOutOfSync, rev, oldRev), Progressing, v1.ReasonProgressing},
		{"the older release still reported synced while the new one is not deployed is not drift", deployed(argocd.SyncSynced, oldRev, oldRev), Progressing, v1.ReasonProgressing},
		{"out of sync while Argo CD syncs is not drift", running, Progressing, v1.ReasonSelfHealing},
		{"out of sync at the revision deployed is drift", deployed(argocd.SyncOutOfSync, rev, rev, "Deployment/web"), Progressing, v1.ReasonOutOfSync},
		{"out of sync after a sync operation that succeeded at the revision is drift", succeeded, Progressing, v1.ReasonOutOfSync},
		{"synced at another revision after the revision was deployed is drift", deployed(argocd.SyncSynced, oldRev, rev), Progressing, v1.ReasonOutOfSync},
		{"synced at the revision deployed is healthy", deployed(argocd.SyncSynced, rev, rev), Healthy, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			state, reason, _ := Observe(tc.st, rev)
			if state != tc.state || reason != tc.reason {
				t.Errorf("%s (%s), want %s (%s)", state, reason, tc.state, tc.reason)
			}
		})
	}
}

// A drifting cluster names at most 10 objects out of sync and counts the rest, becomes Drifted
// past the threshold by the time the last status says it started, stays so, and never reaches
// the progress deadline instead.
func TestADriftingClusterDriftsPastTheThresholdAndNeverPastTheDeadline(t *testing.T) {
	names := make([]string, argocd.MaxOutOfSyncNames)
	for i := range names {
		names[i] = fmt.Sprintf("ConfigMap/cfg-%d", i)
	}
	st := deployed(argocd.SyncOutOfSync, rev, rev, names...)
	st.OutOfSync.Count = 13
	req := request(ready("a"), ready("b"))
	req.Applications[appName("a")] = Observed{Ours: true, UpToDate: true, Status: st}
	req.Applications[appName("b")] = Observed{Ours: true, UpToDate: true, Status: deployed(argocd.SyncSynced, rev, rev)}
	start := metav1.NewTime(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	ds := Decide(req)
	if d := ds[0]; d.State != Progressing || d.Reason != v1.ReasonOutOfSync ||
		!strings.HasSuffix(d.Message, "OutOfSync: ConfigMap/cfg-0, ConfigMap/cfg-1, ConfigMap/cfg-2, ConfigMap/cfg-3, ConfigMap/cfg-4, ConfigMap/cfg-5, ConfigMap/cfg-6, ConfigMap/cfg-7, ConfigMap/cfg-8, ConfigMap/cfg-9 … and 3 more") {
		t.Fatalf("decision %+v", d)
	}
	const deadline, after = time.Minute, 5 * time.Minute
	if next := ApplyTimes(ds, nil, start, deadline, after); next != after || ds[0].State != Progressing {
		t.Fatalf("at first: next %v, %+v", next, ds[0])
	}
	sum := Fold("p", "edge", ds, nil, start)
	if sum.Clusters.Progressing != 1 || sum.Clusters.Healthy != 1 || sum.Targets[0].Conditions[0].Reason != v1.ReasonOutOfSync {
		t.Fatalf("summary %+v", sum)
	}
	// Past the progress deadline, before the threshold: still drifting, not failed.
	ds = Decide(req)
	if next := ApplyTimes(ds, sum.Targets, metav1.NewTime(start.Add(2*time.Minute)), deadline, after); next != 3*time.Minute || ds[0].Reason != v1.ReasonOutOfSync {
		t.Fatalf("past the deadline: next %v, %+v", next, ds[0])
	}
	// Past the threshold: Drifted, counted apart, never healthy, first among the targets but held.
	ds = Decide(req)
	at := metav1.NewTime(start.Add(after))
	ApplyTimes(ds, sum.Targets, at, deadline, after)
	if d := ds[0]; d.State != Drifted || d.Reason != v1.ReasonDrifted || !strings.Contains(d.Message, "drift threshold of 5m0s") || !strings.Contains(d.Message, "ConfigMap/cfg-0") {
		t.Fatalf("past the threshold: %+v", d)
	}
	sum = Fold("p", "edge", ds, sum.Targets, at)
	if sum.Clusters != (v1.ClusterCounts{Selected: 2, Healthy: 1, Drifted: 1}) || fmt.Sprint(sum.HealthyClusters) != "[b]" || fmt.Sprint(sum.DriftedClusters) != "[a]" {
		t.Fatalf("summary %+v", sum)
	}
	if sum.Ready.Status != metav1.ConditionFalse || sum.Ready.Reason != v1.ReasonDrifted || !strings.Contains(sum.Ready.Message, "drifted on a") {
		t.Errorf("Ready %+v", sum.Ready)
	}
	if sum.Targets[0].Conditions[0].Type != "Drifted" || !sum.Targets[0].Since.Equal(&at) {
		t.Errorf("target %+v", sum.Targets[0])
	}
	// Later still: Drifted stays, with its time.
	ds = Decide(req)
	later := metav1.NewTime(start.Add(time.Hour))
	ApplyTimes(ds, sum.Targets, later, deadline, after)
	if sum = Fold("p", "edge", ds, sum.Targets, later); ds[0].State != Drifted || !sum.Targets[0].Since.Equal(&at) {
		t.Errorf("an hour on: %+v, %+v", ds[0], sum.Targets[0])
	}
	// Argo CD reports it synced again: Healthy.
	req.Applications[appName("a")] = Observed{Ours: true, UpToDate: true, Status: deployed(argocd.SyncSynced, rev, rev)}
	ds = Decide(req)
	ApplyTimes(ds, sum.Targets, later, deadline, after)
	if sum = Fold("p", "edge", ds, sum.Targets, later); ds[0].State != Healthy || sum.Ready.Reason != v1.ReasonDeployed {
		t.Errorf("synced again: %+v, Ready %+v", ds[0], sum.Ready)
	}
}

// Drifted clusters are listed after the held and degraded ones and before the progressing ones,
// so that they stay under the cap; a failed cluster keeps the Serving DeploymentFailed and the
// drifted ones are named beside it.
func TestDriftedClustersAreListedBeforeProgressingOnes(t *testing.T) {
	ds := []Decision{
		{Cluster: "p1", State: Progressing, Reason: v1.ReasonProgressing},
		{Cluster: "x1", State: Drifted, Reason: v1.ReasonDrifted},
		{Cluster: "d1", State: Degraded, Reason: v1.ReasonDegraded},
		{Cluster: "h1", State: Held, Reason: v1.ReasonRejected},
	}
	s := Fold("p", "edge", ds, nil, metav1.Now())
	var order []string
	for _, tg := range s.Targets {
		order = append(order, tg.Cluster+"="+tg.Conditions[0].Type)
	}
	if got := strings.Join(order, " "); got != "h1=Held d1=Degraded x1=Drifted p1=Progressing" {
		t.Errorf("targets %s", got)
	}
	if s.Ready.Reason != v1.ReasonDeploymentFailed || !strings.Contains(s.Ready.Message, "; drifted on x1") {
		t.Errorf("Ready %+v", s.Ready)
	}
	if fmt.Sprint(States) != "[Held Degraded Drifted Progressing Healthy]" {
		t.Errorf("states %v", States)
	}
}

// Self-heal's attempts, which Argo CD makes every few seconds while another controller changes
// the objects back, neither start a drift, nor end one or restart its clock; a first roll-out's
// sync is not taken for one.
func TestSelfHealingNeitherStartsNorEndsADrift(t *testing.T) {
	healing := deployed(argocd.SyncOutOfSync, rev, rev, "Deployment/web")
	healing.OperationState = &argocd.OperationState{Phase: argocd.OperationRunning}
	req := request(ready("a"))
	req.Applications[appName("a")] = Observed{Ours: true, UpToDate: true, Status: healing}
	start := metav1.NewTime(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	const deadline, after = time.Minute, 5 * time.Minute
	target := func(reason string, since metav1.Time) []v1.Target {
		return []v1.Target{{Cluster: "a", Conditions: []v1.TargetCondition{{Type: Progressing.String(), Reason: reason}}, Since: since}}
	}
	for _, tc := range []struct {
		name     string
		previous []v1.Target
		at       time.Duration
		state    State
		reason   string
	}{
		{"first seen syncing: not drift", nil, 0, Progressing, v1.ReasonSelfHealing},
		{"syncing long after, never drifting: not drift, nor past the deadline", target(v1.ReasonSelfHealing, start), time.Hour, Progressing, v1.ReasonSelfHealing},
		{"syncing while drifting: still drifting", target(v1.ReasonOutOfSync, start), time.Minute, Progressing, v1.ReasonOutOfSync},
		{"syncing while drifting, past the threshold: Drifted", target(v1.ReasonOutOfSync, start), after, Drifted, v1.ReasonDrifted},
		{"syncing while Drifted: still Drifted", []v1.Target{{Cluster: "a", Conditions: []v1.TargetCondition{{Type: Drifted.String(), Reason: v1.ReasonDrifted}}, Since: start}}, time.Second, Drifted, v1.ReasonDrifted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := Decide(req)
			ApplyTimes(ds, tc.previous, metav1.NewTime(start.Add(tc.at)), deadline, after)
			if ds[0].State != tc.state || ds[0].Reason != tc.reason {
				t.Errorf("%s (%s), want %s (%s)", ds[0].State, ds[0].Reason, tc.state, tc.reason)
			}
		})
	}
}
