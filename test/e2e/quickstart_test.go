//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// The quickstart's RBAC steps run as written on the fleet `kokumi dev` starts (the same
// StartFleet): its hub aggregates Kokumi's roles into edit, so a ServiceAccount bound to edit
// in platform gets the answers the doc shows, and is refused where the doc says.
func TestQuickstartRBACStepsOnTheFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The hub's aggregation controller fills edit within moments of the fleet's start.
	eventually(t, 30*time.Second, "ClusterRole edit aggregated", func(ctx context.Context) error {
		ok, err := sandbox.Aggregated(ctx, hub, "edit")
		if err == nil && !ok {
			err = fmt.Errorf("edit lacks rules of the roles it aggregates")
		}
		return err
	})
	ran, compared, err := harness.QuickstartRBAC.Run(ctx, assets.Root, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if ran < 3 || compared == 0 {
		t.Fatalf("ran %d steps of %q, compared %d outputs: the doc changed shape", ran, harness.QuickstartRBAC.Heading, compared)
	}
}
