package render_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/manifests"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/render"
)

func job(name, hook string) string {
	return `apiVersion: batch/v1
kind: Job
metadata:
  name: ` + name + `
  annotations:
    "helm.sh/hook": ` + hook + `
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: busybox:1.37
`
}

// Argo CD runs Helm's delete hooks when an Application is deleted; Kokumi deletes Applications
// when a cluster leaves, and what runs there keeps running: the chart's cleanup must not run.
// Test hooks are not deployed either. (TestArgoCDDeleteHooksAreNotDeployed covers Argo CD's
// own hook annotation, and bundles.)
func TestDeleteAndTestHooksAreNotDeployed(t *testing.T) {
	chart := ocitest.Chart(t, "hooks", map[string]string{
		"Chart.yaml":                    "apiVersion: v2\nname: hooks\nversion: 1.0.0\n",
		"templates/cm.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n",
		"templates/migrate.yaml":        job("migrate", "pre-install,pre-upgrade"),
		"templates/cleanup.yaml":        job("cleanup", "pre-delete"),
		"templates/farewell.yaml":       job("farewell", "post-delete"),
		"templates/setup-teardown.yaml": job("setup-teardown", "post-install,pre-delete"),
		"templates/smoke.yaml":          job("smoke", "test"),
	})
	res, err := render.Render(context.Background(), chartLayer(chart), render.Options{ReleaseName: "app", TargetNamespace: "app", RequireChart: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := manifests.Marshal(res.Objects)
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, gone := range []string{"name: cleanup", "name: farewell", "name: smoke", "pre-delete", "post-delete"} {
		if strings.Contains(text, gone) {
			t.Errorf("the render holds %q:\n%s", gone, text)
		}
	}
	for _, kept := range []string{"name: app", "name: migrate", "pre-install,pre-upgrade", "name: setup-teardown", "helm.sh/hook: post-install"} {
		if !strings.Contains(text, kept) {
			t.Errorf("the render lacks %q:\n%s", kept, text)
		}
	}
}
