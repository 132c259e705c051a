package argocd_test

import (
	"encoding/json"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

func testSpec() argocd.ApplicationSpec {
	return argocd.ApplicationSpec{Name: "team-a.podinfo.edge-1", Namespace: "argocd", ServingNamespace: "team-a", ServingName: "podinfo",
		ServingUID: "uid-1", Cluster: "edge-1", Project: "fleet", RepoURL: "oci://registry.example/team-a/podinfo", Revision: "sha256:aa",
		Server: "https://edge-1.example:6443", TargetNamespace: "podinfo", Retry: argocd.DefaultSyncRetry}
}

// built reads the Application spec builds, with edit applied to its JSON object first, as the
// cache would decode it from the API server.
func built(t *testing.T, spec argocd.ApplicationSpec, edit func(obj map[string]any)) *argocd.Application {
	t.Helper()
	u := spec.Build()
	if edit != nil {
		edit(u.Object)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	app := &argocd.Application{}
	if err := json.Unmarshal(data, app); err != nil {
		t.Fatal(err)
	}
	return app
}

// Kokumi owns the whole spec: a field it does not write, added by someone, is drift that Apply
// removes with a merge patch naming it null; a null is no field, and the Application as built
// has none.
func TestSpecFieldsKokumiDoesNotWriteAreDrift(t *testing.T) {
	spec := testSpec()
	if app := built(t, spec, nil); !spec.UpToDate(app) || app.Spec.Others != nil {
		t.Fatalf("the Application as built is not up to date (others %v)", app.Spec.Others)
	}
	if app := built(t, spec, func(o map[string]any) { o["spec"].(map[string]any)["info"] = nil }); !spec.UpToDate(app) {
		t.Error("a null spec field is drift")
	}

	for _, tc := range []struct {
		name   string
		fields map[string]any
		patch  string
	}{
		{"sources, which Argo CD deploys instead of source, and ignoreDifferences, which hide drift from self-heal", map[string]any{
			"sources":           []any{map[string]any{"repoURL": "oci://evil.example/app", "targetRevision": "latest", "path": "."}},
			"ignoreDifferences": []any{map[string]any{"group": "apps", "kind": "Deployment", "jsonPointers": []any{"/spec/template"}}},
		}, `{"spec":{"ignoreDifferences":null,"sources":null}}`},
		{"info", map[string]any{"info": []any{map[string]any{"name": "a", "value": "b"}}}, `{"spec":{"info":null}}`},
		{"revisionHistoryLimit", map[string]any{"revisionHistoryLimit": int64(0)}, `{"spec":{"revisionHistoryLimit":null}}`},
		{"sourceHydrator", map[string]any{"sourceHydrator": map[string]any{"drySource": map[string]any{"repoURL": "https://git.example/x"}}}, `{"spec":{"sourceHydrator":null}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := built(t, spec, func(o map[string]any) {
				for k, v := range tc.fields {
					o["spec"].(map[string]any)[k] = v
				}
				o["status"] = map[string]any{"health": map[string]any{"status": argocd.HealthHealthy}}
			})
			if len(app.Spec.Others) != len(tc.fields) {
				t.Fatalf("read %d other spec fields, want %d: %v", len(app.Spec.Others), len(tc.fields), app.Spec.Others)
			}
			if spec.UpToDate(app) {
				t.Fatal("not drift")
			}
			// What the cache holds is still what the API server holds.
			data, err := json.Marshal(app)
			if err != nil {
				t.Fatal(err)
			}
			again := &argocd.Application{}
			if err := json.Unmarshal(data, again); err != nil || spec.UpToDate(again) || len(again.Spec.Others) != len(tc.fields) {
				t.Fatalf("the Application serialized and read again lost its other fields (%v): %s", err, data)
			}
			changed := app.DeepCopy()
			spec.Apply(changed)
			if !spec.UpToDate(changed) {
				t.Fatal("Apply did not make the Application up to date")
			}
			if len(app.Spec.Others) != len(tc.fields) {
				t.Fatal("Apply changed the copy it was given")
			}
			patch, err := client.MergeFrom(app).Data(changed)
			if err != nil {
				t.Fatal(err)
			}
			if string(patch) != tc.patch {
				t.Errorf("patch %s, want %s", patch, tc.patch)
			}
			if changed.Status.Health.Status != argocd.HealthHealthy {
				t.Error("the status was not kept")
			}
		})
	}
}

// Each of Argo CD's resources finalizers, whatever its propagation, is drift that Apply removes,
// keeping the other finalizers; Cascades says which would delete what runs with the Application.
func TestResourcesFinalizersAreDriftAndCascade(t *testing.T) {
	spec := testSpec()
	for _, f := range []string{argocd.ResourcesFinalizer, argocd.ResourcesFinalizerForeground, argocd.ResourcesFinalizerBackground} {
		app := built(t, spec, nil)
		app.Finalizers = []string{"example.com/keep", f}
		if !argocd.Cascades(app) {
			t.Errorf("%s does not cascade", f)
		}
		if spec.UpToDate(app) {
			t.Errorf("%s is not drift", f)
		}
		spec.Apply(app)
		if !slices.Equal(app.Finalizers, []string{"example.com/keep"}) || argocd.Cascades(app) || !spec.UpToDate(app) {
			t.Errorf("after Apply, %s left finalizers %v", f, app.Finalizers)
		}
	}
	app := built(t, spec, nil)
	app.Finalizers = []string{"example.com/keep", "pre-delete-finalizer.argocd.argoproj.io", argocd.ResourcesFinalizer + "/other"}
	if argocd.Cascades(app) || !spec.UpToDate(app) {
		t.Errorf("finalizers %v cascade or are drift", app.Finalizers)
	}
	if got := argocd.WithoutCascade([]string{argocd.ResourcesFinalizerBackground}); got != nil {
		t.Errorf("WithoutCascade left %v, want nil", got)
	}
}

// Of status.history and status.resources, the cached Application keeps the newest deployed
// revision and at most MaxOutOfSyncNames names of OutOfSync objects with their count; a deep
// copy shares no slice with it.
func TestTheStatusKeepsTheLastDeployedRevisionAndAFewOutOfSyncNames(t *testing.T) {
	app := built(t, testSpec(), func(obj map[string]any) {
		var resources []any
		resources = append(resources, map[string]any{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "podinfo", "name": "web", "status": "OutOfSync", "health": map[string]any{"status": "Healthy"}})
		for i := range 14 {
			resources = append(resources, map[string]any{"version": "v1", "kind": "ConfigMap", "name": "cfg-" + string(rune('a'+i)), "status": "Synced"})
			resources = append(resources, map[string]any{"version": "v1", "kind": "Secret", "name": "s-" + string(rune('a'+i)), "status": "OutOfSync"})
		}
		obj["status"] = map[string]any{
			"sync":      map[string]any{"status": "OutOfSync", "revision": "sha256:aa"},
			"history":   []any{map[string]any{"id": 0, "revision": "sha256:00"}, map[string]any{"id": 1, "revision": "sha256:aa", "deployedAt": "2026-12-07T10:00:00Z"}},
			"resources": resources,
		}
	})
	st := app.Status
	if st.LastDeployed != "sha256:aa" || !st.DeployedAt("aa") || st.DeployedAt("sha256:00") {
		t.Errorf("last deployed %q", st.LastDeployed)
	}
	if st.OutOfSync == nil || st.OutOfSync.Count != 15 || len(st.OutOfSync.Names) != argocd.MaxOutOfSyncNames ||
		st.OutOfSync.Names[0] != "Deployment/web" || st.OutOfSync.Names[1] != "Secret/s-a" {
		t.Fatalf("out of sync %+v", st.OutOfSync)
	}
	cp := app.DeepCopy()
	cp.Status.OutOfSync.Names[0] = "changed"
	if app.Status.OutOfSync.Names[0] != "Deployment/web" {
		t.Error("the copy shares the names")
	}
	synced := built(t, testSpec(), func(obj map[string]any) {
		obj["status"] = map[string]any{"resources": []any{map[string]any{"kind": "Deployment", "name": "web", "status": "Synced"}}}
	})
	if synced.Status.OutOfSync != nil || synced.Status.DeployedAt("sha256:aa") {
		t.Errorf("a synced Application keeps %+v", synced.Status)
	}
}
