package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/view"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// fleetApps creates n Applications of the Serving ns/serving, on clusters c-0000…, with the
// status Argo CD would write in the same request: every tenth Degraded, the rest Healthy.
func fleetApps(t *testing.T, ns, serving string, n int) {
	t.Helper()
	ctx := context.Background()
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cluster := fmt.Sprintf("c-%04d", i)
				health := "Healthy"
				if i%10 == 0 {
					health = "Degraded"
				}
				a := &unstructured.Unstructured{Object: map[string]any{
					"spec": map[string]any{
						"project":     "edge",
						"source":      map[string]any{"repoURL": "oci://127.0.0.1:5000/" + ns + "/" + serving, "path": ".", "targetRevision": "sha256:1"},
						"destination": map[string]any{"server": "https://" + cluster + ".example:6443", "namespace": "podinfo"},
					},
					"status": map[string]any{
						"sync":   map[string]any{"status": "Synced", "revision": "sha256:1"},
						"health": map[string]any{"status": health},
					},
				}}
				a.SetGroupVersionKind(argocd.ApplicationGVK)
				a.SetNamespace(argoNS)
				a.SetName(fmt.Sprintf("%s-%s-%s", ns, serving, cluster))
				a.SetLabels(map[string]string{
					argocd.LabelServing: serving, argocd.LabelServingNamespace: ns, argocd.LabelCluster: cluster,
					argocd.LabelManagedBy: argocd.ManagedByKokumi,
				})
				errs <- env.Client.Create(ctx, a)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
}

func TestTheServingPageFiltersAndPagesItsClustersOnTheServer(t *testing.T) {
	ctx := context.Background()
	ns := "team-paging"
	must(t, env.CreateNamespace(ctx, ns))
	const n = view.MaxRows + 50
	s := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"}, Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "big"}}}
	must(t, env.Client.Create(ctx, s))
	// c-0001 and c-0002 are held; every tenth cluster is degraded.
	counts := v1.ClusterCounts{Selected: n, Healthy: n - n/10 - 2, Degraded: n / 10, Held: 2}
	s.Status = v1.ServingStatus{Clusters: counts, Targets: []v1.Target{
		{Cluster: "c-0001", Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "Cluster c-0001 is not Ready: Unreachable"}}},
		{Cluster: "c-0002", Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "Cluster c-0002 is not Ready: Unreachable"}}},
	}}
	must(t, env.Client.Status().Update(ctx, s))
	fleetApps(t, ns, "big", n)

	path := servingPath(ns, "big")
	d := get(t, path, func(d view.ServingDetail) error {
		if d.RowsTotal != n || len(d.Rows) != view.MaxRows || d.Clusters.Held != 2 {
			return fmt.Errorf("%d rows of %d, held %d; want %d of %d and 2 held", len(d.Rows), d.RowsTotal, d.Clusters.Held, view.MaxRows, n)
		}
		return nil
	})
	if d.RowsOmitted != 50 || d.Rows[0].Cluster != "c-0001" || d.Rows[2].State != "Degraded" {
		t.Errorf("omitted %d, first rows %+v %+v", d.RowsOmitted, d.Rows[0], d.Rows[2])
	}
	for _, c := range []struct {
		query                 string
		rows, total, omitted  int
		first, last, allState string
	}{
		{"?offset=1000", 50, n, 0, "c-0995", "c-1049", "Healthy"},
		{"?state=Degraded", n / 10, n / 10, 0, "c-0000", "c-1040", "Degraded"},
		{"?state=Held", 2, 2, 0, "c-0001", "c-0002", "Held"},
		{"?q=C-010", 10, 10, 0, "c-0100", "c-0109", ""},
		{"?q=c-0&state=Healthy&offset=5&limit=10", 10, 1000 - 100 - 2, 1000 - 100 - 2 - 15, "c-0008", "c-0018", "Healthy"},
		{"?limit=5000", view.MaxRows, n, 50, "c-0001", "", ""},
		{"?q=nothing-like-it", 0, 0, 0, "", "", ""},
	} {
		var got view.ServingDetail
		if res := do(t, call{path: path + c.query, bearer: token}, &got); res.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", c.query, res.StatusCode)
			continue
		}
		if len(got.Rows) != c.rows || got.RowsTotal != c.total || got.RowsOmitted != c.omitted || got.Clusters != counts {
			t.Errorf("%s: %d rows of %d, %d omitted, counts %+v; want %d of %d, %d omitted, counts %+v", c.query, len(got.Rows), got.RowsTotal, got.RowsOmitted, got.Clusters, c.rows, c.total, c.omitted, counts)
			continue
		}
		if c.first != "" && got.Rows[0].Cluster != c.first || c.last != "" && got.Rows[len(got.Rows)-1].Cluster != c.last {
			t.Errorf("%s: rows %s…%s, want %s…%s", c.query, got.Rows[0].Cluster, got.Rows[len(got.Rows)-1].Cluster, c.first, c.last)
		}
		for _, r := range got.Rows {
			if c.allState != "" && r.State != c.allState {
				t.Errorf("%s: row %+v is not %s", c.query, r, c.allState)
				break
			}
		}
	}
	for _, query := range []string{"?state=Sad", "?offset=-1", "?limit=0", "?limit=ten"} {
		var out map[string]string
		if res := do(t, call{path: path + query, bearer: token}, &out); res.StatusCode != http.StatusBadRequest || out["error"] == "" {
			t.Errorf("%s: %d %v, want 400", query, res.StatusCode, out)
		}
	}
}

// setClusterReady writes a Cluster's Ready condition as its probe would.
func setClusterReady(t *testing.T, c *v1.Cluster, status metav1.ConditionStatus, reason string) {
	t.Helper()
	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: status, Reason: reason, Message: "as the probe found"})
	must(t, env.Client.Status().Update(context.Background(), c))
}

func TestTheClusterPageHoldsTheDeploymentsOfAClusterThatIsNotReady(t *testing.T) {
	ctx := context.Background()
	ns := "team-held"
	must(t, env.CreateNamespace(ctx, ns))
	c := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-down"},
		Spec:       v1.ClusterSpec{Server: "https://edge-down.example:6443", CredentialsRef: v1.LocalObjectReference{Name: "edge-down"}},
	}
	must(t, env.Client.Create(ctx, c))
	setClusterReady(t, c, metav1.ConditionFalse, v1.ReasonUnreachable)
	// Argo CD's last word on it was Healthy: it has not noticed yet.
	app(t, ns, "web", "edge-down", "Healthy", "Synced", "sha256:"+strings.Repeat("b", 64), "", time.Now().Add(-time.Hour))

	path := "/api/v1/clusters/edge-down"
	d := get(t, path, func(d view.ClusterDetail) error {
		if len(d.Deployments) != 1 || d.Deployments[0].Health == "" || d.Ready.Status != "False" {
			return fmt.Errorf("deployments %+v, ready %+v", d.Deployments, d.Ready)
		}
		return nil
	})
	row := d.Deployments[0]
	if row.State != "Held" || row.Reason != v1.ReasonClusterNotReady || row.Message != "Cluster edge-down is not Ready: Unreachable" ||
		row.Health != "Healthy" || row.Sync != "Synced" || row.Namespace != ns || row.Serving != "web" || row.Since == nil {
		t.Errorf("row %+v, want Held (ClusterNotReady) keeping Argo CD's Healthy and Synced", row)
	}

	// Unknown is not Ready either; Ready again, the row is what Argo CD reports.
	setClusterReady(t, c, metav1.ConditionUnknown, "Probing")
	get(t, path, func(d view.ClusterDetail) error {
		if r := d.Deployments[0]; r.State != "Held" || r.Message != "Cluster edge-down is not Ready: Probing" {
			return fmt.Errorf("row %+v, want Held while Ready is Unknown", r)
		}
		return nil
	})
	setClusterReady(t, c, metav1.ConditionTrue, v1.ReasonConnected)
	get(t, path, func(d view.ClusterDetail) error {
		if r := d.Deployments[0]; r.State != "Healthy" || r.Reason != "" || r.Health != "Healthy" {
			return fmt.Errorf("row %+v, want Healthy once the Cluster is Ready", r)
		}
		return nil
	})

	// A Ready cluster's row says what the Serving's status says of it, as its page does.
	s := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "web"}}}
	must(t, env.Client.Create(ctx, s))
	s.Status.Targets = []v1.Target{{Cluster: "edge-down", Conditions: []v1.TargetCondition{{Type: "Degraded", Reason: v1.ReasonDegraded, Message: "sync failed: boom"}}}}
	must(t, env.Client.Status().Update(ctx, s))
	get(t, path, func(d view.ClusterDetail) error {
		if r := d.Deployments[0]; r.State != "Degraded" || r.Reason != v1.ReasonDegraded || r.Message != "sync failed: boom" {
			return fmt.Errorf("row %+v, want the Serving's Degraded", r)
		}
		return nil
	})
}
