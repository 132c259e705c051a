package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
)

func labelled(name string, ready bool, kv ...string) v1.Cluster {
	c := v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Labels[kv[i]] = kv[i+1]
	}
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	c.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: status, Reason: "x"}}
	return c
}

func TestCountPicksBySelectorAndCountsReady(t *testing.T) {
	now := metav1.Now()
	clusters := []v1.Cluster{
		labelled("edge-1", true, "tier", "edge", "region", "eu"),
		labelled("edge-2", false, "tier", "edge", "region", "us"),
		labelled("core-1", true, "tier", "core"),
		{ObjectMeta: metav1.ObjectMeta{Name: "new", Labels: map[string]string{"tier": "edge"}}}, // not probed yet
		{ObjectMeta: metav1.ObjectMeta{Name: "leaving", Labels: map[string]string{"tier": "edge"}, DeletionTimestamp: &now}},
	}
	for _, tc := range []struct {
		selector              metav1.LabelSelector
		wantSelected, wantRdy int32
	}{
		{metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}, 3, 1},
		{metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: metav1.LabelSelectorOpIn, Values: []string{"eu", "us"}}}}, 2, 1},
		{metav1.LabelSelector{}, 4, 2},
		{metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gpu"}}, 0, 0},
	} {
		sel, err := cluster.Selector(&tc.selector)
		if err != nil {
			t.Fatal(err)
		}
		if s, r := cluster.Count(sel, clusters); s != tc.wantSelected || r != tc.wantRdy {
			t.Errorf("selector %s: %d selected, %d ready; want %d, %d", sel, s, r, tc.wantSelected, tc.wantRdy)
		}
	}
}

func TestArgoCDSecretDeclaresTheCluster(t *testing.T) {
	c := cluster.Credentials{BearerToken: token, CAData: testCert}
	s := cluster.ArgoCDSecret("argocd", "edge-1", server, c)
	if s.Namespace != "argocd" || s.Name != "kokumi-cluster-edge-1" {
		t.Fatalf("secret %s/%s", s.Namespace, s.Name)
	}
	for k, v := range map[string]string{argocd.LabelSecretType: "cluster", argocd.LabelManagedBy: "kokumi", argocd.LabelCluster: "edge-1"} {
		if s.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, s.Labels[k], v)
		}
	}
	if string(s.Data["name"]) != "edge-1" || string(s.Data["server"]) != server || string(s.Data["config"]) != string(c.ArgoCDConfig()) {
		t.Fatalf("data: name %q server %q", s.Data["name"], s.Data["server"])
	}
}

func TestSecretNamesStayValidForLongClusterNames(t *testing.T) {
	long := strings.Repeat("a", 250)
	a, b := cluster.SecretName(long), cluster.SecretName(long+"b")
	if len(a) > 253 || len(b) > 253 || a == b {
		t.Fatalf("names %d and %d characters, equal %v", len(a), len(b), a == b)
	}
	if a != cluster.SecretName(long) {
		t.Fatal("the name is not stable")
	}
}

func TestSyncSecretWritesOnlyWhatChanged(t *testing.T) {
	want := cluster.ArgoCDSecret("argocd", "edge-1", server, cluster.Credentials{BearerToken: token})
	have := want.DeepCopy()
	have.Labels["team"] = "platform"
	if argocd.SyncSecret(have, want) {
		t.Fatal("an equal Secret with a label of someone else's changed")
	}
	rotated := cluster.ArgoCDSecret("argocd", "edge-1", server, cluster.Credentials{BearerToken: "rotated-token"})
	if !argocd.SyncSecret(have, rotated) || string(have.Data["config"]) != string(rotated.Data["config"]) {
		t.Fatal("a rotated token was not taken")
	}
	if have.Labels["team"] != "platform" {
		t.Fatal("someone else's label was dropped")
	}
	stripped := &corev1.Secret{Data: have.Data}
	if !argocd.SyncSecret(stripped, rotated) || stripped.Labels[argocd.LabelSecretType] != "cluster" {
		t.Fatal("the labels Argo CD reads were not restored")
	}
}

// BenchmarkCount measures counting a large fleet for one Environment.
func BenchmarkCount(b *testing.B) {
	clusters := make([]v1.Cluster, 5000)
	for i := range clusters {
		clusters[i] = labelled(fmt.Sprintf("c-%d", i), i%3 != 0, "tier", []string{"edge", "core"}[i%2], "region", fmt.Sprintf("r%d", i%10))
	}
	sel, err := cluster.Selector(&metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: metav1.LabelSelectorOpIn, Values: []string{"r0", "r2", "r4"}}}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if s, _ := cluster.Count(sel, clusters); s == 0 {
			b.Fatal("nothing selected")
		}
	}
}
