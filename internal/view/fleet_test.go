package view

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
)

func fleetCluster(name string, ready bool, lbls map[string]string) v1.Cluster {
	c := v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	status := metav1.ConditionTrue
	if !ready {
		status = metav1.ConditionFalse
	}
	c.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: status, Reason: "Connected"}}
	return c
}

func fleetApp(serving, cluster, revision, health, sync string) argocd.Application {
	a := testApp(cluster, health, sync)
	a.Name = serving + "-" + cluster
	a.Status.Sync.Revision = revision
	return a
}

func fleetPrep(name, digest string, created time.Time) v1.Preparation {
	p := v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", CreationTimestamp: metav1.NewTime(created)}}
	p.Spec.Artifact.Digest = digest
	return p
}

// fixtureFleet is an Environment "prod" of namespace shop selecting the clusters labelled
// env=prod (a, b, c, d; e is another Environment's), where the Order web rolls out web-2 in waves
// (a runs it, b waits and runs web-1, c drifted, d is not Ready) and the Order api deploys
// api-1, which only a runs so far.
func fixtureFleet() ([]v1.Cluster, []FleetEnvironment, time.Time) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	prod := map[string]string{"env": "prod", "region": "eu"}
	clusters := []v1.Cluster{
		fleetCluster("d", false, prod),
		fleetCluster("a", true, prod),
		fleetCluster("b", true, map[string]string{"env": "prod", "region": "us"}),
		fleetCluster("c", true, prod),
		fleetCluster("e", true, map[string]string{"env": "staging"}),
	}
	env := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prod"}}
	env.Spec.ClusterSelector = metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	web := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	web.Spec.PreparationName = "web-2"
	web.Status.Revision = "sha256:2222"
	web.Status.Targets = []v1.Target{
		{Cluster: "b", Revision: "sha256:1111", Conditions: []v1.TargetCondition{{Type: "Progressing", Reason: v1.ReasonWaiting, Message: "wave rest has not started"}}},
		{Cluster: "c", Revision: "sha256:2222", Conditions: []v1.TargetCondition{{Type: fleet.Drifted.String(), Reason: "OutOfSync", Message: "Deployment/web changed on the cluster"}}},
	}
	api := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api"}}
	api.Spec.PreparationName = "api-1"
	api.Status.Revision = "sha256:aaaa"
	envs := []FleetEnvironment{{Environment: env, Servings: []FleetServing{
		{Serving: web, Preparations: []v1.Preparation{fleetPrep("web-1", "sha256:1111", created), fleetPrep("web-2", "sha256:2222", created.Add(time.Hour))},
			Applications: []argocd.Application{
				fleetApp("web", "a", "sha256:2222", "Healthy", "Synced"),
				fleetApp("web", "b", "sha256:1111", "Healthy", "Synced"),
				fleetApp("web", "c", "sha256:2222", "Healthy", "OutOfSync"),
				fleetApp("web", "d", "sha256:2222", "Healthy", "Synced"),
			}},
		{Serving: api, Preparations: []v1.Preparation{fleetPrep("api-1", "sha256:aaaa", created)},
			Applications: []argocd.Application{fleetApp("api", "a", "sha256:aaaa", "Healthy", "Synced")}},
	}}}
	return clusters, envs, created
}

func cellStates(p FleetPage) string {
	out := ""
	for _, r := range p.Rows {
		out += r.Cluster + ":"
		for _, c := range r.Cells {
			if c == nil {
				out += "-,"
				continue
			}
			out += c.State + "/" + c.Preparation + ","
		}
		out += " "
	}
	return out
}

func TestFleetCellsSayWhatEachClusterRunsAndHowItStands(t *testing.T) {
	clusters, envs, created := fixtureFleet()
	p, err := FleetOf(clusters, envs, "", FleetQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(p.Environments) != "[shop/prod]" || len(p.Columns) != 2 || p.Columns[0].Order != "api" || p.Columns[1].Order != "web" || p.Columns[1].Preparation != "web-2" {
		t.Fatalf("environments %v, columns %+v", p.Environments, p.Columns)
	}
	// Columns api, web; clusters by name, e (another Environment's) left out; d not Ready is held.
	want := "a:Healthy/api-1,Healthy/web-2, b:Progressing/,Waiting/web-1, c:Progressing/,Drifted/web-2, d:Held/,Held/web-2, "
	if got := cellStates(p); got != want {
		t.Fatalf("cells\n got %s\nwant %s", got, want)
	}
	web := func(row int) *FleetCell { return p.Rows[row].Cells[1] }
	if !web(0).Target || web(1).Target || !web(2).Target {
		t.Errorf("targets a %v, b %v, c %v: only the clusters at web-2's digest run the Serving's target", web(0).Target, web(1).Target, web(2).Target)
	}
	if web(1).Created == nil || !web(1).Created.Equal(created) || web(0).Created == nil || !web(0).Created.Equal(created.Add(time.Hour)) {
		t.Errorf("the release's age: b %v, a %v", web(1).Created, web(0).Created)
	}
	if web(2).Reason != "OutOfSync" || web(2).Message != "Deployment/web changed on the cluster" || web(3).Reason != v1.ReasonClusterNotReady {
		t.Errorf("reasons: c %+v, d %+v", web(2), web(3))
	}
	if p.Rows[3].Ready || !p.Rows[0].Ready {
		t.Errorf("readiness of a %v, d %v", p.Rows[0].Ready, p.Rows[3].Ready)
	}
	counts := map[string]int{"Held": 2, "Degraded": 0, "Drifted": 1, "Waiting": 1, "Progressing": 2, "Healthy": 2}
	if fmt.Sprint(p.Counts) != fmt.Sprint(counts) || p.Clusters != 4 || p.RowsTotal != 4 || p.Next != "" {
		t.Errorf("counts %v, clusters %d, total %d, next %q", p.Counts, p.Clusters, p.RowsTotal, p.Next)
	}
}

func TestFleetFiltersByLabelOrderAndState(t *testing.T) {
	clusters, envs, _ := fixtureFleet()
	for _, tc := range []struct {
		q    FleetQuery
		want string
	}{
		{FleetQuery{Selector: "region=us"}, "b:Progressing/,Waiting/web-1, "},
		{FleetQuery{Order: "shop/web"}, "a:Healthy/web-2, b:Waiting/web-1, c:Drifted/web-2, d:Held/web-2, "},
		{FleetQuery{Order: "web", State: "Drifted"}, "c:Drifted/web-2, "},
		{FleetQuery{State: "Healthy", Selector: "region!=us"}, "a:Healthy/api-1,Healthy/web-2, "},
		{FleetQuery{State: "Degraded"}, ""},
	} {
		p, err := FleetOf(clusters, envs, "", tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := cellStates(p); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.q, got, tc.want)
		}
	}
	p, _ := FleetOf(clusters, envs, "", FleetQuery{Order: "web", State: "Drifted"})
	if p.Counts["Drifted"] != 1 || p.Counts["Healthy"] != 1 || p.Counts["Held"] != 1 || p.RowsTotal != 1 || p.Clusters != 4 {
		t.Errorf("the counts are those of the Order's cells before the state filter: %v, total %d", p.Counts, p.RowsTotal)
	}
}

func TestFleetPagesByClusterName(t *testing.T) {
	clusters, envs, _ := fixtureFleet()
	var got []string
	q := FleetQuery{Limit: 3}
	for pages := 0; ; pages++ {
		p, err := FleetOf(clusters, envs, "", q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			got = append(got, r.Cluster)
		}
		if p.RowsTotal != 4 || len(p.Rows) > 3 || pages > 2 {
			t.Fatalf("page %d: %d rows of %d", pages, len(p.Rows), p.RowsTotal)
		}
		if p.Next == "" {
			break
		}
		if p.RowsOmitted != 1 {
			t.Errorf("first page omits %d", p.RowsOmitted)
		}
		q.After = p.Next
	}
	if fmt.Sprint(got) != "[a b c d]" {
		t.Errorf("pages %v", got)
	}
}

func TestFleetQueryRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct{ query, want string }{
		{"state=Broken", "use one of Held, Degraded, Drifted, Waiting, Progressing, Healthy"},
		{"selector=a%3D%3D%3Db", "write it as kubectl's -l takes it"},
		{"limit=0", "from 1 to 1000"},
		{"limit=1001", "from 1 to 1000"},
	} {
		v, _ := url.ParseQuery(tc.query)
		if _, err := FleetQueryOf(v); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.query, err, tc.want)
		}
	}
	v, _ := url.ParseQuery("selector=region%3Deu&order=web&state=Drifted&after=b&limit=5")
	q, err := FleetQueryOf(v)
	if err != nil || q != (FleetQuery{Selector: "region=eu", Order: "web", State: "Drifted", After: "b", Limit: 5}) {
		t.Errorf("%+v, %v", q, err)
	}
}

// BenchmarkFleetFirstPage builds the first page of the fleet view of 10,000 clusters × 3
// Orders, every cluster with an Application of each, a few hundred of them not healthy.
func BenchmarkFleetFirstPage(b *testing.B) {
	const n, orders = 10000, 3
	clusters := make([]v1.Cluster, n)
	for i := range clusters {
		clusters[i] = fleetCluster(fmt.Sprintf("cluster-%05d", i), i%500 != 7, map[string]string{"env": "prod"})
	}
	env := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prod"}}
	env.Spec.ClusterSelector = metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	fe := FleetEnvironment{Environment: env}
	for o := range orders {
		name := fmt.Sprintf("order-%d", o)
		sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
		sv.Spec.PreparationName, sv.Status.Revision = name+"-2", "sha256:2"
		fs := FleetServing{Serving: sv, Preparations: []v1.Preparation{fleetPrep(name+"-1", "sha256:1", time.Now()), fleetPrep(name+"-2", "sha256:2", time.Now())}}
		for i := range n {
			rev, health := "sha256:2", "Healthy"
			if i%100 == o {
				rev, health = "sha256:1", "Progressing"
				sv.Status.Targets = append(sv.Status.Targets, v1.Target{Cluster: clusters[i].Name, Conditions: []v1.TargetCondition{{Type: "Progressing", Reason: v1.ReasonWaiting}}})
			}
			fs.Applications = append(fs.Applications, fleetApp(name, clusters[i].Name, rev, health, "Synced"))
		}
		fe.Servings = append(fe.Servings, fs)
	}
	b.ResetTimer()
	for b.Loop() {
		p, err := FleetOf(clusters, []FleetEnvironment{fe}, "", FleetQuery{})
		if err != nil || len(p.Rows) != DefaultFleetLimit || p.Clusters != n {
			b.Fatalf("%d rows of %d clusters: %v", len(p.Rows), p.Clusters, err)
		}
	}
}
