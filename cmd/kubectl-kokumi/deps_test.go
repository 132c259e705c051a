package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestThePluginLinksNoRendererRegistryServerOrManager lists what the plugin links, all the way
// down: a person's kubectl plugin carries no Helm SDK, no registry server and no controller
// manager (depguard checks the direct imports; this checks every package beneath them).
func TestThePluginLinksNoRendererRegistryServerOrManager(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"helm.sh/helm/",
		"github.com/distribution/distribution/",
		"sigs.k8s.io/controller-runtime/pkg/manager",
		"github.com/kokumi-dev/kokumi/internal/controller",
		"github.com/kokumi-dev/kokumi/internal/server",
		"github.com/kokumi-dev/kokumi/internal/render",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("kubectl-kokumi links %s", pkg)
			}
		}
	}
}
