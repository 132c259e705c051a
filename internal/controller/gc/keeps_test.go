package gc

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// The Preparation a roll-out would go back to is kept before any status names it: a rollback
// writes it into Applications first, and its status after.
func TestTheCollectorKeepsWhatARollbackWouldGoBackTo(t *testing.T) {
	base := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	prep := func(name string, age int, recorded string) *v1.Preparation {
		p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(base.Add(-time.Duration(age) * time.Minute))},
			Spec: v1.PreparationSpec{OrderRef: v1.LocalObjectReference{Name: "web"}, Artifact: v1.Artifact{Digest: "sha256:" + name}}}
		if recorded != "" {
			p.Status.DeploymentRecords = []v1.DeploymentRecord{{Environment: recorded}}
		}
		return p
	}
	preps := []*v1.Preparation{prep("web-4", 0, ""), prep("web-3", 1, "staging"), prep("web-2", 2, "prod"), prep("web-1", 3, "prod")}
	order := &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1.OrderSpec{EnvironmentRef: v1.LocalObjectReference{Name: "prod"}}}
	s := &v1.Serving{Spec: v1.ServingSpec{PreparationName: "web-4"}}
	fallback := rollbackCandidate(preps, order, s)
	if fallback != "web-2" {
		t.Fatalf("the rollback candidate is %q, want web-2 (the newest older one recorded in prod)", fallback)
	}
	keep := keeps(order, s, fallback)
	if !keep(preps[2]) || keep(preps[3]) || keep(preps[1]) {
		t.Errorf("kept: web-3 %v, web-2 %v, web-1 %v", keep(preps[1]), keep(preps[2]), keep(preps[3]))
	}
	if rollbackCandidate(preps, order, &v1.Serving{}) != "" {
		t.Error("a Serving that deploys nothing has a rollback candidate")
	}
}
