package render_test

import (
	"context"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/render"
)

const (
	argoCDHook = "argocd.argoproj.io/hook"
	helmHook   = "helm.sh/hook"
)

// hookConfigMap is a ConfigMap carrying the given annotations.
func hookConfigMap(name string, annotations map[string]string) string {
	text := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"
	if len(annotations) > 0 {
		text += "  annotations:\n"
		for k, v := range annotations {
			text += "    " + k + ": " + `"` + v + `"` + "\n"
		}
	}
	return text + "data:\n  hook: " + name + "\n"
}

// Argo CD runs a resource annotated argocd.argoproj.io/hook: PostDelete (or PreDelete, Argo CD
// 3) when an Application is deleted, as it runs Helm's delete hooks, whatever the source. Kokumi
// deletes Applications when a cluster leaves, the project revokes or the Serving goes, and what
// runs there keeps running: no delete hook of either annotation is deployed, from a chart or a
// bundle; a hook's other events are kept.
func TestArgoCDDeleteHooksAreNotDeployed(t *testing.T) {
	type want struct {
		deployed bool
		// annotations are the hook annotations the deployed object keeps ("" for none).
		argoCD, helm string
	}
	cases := []struct {
		name        string
		annotations map[string]string
		want        want
	}{
		{"app", nil, want{deployed: true}},
		{"farewell", map[string]string{argoCDHook: "PostDelete"}, want{}},
		{"cleanup", map[string]string{argoCDHook: "PreDelete"}, want{}},
		{"shouted", map[string]string{argoCDHook: "POSTDELETE"}, want{}},
		{"sync-and-delete", map[string]string{argoCDHook: " PreSync , PostDelete,SyncFail"}, want{deployed: true, argoCD: "PreSync,SyncFail"}},
		{"sync", map[string]string{argoCDHook: "Sync"}, want{deployed: true, argoCD: "Sync"}},
		{"skip", map[string]string{argoCDHook: "Skip"}, want{deployed: true, argoCD: "Skip"}},
		// A Helm hook with Argo CD's delete annotation stays a Helm hook, without it.
		{"helm-install-argocd-delete", map[string]string{helmHook: "post-install", argoCDHook: "PostDelete"}, want{deployed: true, helm: "post-install"}},
		// An Argo CD hook with Helm's delete annotation stays an Argo CD hook, without it.
		{"argocd-sync-helm-delete", map[string]string{argoCDHook: "PreSync", helmHook: "post-delete"}, want{deployed: true, argoCD: "PreSync"}},
		{"both-delete", map[string]string{argoCDHook: "PostDelete", helmHook: "pre-delete"}, want{}},
		{"helm-delete", map[string]string{helmHook: "post-delete"}, want{}},
		{"helm-test", map[string]string{helmHook: "test"}, want{}},
		{"helm-upgrade", map[string]string{helmHook: "pre-upgrade"}, want{deployed: true, helm: "pre-upgrade"}},
	}
	templates := map[string]string{"Chart.yaml": "apiVersion: v2\nname: hooks\nversion: 1.0.0\n"}
	bundle := map[string]string{}
	for _, c := range cases {
		templates["templates/"+c.name+".yaml"] = hookConfigMap(c.name, c.annotations)
		bundle[c.name+".yaml"] = hookConfigMap(c.name, c.annotations)
	}
	sources := map[string][]oci.Layer{
		"chart":  chartLayer(ocitest.Chart(t, "hooks", templates)),
		"bundle": {bundleLayer(t, bundle)},
	}
	for kind, layers := range sources {
		t.Run(kind, func(t *testing.T) {
			res, err := render.Render(context.Background(), layers, render.Options{ReleaseName: "hooks", TargetNamespace: "hooks"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Chart != (kind == "chart") {
				t.Fatalf("rendered as a chart: %t", res.Chart)
			}
			got := map[string]want{}
			for _, o := range res.Objects {
				a := o.GetAnnotations()
				got[o.GetName()] = want{deployed: true, argoCD: a[argoCDHook], helm: a[helmHook]}
			}
			for _, c := range cases {
				if g := got[c.name]; g != c.want {
					t.Errorf("%s (%v): deployed %t, %s %q, %s %q; want deployed %t, %q, %q", c.name, c.annotations,
						g.deployed, argoCDHook, g.argoCD, helmHook, g.helm, c.want.deployed, c.want.argoCD, c.want.helm)
				}
			}
		})
	}
}
