// Package quickstart runs the steps of docs/quickstart.md that need no member cluster, as
// written, on a real API server.
package quickstart

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// demoHub starts an API server set up as `kokumi dev` sets up its hub before anything else:
// the roles people are given (config/rbac) and the demo's tenant namespace, platform. It stops
// when the test ends.
func demoHub(ctx context.Context, t *testing.T) *harness.Env {
	t.Helper()
	env, err := harness.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := sandbox.InstallPeopleRBAC(ctx, env.Client, env.Assets.Root); err != nil {
		t.Fatal(err)
	}
	if err := env.CreateNamespace(ctx, "platform"); err != nil {
		t.Fatal(err)
	}
	return env
}

// The quickstart's RBAC steps run as written on a hub set up as `kokumi dev` sets it up:
// kube-controller-manager with the hub's controllers (HubControllers, the ClusterRole
// aggregation controller among them) and config/rbac's roles for people. A ServiceAccount
// bound to edit in platform may order, promote and read there, may not change an Environment,
// and is refused in kokumi-system and on Clusters: each printed answer must be the doc's.
// (test/e2e runs the same steps on the fleet `kokumi dev` starts.)
func TestQuickstartRBACStepsRunAsWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := demoHub(ctx, t)
	// Nothing but the aggregation controller fills edit: the API server leaves it empty.
	if ok, err := sandbox.Aggregated(ctx, env.Client, "edit"); err != nil || ok {
		t.Fatalf("edit holds kokumi-tenant's rules before any controller ran (%v, %v)", ok, err)
	}
	if err := env.StartControllers(env.Assets, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"admin", "edit", "view"} {
		harness.Eventually(t, "ClusterRole "+role+" aggregated by kube-controller-manager", time.Minute, func() error {
			ok, err := sandbox.Aggregated(ctx, env.Client, role)
			if err == nil && !ok {
				err = fmt.Errorf("%s lacks rules of the roles it aggregates", role)
			}
			return err
		})
	}

	ran, compared, err := harness.QuickstartRBAC.Run(ctx, env.Assets.Root, env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if ran < 3 || compared == 0 {
		t.Fatalf("ran %d steps of %q, compared %d outputs: the doc changed shape", ran, harness.QuickstartRBAC.Heading, compared)
	}
}
