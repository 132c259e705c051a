package server

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

func testApp(cluster, health, sync string) unstructured.Unstructured {
	a := unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"health": map[string]any{"status": health},
		"sync":   map[string]any{"status": sync, "revision": "sha256:1"},
	}}}
	a.SetGroupVersionKind(argocd.ApplicationGVK)
	a.SetNamespace("argocd")
	a.SetName("app-" + cluster)
	a.SetLabels(map[string]string{argocd.LabelCluster: cluster})
	return a
}

func TestServingRowsPutTroubleFirst(t *testing.T) {
	s := &v1.Serving{Status: v1.ServingStatus{Targets: []v1.Target{
		{Cluster: "c-held", Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "down"}}},
		// Held while Argo CD's last word on it was Healthy: a stopped cluster.
		{Cluster: "x-stopped", Application: "app-x-stopped", Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "unreachable"}}},
	}}}
	apps := []unstructured.Unstructured{
		testApp("a-healthy", "Healthy", "Synced"),
		testApp("b-progressing", "Progressing", "Synced"),
		testApp("z-degraded", "Degraded", "Synced"),
		testApp("y-outofsync", "Healthy", "OutOfSync"),
		testApp("x-stopped", "Healthy", "Synced"),
	}
	rows, omitted := servingRows(s, apps, "")
	var got []string
	for _, r := range rows {
		got = append(got, r.Cluster)
	}
	want := []string{"c-held", "x-stopped", "z-degraded", "b-progressing", "y-outofsync", "a-healthy"}
	if fmt.Sprint(got) != fmt.Sprint(want) || omitted != 0 {
		t.Fatalf("rows %v (omitted %d), want %v", got, omitted, want)
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
	apps := make([]unstructured.Unstructured, MaxRows+7)
	for i := range apps {
		apps[i] = testApp(fmt.Sprintf("c-%05d", i), "Healthy", "Synced")
	}
	rows, omitted := servingRows(&v1.Serving{}, apps, "https://argocd.example")
	if len(rows) != MaxRows || omitted != 7 {
		t.Fatalf("%d rows, %d omitted; want %d and 7", len(rows), omitted, MaxRows)
	}
	if rows[0].Link != "https://argocd.example/applications/argocd/app-c-00000" {
		t.Errorf("link %q", rows[0].Link)
	}
}

func TestSlowSubscriberIsToldToResync(t *testing.T) {
	b := newBroker()
	s, _ := b.subscribe("session:a", 0)
	for i := 0; i < subscriberBuffer+3; i++ {
		b.publish(Change{Kind: "Serving", Name: fmt.Sprint(i)})
	}
	if len(s.ch) != subscriberBuffer || !s.overflow.Load() || len(s.kick) != 1 {
		t.Fatalf("buffered %d, overflow %v, kicked %d", len(s.ch), s.overflow.Load(), len(s.kick))
	}
	b.unsubscribe(s)
	b.publish(Change{Kind: "Serving", Name: "after"})
	if len(s.ch) != subscriberBuffer {
		t.Fatal("an unsubscribed client still receives changes")
	}
}

// BenchmarkServingRows measures the Serving page of a large fleet: every Application read and
// ranked, the table capped at MaxRows.
func BenchmarkServingRows(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		apps := make([]unstructured.Unstructured, n)
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
				rows, _ := servingRows(s, apps, "https://argocd.example")
				if rows[0].Cluster != "c-00001" {
					b.Fatal("the held cluster is not first")
				}
			}
		})
	}
}
