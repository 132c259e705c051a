package promotion

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func TestRollbackTargetIsTheNewestOlderPreparationThatRan(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prep := func(name, order string, age time.Duration, ran bool) v1.Preparation {
		p := v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(at.Add(-age))}}
		p.Spec.OrderRef.Name = order
		if ran {
			p.Status.DeploymentRecords = []v1.DeploymentRecord{{Environment: "edge", Clusters: 1}}
		}
		return p
	}
	all := []v1.Preparation{
		prep("web-2", "web", 2*time.Hour, false),
		prep("other-1", "other", 0, true),
		prep("web-4", "web", 0, true),
		prep("web-1", "web", 3*time.Hour, true),
		prep("web-3b", "web", time.Hour, true),
		prep("web-3a", "web", time.Hour, true), // same second as web-3b: by name
	}
	preps := OrderPreparations(all, "web")
	var names []string
	for _, p := range preps {
		names = append(names, p.Name)
	}
	if got := names; len(got) != 5 || got[0] != "web-4" || got[1] != "web-3a" || got[2] != "web-3b" || got[3] != "web-2" || got[4] != "web-1" {
		t.Fatalf("order %v, want web-4 web-3a web-3b web-2 web-1", got)
	}
	for _, c := range []struct{ current, want, refusal string }{
		{"web-4", "web-3a", ""},
		{"web-3b", "web-1", ""}, // web-2 never ran
		{"web-1", "", "no Preparation older than web-1 has a deployment record (none ran healthily before it)"},
		{"", "", "the Serving deploys no Preparation yet"},
		{"web-0", "", "its Preparation web-0 no longer exists, so what ran before it is unknown"},
	} {
		got, err := RollbackTarget(preps, c.current)
		var refusal *Refusal
		switch {
		case c.refusal != "" && (!errors.As(err, &refusal) || refusal.Message != c.refusal || refusal.Automatic):
			t.Errorf("%q: %v, want the refusal %q", c.current, err, c.refusal)
		case c.refusal == "" && (err != nil || got.Name != c.want):
			t.Errorf("%q: %v %v, want %s", c.current, got, err, c.want)
		}
	}
}

func TestARollbackInAnEnvironmentCountsOnlyItsRecords(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prep := func(name string, age time.Duration, environment string) v1.Preparation {
		p := v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(at.Add(-age))}}
		p.Spec.OrderRef.Name = "web"
		if environment != "" {
			p.Status.DeploymentRecords = []v1.DeploymentRecord{{Environment: environment, Clusters: 1}}
		}
		return p
	}
	preps := OrderPreparations([]v1.Preparation{
		prep("web-3", 0, ""), prep("web-2", time.Hour, "staging"), prep("web-1", 2*time.Hour, "edge"),
	}, "web")
	if got, err := RollbackTargetIn(preps, "web-3", "edge"); err != nil || got.Name != "web-1" {
		t.Errorf("in edge: %v, %v; want web-1", got, err)
	}
	if got, err := RollbackTarget(preps, "web-3"); err != nil || got.Name != "web-2" {
		t.Errorf("anywhere: %v, %v; want web-2", got, err)
	}
	var refusal *Refusal
	if _, err := RollbackTargetIn(preps, "web-3", "prod"); !errors.As(err, &refusal) || refusal.Message != "no Preparation older than web-3 has a deployment record in Environment prod (none ran healthily there before it)" {
		t.Errorf("in prod: %v", err)
	}
}

func TestARollbackPassesOverARevokedPreparation(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prep := func(name string, age time.Duration) v1.Preparation {
		p := v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(at.Add(-age))}}
		p.Spec.OrderRef.Name = "web"
		p.Status.DeploymentRecords = []v1.DeploymentRecord{{Environment: "edge", Clusters: 1}}
		return p
	}
	two := prep("web-2", time.Hour)
	two.Status.Revocations = []v1.Revocation{{Environment: "edge", Digest: "sha256:rev", Verification: "error-rate"}}
	preps := OrderPreparations([]v1.Preparation{prep("web-3", 0), two, prep("web-1", 2*time.Hour)}, "web")
	got, skipped, err := RollbackTargetChecked(preps, "web-3", "edge", nil)
	if err != nil || got.Name != "web-1" || len(skipped) != 1 || skipped[0] != "web-2 (its record in Environment edge is revoked: error-rate failed)" {
		t.Fatalf("got %v, skipped %q, %v; want web-1 past web-2", got, skipped, err)
	}
	// A revocation in another Environment does not count here.
	two.Status.Revocations[0].Environment = "prod"
	preps = OrderPreparations([]v1.Preparation{prep("web-3", 0), two, prep("web-1", 2*time.Hour)}, "web")
	if got, _, err := RollbackTargetChecked(preps, "web-3", "edge", nil); err != nil || got.Name != "web-2" {
		t.Errorf("got %v, %v; want web-2", got, err)
	}
}
