//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
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

// The quickstart registers the member the demo leaves out (sandbox.DemoPluginMember) with the
// kubectl plugin, as written, on the fleet `kokumi dev` starts: `kubectl kokumi cluster add`
// (bin/kubectl-kokumi, which `make e2e` builds) reaches the member through the kubeconfig's
// context of that name, and the Cluster it writes turns Ready: Kokumi reaches the member with
// the token the plugin minted there.
func TestQuickstartClusterAddOnTheFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bin := filepath.Join(assets.Root, "bin")
	if _, err := os.Stat(filepath.Join(bin, "kubectl-kokumi")); err != nil {
		t.Fatalf("the kubectl plugin: %v (make build writes it)", err)
	}
	// Each step runs in a shell of its own: what the doc's first step exports, the reader's
	// terminal keeps for the next one; the test gives every step the same (Run sets KUBECONFIG).
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	name := sandbox.DemoPluginMember
	key := client.ObjectKey{Name: name}
	// An earlier test of the package may have registered the member as the demo does the others.
	if err := hub.Delete(ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); err == nil {
		eventually(t, 3*time.Minute, "the Cluster "+name+" registered earlier is gone", func(ctx context.Context) error {
			err := hub.Get(ctx, key, &v1.Cluster{})
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return fmt.Errorf("read it: %w", err)
			}
			return errors.New("still there")
		})
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	ran, _, err := harness.QuickstartClusterAdd.Run(ctx, assets.Root, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if ran != 2 {
		t.Fatalf("ran %d steps of %q, want 2 (the exports, then cluster add): the doc changed shape", ran, harness.QuickstartClusterAdd.Heading)
	}
	// cluster add waited for Ready (it fails otherwise); the Cluster is the plugin's.
	var c v1.Cluster
	if err := hub.Get(ctx, key, &c); err != nil {
		t.Fatal(err)
	}
	if c.Labels[sandbox.EnvironmentLabel] != sandbox.DemoEnvironment {
		t.Errorf("labels %v, want %s=%s as the doc writes", c.Labels, sandbox.EnvironmentLabel, sandbox.DemoEnvironment)
	}
	if ready := apimeta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v, want True", ready)
	}
	var creds corev1.Secret
	if err := hub.Get(ctx, client.ObjectKey{Namespace: sandbox.KokumiNamespace, Name: c.Spec.CredentialsRef.Name}, &creds); err != nil {
		t.Fatal(err)
	}
	if len(creds.Data["token"]) == 0 || len(creds.Data["kubeconfig"]) != 0 {
		t.Errorf("credentials Secret %s holds %v: want the token the plugin minted, not the demo's kubeconfig", creds.Name, slices.Sorted(maps.Keys(creds.Data)))
	}
	if _, err := member(t, name).CoreV1().ServiceAccounts("kokumi").Get(ctx, "kokumi-argocd-manager", metav1.GetOptions{}); err != nil {
		t.Errorf("the plugin's ServiceAccount on %s: %v", name, err)
	}
}
