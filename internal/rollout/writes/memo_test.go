package writes

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// The memo answers from the last reconcile while the Application's resourceVersion and the
// wanted spec stay, and compares again when either changes.
func TestUpToDateIsComparedAgainOnlyWhenTheApplicationOrTheWantedSpecChanged(t *testing.T) {
	spec := argocd.ApplicationSpec{Name: "team.app.edge-1", Namespace: "argocd", ServingNamespace: "team", ServingName: "app",
		Cluster: "edge-1", Project: "p", RepoURL: "oci://registry.example/team/app", Revision: "sha256:aa",
		Server: "https://edge-1.example:6443", TargetNamespace: "podinfo", Retry: argocd.DefaultSyncRetry}
	app, err := argocd.ApplicationFrom(spec.Build())
	if err != nil {
		t.Fatal(err)
	}
	app.ResourceVersion = "1"
	key := types.NamespacedName{Namespace: "team", Name: "app"}
	var m Memo

	r := m.Round(key, 1)
	if !r.UpToDate(spec, app) {
		t.Fatal("the Application as built is not up to date")
	}
	r.Done()

	// Changed behind the memo's back at the same resourceVersion (which the API server never
	// does): the memo's answer stands, so it was not compared again.
	app.Spec.Project = `"other"`
	r = m.Round(key, 1)
	if !r.UpToDate(spec, app) {
		t.Fatal("the answer of the last reconcile was not reused")
	}
	r.Done()

	// A new resourceVersion is compared again.
	app.ResourceVersion = "2"
	r = m.Round(key, 1)
	if r.UpToDate(spec, app) {
		t.Fatal("a changed Application was taken as up to date")
	}
	r.Done()

	// So is another wanted spec.
	app.Spec.Project = `"p"`
	app.ResourceVersion = "3"
	r = m.Round(key, 1)
	if !r.UpToDate(spec, app) {
		t.Fatal("the Application put back is not up to date")
	}
	moved := spec
	moved.Revision = "sha256:bb"
	if r.UpToDate(moved, app) {
		t.Fatal("an Application at the old revision is up to date with the new one")
	}
	r.Done()

	m.Forget(key)
	if len(m.byServing) != 0 {
		t.Fatalf("forget kept %v", m.byServing)
	}
}
