package fleet

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

const rev = "sha256:3f2a1c0000000000000000000000000000000000000000000000000000000000"
const oldRev = "sha256:0ld0000000000000000000000000000000000000000000000000000000000000"

var anyProject = argocd.Project{Name: "edge", Spec: argocd.ProjectSpec{
	SourceNamespaces: []string{"platform"},
	Destinations:     []argocd.Destination{{Server: "*", Namespace: "*"}},
}}

func request(clusters ...Cluster) Request {
	return Request{
		ServingNamespace: "platform", ServingName: "podinfo-edge", ArgoCDNamespace: "argocd",
		Preparation: "podinfo-edge-3f2a1c", RepoURL: "oci://registry:5000/platform/podinfo-edge", Revision: rev,
		TargetNamespace: "podinfo", Project: anyProject, Clusters: clusters,
		Applications: map[string]Observed{},
	}
}

func ready(name string) Cluster {
	return Cluster{Name: name, Server: "https://" + name + ":6443", Ready: true}
}

func status(sync, health, revision string) argocd.Status {
	var st argocd.Status
	st.Sync.Status, st.Sync.Revision, st.Health.Status = sync, revision, health
	return st
}

func appName(cluster string) string { return ApplicationName("platform", "podinfo-edge", cluster) }

func TestDecide(t *testing.T) {
	healthy := Observed{Ours: true, UpToDate: true, Status: status("Synced", "Healthy", rev)}
	cases := []struct {
		name    string
		req     func() Request
		cluster string
		state   State
		reason  string
		msg     string
		write   bool
		remove  bool
	}{
		{"a new cluster gets its Application and progresses", func() Request { return request(ready("a")) }, "a", Progressing, v1.ReasonProgressing, "creating Application", true, false},
		{"synced and healthy at the digest is healthy, with no write", func() Request {
			r := request(ready("a"))
			r.Applications[appName("a")] = healthy
			return r
		}, "a", Healthy, "", "", false, false},
		{"synced and healthy at an older digest is a stale green: progressing", func() Request {
			r := request(ready("a"))
			r.Applications[appName("a")] = Observed{Ours: true, UpToDate: true, Status: status("Synced", "Healthy", oldRev)}
			return r
		}, "a", Progressing, v1.ReasonProgressing, "at 0ld000000000", false, false},
		{"an Application that differs from the plan is updated", func() Request {
			r := request(ready("a"))
			r.Applications[appName("a")] = Observed{Ours: true, UpToDate: false, Status: status("Synced", "Healthy", oldRev)}
			return r
		}, "a", Progressing, v1.ReasonProgressing, "updating Application", true, false},
		{"Degraded at the digest is degraded", func() Request {
			r := request(ready("a"))
			st := status("Synced", "Degraded", rev)
			st.Health.Message = "Deployment podinfo exceeded its progress deadline"
			r.Applications[appName("a")] = Observed{Ours: true, UpToDate: true, Status: st}
			return r
		}, "a", Degraded, v1.ReasonDegraded, "exceeded its progress deadline", false, false},
		{"a failed sync operation is degraded", func() Request {
			r := request(ready("a"))
			st := status("OutOfSync", "Missing", "")
			st.OperationState = &argocd.OperationState{Phase: "Failed", Message: "one or more objects failed to apply"}
			r.Applications[appName("a")] = Observed{Ours: true, UpToDate: true, Status: st}
			return r
		}, "a", Degraded, v1.ReasonDegraded, "sync failed: one or more objects failed to apply", false, false},
		{"InvalidSpecError from Argo CD is Rejected with its message", func() Request {
			r := request(ready("a"))
			st := status("Unknown", "Unknown", "")
			st.Conditions = []argocd.Condition{{Type: "InvalidSpecError", Message: "application destination server 'x' and namespace 'podinfo' do not match any of the allowed destinations in project 'edge'"}}
			r.Applications[appName("a")] = Observed{Ours: true, UpToDate: true, Status: st}
			return r
		}, "a", Held, v1.ReasonRejected, "do not match any of the allowed destinations in project 'edge'", false, false},
		{"a destination the project does not permit is Rejected before any Application exists", func() Request {
			r := request(ready("a"))
			r.Project.Spec.Destinations = []argocd.Destination{{Server: "*", Namespace: "team-*"}}
			return r
		}, "a", Held, v1.ReasonRejected, "application destination server 'https://a:6443' and namespace 'podinfo' do not match any of the allowed destinations in project 'edge'", false, true},
		{"a Cluster that is not Ready is held and its Application left as it is", func() Request {
			c := ready("a")
			c.Ready, c.NotReadyMessage = false, "Unreachable: dial tcp: connection refused"
			r := request(c)
			r.Applications[appName("a")] = Observed{Ours: true, UpToDate: false, Status: status("Synced", "Healthy", oldRev)}
			return r
		}, "a", Held, v1.ReasonClusterNotReady, "Cluster a is not Ready: Unreachable", false, false},
		{"an Application of that name that is not Kokumi's is never touched", func() Request {
			r := request(ready("a"))
			r.Applications[appName("a")] = Observed{Ours: false}
			return r
		}, "a", Held, v1.ReasonOptInRequired, "is not Kokumi's", false, false},
		{"vendored images on another cluster are RegistryUnreachable", func() Request {
			r := request(ready("a"))
			r.ImagesInBundledRegistry = true
			return r
		}, "a", Held, v1.ReasonRegistryUnreachable, "bundled registry", false, true},
		{"vendored images deploy to the cluster Kokumi runs in", func() Request {
			r := request(Cluster{Name: "in-cluster", Server: v1.InClusterServer, Ready: true})
			r.ImagesInBundledRegistry = true
			return r
		}, "in-cluster", Progressing, v1.ReasonProgressing, "creating Application", true, false},
		{"the second Cluster on one server is held with ClusterConflict", func() Request {
			b := ready("b")
			b.Server = "https://a:6443"
			return request(b, ready("a"))
		}, "b", Held, v1.ReasonClusterConflict, "same server https://a:6443 as Cluster a, which sorts first by name", false, true},
		{"of two Clusters on one server the first by name deploys, whatever the order given", func() Request {
			b := ready("b")
			b.Server = "https://a:6443"
			return request(b, ready("a"))
		}, "a", Progressing, v1.ReasonProgressing, "creating Application", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *Decision
			ds := Decide(tc.req())
			for i := range ds {
				if ds[i].Cluster == tc.cluster {
					got = &ds[i]
				}
			}
			if got == nil {
				t.Fatalf("no decision for %s in %+v", tc.cluster, ds)
			}
			if got.State != tc.state || got.Reason != tc.reason || got.Write != tc.write || got.Remove != tc.remove {
				t.Errorf("got state %v reason %q write %v remove %v; want %v %q %v %v (message %q)",
					got.State, got.Reason, got.Write, got.Remove, tc.state, tc.reason, tc.write, tc.remove, got.Message)
			}
			if !strings.Contains(got.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", got.Message, tc.msg)
			}
		})
	}
}

func TestDecideBuildsTheApplicationFromThePreparationAndCluster(t *testing.T) {
	d := Decide(request(ready("edge-1")))[0]
	s := d.Spec
	if s.Name != "platform.podinfo-edge.edge-1" || s.Namespace != "argocd" || s.Project != "edge" ||
		s.RepoURL != "oci://registry:5000/platform/podinfo-edge" || s.Revision != rev ||
		s.Server != "https://edge-1:6443" || s.TargetNamespace != "podinfo" || s.Cluster != "edge-1" {
		t.Errorf("spec %+v", s)
	}
}

func TestApplicationNameIsStableUniqueAndShort(t *testing.T) {
	if a, b := ApplicationName("a-b", "c", "d"), ApplicationName("a", "b-c", "d"); a == b {
		t.Errorf("names collide: %s", a)
	}
	if a, b := ApplicationName("ns", "x.y", "z"), ApplicationName("ns", "x", "y.z"); a == b {
		t.Errorf("names with dots collide: %s", a)
	}
	long := strings.Repeat("c", 250)
	n1, n2 := ApplicationName("ns", "serving", long), ApplicationName("ns", "serving", long+"x")
	if len(n1) > MaxNameLength || len(n2) > MaxNameLength || n1 == n2 {
		t.Errorf("long names %d %d equal=%v", len(n1), len(n2), n1 == n2)
	}
	if n1 != ApplicationName("ns", "serving", long) {
		t.Error("name is not stable")
	}
}

func TestLeavingClustersLoseTheirApplications(t *testing.T) {
	req := request(ready("a"), ready("b"))
	got := Leaving(req.ServingNamespace, req.ServingName, req.Clusters, []string{appName("a"), appName("c"), appName("b")})
	if len(got) != 1 || got[0] != appName("c") {
		t.Errorf("leaving %v", got)
	}
}

func decisions(n int, state func(i int) (State, string)) []Decision {
	ds := make([]Decision, n)
	for i := range ds {
		s, r := state(i)
		ds[i] = Decision{Cluster: fmt.Sprintf("edge-%05d", i), Application: fmt.Sprintf("app-%05d", i), State: s, Reason: r}
	}
	return ds
}

func TestFold(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	cases := []struct {
		name         string
		ds           []Decision
		counts       v1.ClusterCounts
		status       metav1.ConditionStatus
		reason, msg  string
		firstTargets []string
	}{
		{"every cluster healthy is Deployed and lists no target", decisions(2, func(int) (State, string) { return Healthy, "" }),
			v1.ClusterCounts{Selected: 2, Healthy: 2}, metav1.ConditionTrue, v1.ReasonDeployed, "Deployed Preparation p to edge-00000, edge-00001", nil},
		{"a cluster not Ready does not hold the Serving back, and is named", decisions(3, func(i int) (State, string) {
			if i == 2 {
				return Held, v1.ReasonClusterNotReady
			}
			return Healthy, ""
		}), v1.ClusterCounts{Selected: 3, Healthy: 2, Held: 1}, metav1.ConditionTrue, v1.ReasonDeployed,
			"Deployed Preparation p to edge-00000, edge-00001; not ready: edge-00002", []string{"edge-00002"}},
		{"no Cluster Ready fails the deployment", decisions(2, func(int) (State, string) { return Held, v1.ReasonClusterNotReady }),
			v1.ClusterCounts{Selected: 2, Held: 2}, metav1.ConditionFalse, v1.ReasonDeploymentFailed, "No Cluster of Environment edge is Ready: edge-00000, edge-00001", nil},
		{"a degraded cluster fails the deployment", decisions(2, func(i int) (State, string) {
			if i == 1 {
				return Degraded, v1.ReasonDegraded
			}
			return Healthy, ""
		}), v1.ClusterCounts{Selected: 2, Healthy: 1, Degraded: 1}, metav1.ConditionFalse, v1.ReasonDeploymentFailed,
			"Preparation p failed on edge-00001 (Degraded); healthy on edge-00000", []string{"edge-00001"}},
		{"a cluster held for another reason fails the deployment", decisions(2, func(i int) (State, string) {
			if i == 0 {
				return Held, v1.ReasonRejected
			}
			return Healthy, ""
		}), v1.ClusterCounts{Selected: 2, Healthy: 1, Held: 1}, metav1.ConditionFalse, v1.ReasonDeploymentFailed,
			"Preparation p failed on edge-00000 (Rejected)", nil},
		{"a progressing cluster keeps the Serving Progressing", decisions(2, func(i int) (State, string) {
			if i == 0 {
				return Progressing, v1.ReasonProgressing
			}
			return Healthy, ""
		}), v1.ClusterCounts{Selected: 2, Healthy: 1, Progressing: 1}, metav1.ConditionFalse, v1.ReasonProgressing,
			"Deploying Preparation p: healthy on 1 of 2 Ready clusters; waiting for edge-00000", nil},
		{"targets list held, then degraded, then progressing, by name", []Decision{
			{Cluster: "p1", State: Progressing, Reason: v1.ReasonProgressing},
			{Cluster: "d1", State: Degraded, Reason: v1.ReasonDegraded},
			{Cluster: "h2", State: Held, Reason: v1.ReasonClusterNotReady},
			{Cluster: "h1", State: Held, Reason: v1.ReasonRejected},
			{Cluster: "ok", State: Healthy},
		}, v1.ClusterCounts{Selected: 5, Healthy: 1, Progressing: 1, Degraded: 1, Held: 2}, metav1.ConditionFalse, v1.ReasonDeploymentFailed,
			"", []string{"h1", "h2", "d1", "p1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := Fold("p", "edge", tc.ds, nil, now)
			if s.Clusters != tc.counts {
				t.Errorf("counts %+v, want %+v", s.Clusters, tc.counts)
			}
			if s.Ready.Status != tc.status || s.Ready.Reason != tc.reason || !strings.Contains(s.Ready.Message, tc.msg) {
				t.Errorf("Ready %s %s %q, want %s %s containing %q", s.Ready.Status, s.Ready.Reason, s.Ready.Message, tc.status, tc.reason, tc.msg)
			}
			for i, want := range tc.firstTargets {
				if i >= len(s.Targets) || s.Targets[i].Cluster != want {
					t.Errorf("targets[%d] = %v, want %s", i, s.Targets, want)
				}
			}
		})
	}
}

func TestFoldCapsTargetsAt64AndCountsTheRest(t *testing.T) {
	ds := decisions(200, func(i int) (State, string) {
		switch i % 4 {
		case 0:
			return Healthy, ""
		case 1:
			return Progressing, v1.ReasonProgressing
		case 2:
			return Degraded, v1.ReasonDegraded
		}
		return Held, v1.ReasonClusterNotReady
	})
	s := Fold("p", "edge", ds, nil, metav1.Now())
	if len(s.Targets) != v1.MaxTargets || s.Omitted != 150-64 {
		t.Fatalf("targets %d omitted %d", len(s.Targets), s.Omitted)
	}
	// 50 held come first, then 14 degraded.
	if s.Targets[0].Cluster != "edge-00003" || s.Targets[49].Conditions[0].Type != "Held" || s.Targets[50].Conditions[0].Type != "Degraded" {
		t.Errorf("order: first %s, 50th %s", s.Targets[0].Cluster, s.Targets[50].Conditions[0].Type)
	}
}

func TestReadyMessageAt2000ClustersStaysShort(t *testing.T) {
	ds := decisions(2000, func(i int) (State, string) {
		if i == 1999 {
			return Held, v1.ReasonClusterNotReady
		}
		return Healthy, ""
	})
	s := Fold("podinfo-edge-3f2a1c", "edge", ds, nil, metav1.Now())
	want := "Deployed Preparation podinfo-edge-3f2a1c to edge-00000, edge-00001, edge-00002, edge-00003, edge-00004 … and 1,994 more; not ready: edge-01999"
	if s.Ready.Message != want {
		t.Errorf("message\n%q\nwant\n%q", s.Ready.Message, want)
	}
}

func TestFoldKeepsSinceWhileTheReasonStays(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	prev := []v1.Target{
		{Cluster: "a", Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady}}, Since: then},
		{Cluster: "b", Conditions: []v1.TargetCondition{{Type: "Progressing", Reason: v1.ReasonProgressing}}, Since: then},
	}
	ds := []Decision{{Cluster: "a", State: Held, Reason: v1.ReasonClusterNotReady}, {Cluster: "b", State: Degraded, Reason: v1.ReasonDegraded}}
	s := Fold("p", "edge", ds, prev, now)
	if !s.Targets[0].Since.Equal(&then) || !s.Targets[1].Since.Equal(&now) {
		t.Errorf("since %v %v", s.Targets[0].Since, s.Targets[1].Since)
	}
}

func TestApplyDeadlineFailsClustersProgressingTooLong(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	target := func(cluster, reason string, since time.Duration) v1.Target {
		return v1.Target{Cluster: cluster, Conditions: []v1.TargetCondition{{Type: Progressing.String(), Reason: reason}}, Since: metav1.NewTime(now.Add(-since))}
	}
	progressing := func(cluster string) Decision {
		return Decision{Cluster: cluster, State: Progressing, Reason: v1.ReasonProgressing, Message: "sync OutOfSync, health Missing"}
	}
	ds := []Decision{progressing("new"), progressing("slow"), progressing("stuck"), progressing("still-stuck"), {Cluster: "fine", State: Healthy}}
	prev := []v1.Target{
		target("slow", v1.ReasonProgressing, 4*time.Minute),
		target("stuck", v1.ReasonProgressing, 11*time.Minute),
		target("still-stuck", v1.ReasonProgressDeadlineExceeded, time.Minute),
	}
	next := ApplyDeadline(ds, prev, now, 10*time.Minute)
	want := map[string]string{"new": v1.ReasonProgressing, "slow": v1.ReasonProgressing, "stuck": v1.ReasonProgressDeadlineExceeded,
		"still-stuck": v1.ReasonProgressDeadlineExceeded, "fine": ""}
	for _, d := range ds {
		if d.Reason != want[d.Cluster] {
			t.Errorf("%s: reason %q, want %q", d.Cluster, d.Reason, want[d.Cluster])
		}
		if d.Reason == v1.ReasonProgressDeadlineExceeded && (d.State != Degraded || !strings.Contains(d.Message, "after the progress deadline of 10m0s: sync OutOfSync")) {
			t.Errorf("%s: %v %q", d.Cluster, d.State, d.Message)
		}
	}
	if next != 6*time.Minute {
		t.Errorf("next deadline in %v, want 6m (slow's)", next)
	}
	if ApplyDeadline([]Decision{progressing("x")}, nil, now, 0) != 0 {
		t.Error("a deadline of 0 waits forever")
	}
	s := Fold("p", "edge", ds, prev, now)
	if s.Ready.Reason != v1.ReasonDeploymentFailed || !strings.Contains(s.Ready.Message, "stuck (ProgressDeadlineExceeded)") {
		t.Errorf("Ready %+v", s.Ready)
	}
}

func TestAnArgoCDErrorFailsTheClusterWithArgoCDsMessage(t *testing.T) {
	req := Request{ServingNamespace: "team", ServingName: "app", ArgoCDNamespace: "argocd", Preparation: "p", Revision: "sha256:abc",
		Clusters: []Cluster{{Name: "a", Server: "https://a:6443", Ready: true}}}
	req.Project.Spec.Destinations = []argocd.Destination{{Server: "*", Namespace: "*"}}
	st := argocd.Status{Conditions: []argocd.Condition{{Type: "ComparisonError", Message: "failed to load target state: dial tcp: connection refused"}}}
	st.Sync.Status = "Unknown"
	req.Applications = map[string]Observed{ApplicationName("team", "app", "a"): {Ours: true, UpToDate: true, Status: st}}
	d := Decide(req)[0]
	if d.State != Degraded || d.Reason != v1.ReasonArgoCDError || d.Message != "Argo CD reports ComparisonError: failed to load target state: dial tcp: connection refused" {
		t.Errorf("decision %+v", d)
	}
}

func TestAfterWritesFoldsEachWritesResultWithoutEditingThePlan(t *testing.T) {
	plan := []Decision{
		{Cluster: "a", Application: "ns.s.a", Write: true, State: Progressing, Reason: v1.ReasonProgressing, Message: "creating Application"},
		{Cluster: "b", Application: "ns.s.b", Write: true, State: Progressing, Reason: v1.ReasonProgressing, Message: "creating Application"},
		{Cluster: "c", Application: "ns.s.c", Write: true, State: Progressing, Reason: v1.ReasonProgressing, Message: "updating Application"},
		{Cluster: "d", Application: "ns.s.d", Remove: true, State: Held, Reason: v1.ReasonClusterConflict},
	}
	got := AfterWrites(plan, []WriteResult{{}, {NotOurs: true}, {Err: errors.New("etcd is slow")}, {Err: errors.New("gone")}}, "argocd")
	if got[0].Reason != v1.ReasonProgressing || got[0].Message != "creating Application" {
		t.Errorf("a write that went through: %+v", got[0])
	}
	if got[1].State != Held || got[1].Reason != v1.ReasonOptInRequired || got[1].Write || !strings.Contains(got[1].Message, "argocd/ns.s.b") {
		t.Errorf("someone else's Application: %+v", got[1])
	}
	if got[2].State != Progressing || got[2].Reason != v1.ReasonApplicationWriteFailed || !strings.Contains(got[2].Message, "etcd is slow") {
		t.Errorf("a failed write: %+v", got[2])
	}
	if got[3].Reason != v1.ReasonClusterConflict {
		t.Errorf("a failed delete keeps its decision: %+v", got[3])
	}
	if plan[1].Reason != v1.ReasonProgressing || !plan[1].Write || plan[2].Reason != v1.ReasonProgressing {
		t.Errorf("the plan was edited: %+v", plan)
	}
}

// The progress deadline and the drift threshold reach every cluster of a fleet larger than
// status.targets' cap: the clusters Fold leaves out of Targets come back (with their times) as
// Unlisted, which the caller passes again as previous.
func TestTheProgressDeadlineAndTheDriftThresholdReachClustersPastTheCap(t *testing.T) {
	const n = v1.MaxTargets + 36
	limit := 10 * time.Minute
	for _, tc := range []struct {
		reason string
		apply  func([]Decision, []v1.Target, metav1.Time, time.Duration) time.Duration
		state  State
		past   string
	}{
		{v1.ReasonProgressing, ApplyDeadline, Degraded, v1.ReasonProgressDeadlineExceeded},
		{v1.ReasonOutOfSync, ApplyDrift, Drifted, v1.ReasonDrifted},
	} {
		decide := func() []Decision {
			ds := make([]Decision, n)
			for i := range ds {
				ds[i] = Decision{Cluster: fmt.Sprintf("c%03d", i), State: Progressing, Reason: tc.reason, Revision: oldRev}
			}
			return ds
		}
		start := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
		first := decide()
		tc.apply(first, nil, start, limit)
		sum := Fold("p", "edge", first, nil, start)
		if len(sum.Targets) != v1.MaxTargets || len(sum.Unlisted) != n-v1.MaxTargets || sum.Omitted != n-v1.MaxTargets {
			t.Fatalf("%s: %d listed, %d unlisted, %d omitted", tc.reason, len(sum.Targets), len(sum.Unlisted), sum.Omitted)
		}
		if got := fmt.Sprint(sum.Running); got != fmt.Sprint([]v1.RevisionCount{{Revision: oldRev, Clusters: n}}) {
			t.Errorf("running %s", got)
		}
		previous := append(append([]v1.Target{}, sum.Targets...), sum.Unlisted...)
		later := decide()
		tc.apply(later, previous, metav1.NewTime(start.Add(limit+time.Second)), limit)
		for _, d := range later {
			if d.State != tc.state || d.Reason != tc.past {
				t.Fatalf("cluster %s is %s (%s) past the limit, want %s (%s)", d.Cluster, d.State, d.Reason, tc.state, tc.past)
			}
		}
	}
}

// Running lists at most v1.MaxRunning revisions, the most-run first, and counts the rest.
func TestRunningIsCappedMostRunFirst(t *testing.T) {
	var ds []Decision
	for i := range v1.MaxRunning + 3 {
		for range i + 1 {
			ds = append(ds, Decision{Cluster: fmt.Sprint(len(ds)), State: Healthy, Revision: fmt.Sprintf("sha256:%02d", i)})
		}
	}
	sum := Fold("p", "edge", ds, nil, metav1.Now())
	if len(sum.Running) != v1.MaxRunning || sum.RunningOmitted != 3 || sum.Running[0].Revision != fmt.Sprintf("sha256:%02d", v1.MaxRunning+2) {
		t.Errorf("running %+v, %d omitted", sum.Running, sum.RunningOmitted)
	}
}
