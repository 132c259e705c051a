package writes

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// An Application found to be someone else's is taken as still there for ForeignPatience, per
// Serving, and then looked for again; record forgets those of Servings no longer reconciled.
func TestForeignApplicationsAreRememberedForAWhile(t *testing.T) {
	var w Writes
	a, b := types.NamespacedName{Namespace: "team", Name: "a"}, types.NamespacedName{Namespace: "team", Name: "b"}
	app := &argocd.Application{}
	app.Name = "team.a.edge-1"
	now := time.Now()
	w.RememberForeign(a, app, now)

	if got := w.Foreign(a, "team.a.edge-1", now.Add(ForeignPatience-time.Second)); got != app {
		t.Fatalf("within ForeignPatience: got %v, want the remembered Application", got)
	}
	if got := w.Foreign(b, "team.a.edge-1", now); got != nil {
		t.Fatalf("another Serving sees Serving a's find: %v", got)
	}
	if got := w.Foreign(a, "team.a.edge-2", now); got != nil {
		t.Fatalf("another name: %v", got)
	}
	if got := w.Foreign(a, "team.a.edge-1", now.Add(ForeignPatience+time.Second)); got != nil {
		t.Fatalf("after ForeignPatience: got %v, want nil so that a create looks again", got)
	}
	if len(w.notOurs) != 0 {
		t.Fatalf("an expired find is kept: %v", w.notOurs)
	}

	// A find of a Serving that is not reconciled again goes with the next record.
	w.RememberForeign(b, app, time.Now().Add(-ForeignPatience-time.Second))
	w.Record(&Slice{key: a})
	if len(w.notOurs) != 0 {
		t.Fatalf("record keeps an expired find: %v", w.notOurs)
	}
}
