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

func testApp(cluster, health, sync string) argocd.Application {
	a := argocd.Application{}
	a.Status.Health.Status = health
	a.Status.Sync.Status, a.Status.Sync.Revision = sync, "sha256:1"
	a.Namespace, a.Name = "argocd", "app-"+cluster
	a.Labels = map[string]string{argocd.LabelCluster: cluster}
	return a
}

func TestServingRowsPutTroubleFirst(t *testing.T) {
	s := &v1.Serving{Status: v1.ServingStatus{Targets: []v1.Target{
		{Cluster: "c-held", Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "down"}}},
		// Held while Argo CD's last word on it was Healthy: a stopped cluster.
		{Cluster: "x-stopped", Application: "app-x-stopped", Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "unreachable"}}},
	}}}
	apps := []argocd.Application{
		testApp("a-healthy", "Healthy", "Synced"),
		testApp("b-progressing", "Progressing", "Synced"),
		testApp("z-degraded", "Degraded", "Synced"),
		testApp("y-outofsync", "Healthy", "OutOfSync"),
		testApp("x-stopped", "Healthy", "Synced"),
	}
	rows := ServingRows(s, apps, "")
	var got []string
	for _, r := range rows {
		got = append(got, r.Cluster)
	}
	want := []string{"c-held", "x-stopped", "z-degraded", "b-progressing", "y-outofsync", "a-healthy"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if rows[0].Reason != v1.ReasonClusterNotReady || rows[0].Link != "" || rows[0].State != "Held" {
		t.Errorf("held row %+v", rows[0])
	}
	if rows[1].State != "Held" || rows[1].Health != "Healthy" || rows[1].Message != "unreachable" {
		t.Errorf("a held cluster does not keep Argo CD's last health beside its reason: %+v", rows[1])
	}
	if rows[2].State != "Degraded" || rows[5].State != "Healthy" {
		t.Errorf("states %q, %q", rows[2].State, rows[5].State)
	}
}

func TestServingRowsAreCapped(t *testing.T) {
	apps := make([]argocd.Application, MaxRows+7)
	for i := range apps {
		apps[i] = testApp(fmt.Sprintf("c-%05d", i), "Healthy", "Synced")
	}
	d := ServingDetailOf(&v1.Serving{}, apps, "https://argocd.example")
	rows := d.Rows
	if len(rows) != MaxRows || d.RowsOmitted != 7 || d.RowsTotal != MaxRows+7 {
		t.Fatalf("%d rows, %d omitted of %d; want %d and 7 of %d", len(rows), d.RowsOmitted, d.RowsTotal, MaxRows, MaxRows+7)
	}
	if rows[0].Link != "https://argocd.example/applications/argocd/app-c-00000" {
		t.Errorf("link %q", rows[0].Link)
	}
}

func TestRowQueryFiltersThenPages(t *testing.T) {
	var rows []ClusterRow
	for i := range 10 {
		state := "Healthy"
		if i%3 == 0 {
			state = "Degraded"
		}
		rows = append(rows, ClusterRow{Cluster: fmt.Sprintf("Edge-%02d", i), State: state})
	}
	for _, c := range []struct {
		query          url.Values
		want           string
		total, omitted int
	}{
		{url.Values{}, "[Edge-00 Edge-01 Edge-02 Edge-03 Edge-04 Edge-05 Edge-06 Edge-07 Edge-08 Edge-09]", 10, 0},
		{url.Values{"q": {"eDGe-0"}, "state": {"Degraded"}}, "[Edge-00 Edge-03 Edge-06 Edge-09]", 4, 0},
		{url.Values{"state": {"Healthy"}, "offset": {"2"}, "limit": {"3"}}, "[Edge-04 Edge-05 Edge-07]", 6, 1},
		{url.Values{"offset": {"20"}}, "[]", 10, 0},
		{url.Values{"limit": {"5000"}}, "[Edge-00 Edge-01 Edge-02 Edge-03 Edge-04 Edge-05 Edge-06 Edge-07 Edge-08 Edge-09]", 10, 0},
	} {
		q, err := RowQueryOf(c.query)
		if err != nil {
			t.Fatalf("%v: %v", c.query, err)
		}
		page, total, omitted := q.page(append([]ClusterRow(nil), rows...))
		var got []string
		for _, r := range page {
			got = append(got, r.Cluster)
		}
		if fmt.Sprint(got) != c.want || total != c.total || omitted != c.omitted {
			t.Errorf("%v: %v (total %d, omitted %d), want %s (total %d, omitted %d)", c.query, got, total, omitted, c.want, c.total, c.omitted)
		}
	}
	for _, bad := range []url.Values{{"state": {"Sad"}}, {"offset": {"-1"}}, {"limit": {"0"}}, {"limit": {"many"}}} {
		if _, err := RowQueryOf(bad); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// BenchmarkServingRows measures the Serving page of a large fleet: every Application read and
// ranked, the table capped at MaxRows.
func BenchmarkServingRows(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		apps := make([]argocd.Application, n)
		for i := range apps {
			health := "Healthy"
			if i%50 == 0 {
				health = "Degraded"
			}
			apps[i] = testApp(fmt.Sprintf("c-%05d", i), health, "Synced")
		}
		s := &v1.Serving{Status: v1.ServingStatus{Targets: []v1.Target{{Cluster: "c-00001", Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady}}}}}}
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			for b.Loop() {
				rows := ServingRows(s, apps, "https://argocd.example")
				if rows[0].Cluster != "c-00001" {
					b.Fatal("the held cluster is not first")
				}
			}
		})
	}
}

// TestARowsStateIsFleetsState checks that a row the Serving's status says nothing of takes the
// state the Serving reconciler would fold (fleet.Observe), not one read again from raw fields.
func TestARowsStateIsFleetsState(t *testing.T) {
	s := &v1.Serving{Status: v1.ServingStatus{Revision: "sha256:1"}}
	missing := testApp("missing", "Missing", "OutOfSync")
	older := testApp("older", "Healthy", "Synced")
	older.Status.Sync.Revision = "sha256:0"
	degradedElsewhere := testApp("degraded-old", "Degraded", "Synced")
	degradedElsewhere.Status.Sync.Revision = "sha256:0"
	rows := ServingRows(s, []argocd.Application{missing, older, degradedElsewhere, testApp("now", "Degraded", "Synced")}, "")
	for _, r := range rows {
		st, _, _ := fleet.Observe(map[string]argocd.Application{"missing": missing, "older": older, "degraded-old": degradedElsewhere}[r.Cluster].Status, s.Status.Revision)
		want := map[string]string{"missing": "Progressing", "older": "Progressing", "degraded-old": "Progressing", "now": "Degraded"}[r.Cluster]
		if r.State != want || (r.Cluster != "now" && r.State != st.String()) {
			t.Errorf("%s: state %s, want %s as fleet decides", r.Cluster, r.State, want)
		}
	}
}

// The Serving's page shows the soak clock the stages read: the revision's Deployed time, not
// the Ready condition's transition time, and nothing while the Serving is not Deployed.
func TestAServingShowsWhenItsRevisionWasDeployed(t *testing.T) {
	ready := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	since := ready.Add(time.Hour)
	s := &v1.Serving{Status: v1.ServingStatus{Revision: "sha256:b", DeployedRevision: "sha256:b", DeployedSince: &metav1.Time{Time: since},
		Conditions: []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonDeployed, LastTransitionTime: metav1.NewTime(ready)}}}}
	if got := SummarizeServing(s).DeployedSince; got == nil || !got.Equal(since) {
		t.Errorf("deployed since %v, want %v", got, since)
	}
	s.Status.Conditions[0].Status, s.Status.Conditions[0].Reason = metav1.ConditionFalse, v1.ReasonProgressing
	if got := SummarizeServing(s).DeployedSince; got != nil {
		t.Errorf("a Progressing Serving shows deployed since %v", got)
	}
}

func TestCustodySaysWhatAPreparationsProvenanceClaims(t *testing.T) {
	for _, c := range []struct {
		p    *v1.PreparationProvenance
		want string
	}{
		{nil, "no provenance: rendered before Kokumi signed one; sources not verified"},
		{&v1.PreparationProvenance{KeyID: "k1", Sources: v1.SourcesNotAsked}, "sources not verified (the Product asks none); provenance signed by key k1"},
		{&v1.PreparationProvenance{KeyID: "k1", Sources: v1.SourcesVerified, VerifiedBy: []string{"a", "b"}}, "sources verified by key a, b; provenance signed by key k1"},
	} {
		if got := Custody(c.p); got != c.want {
			t.Errorf("Custody(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}

// A drifted cluster's row comes after the held and degraded ones and before the progressing
// ones, as status.targets lists them; the state filter takes Drifted.
func TestDriftedRowsRankBeforeProgressingOnes(t *testing.T) {
	s := &v1.Serving{}
	for _, tg := range [][2]string{{"p", "Progressing"}, {"x", "Drifted"}, {"d", "Degraded"}, {"h", "Held"}} {
		s.Status.Targets = append(s.Status.Targets, v1.Target{Cluster: tg[0], Conditions: []v1.TargetCondition{{Type: tg[1], Reason: tg[1]}}})
	}
	var order []string
	for _, r := range ServingRows(s, nil, "") {
		order = append(order, r.Cluster)
	}
	if got := strings.Join(order, ","); got != "h,d,x,p" {
		t.Errorf("rows %s, want h,d,x,p", got)
	}
	if q, err := RowQueryOf(url.Values{"state": {"Drifted"}}); err != nil || q.State != "Drifted" {
		t.Errorf("state Drifted: %v", err)
	}
}
