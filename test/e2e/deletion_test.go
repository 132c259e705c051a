//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
)

// The hub deletes as a real cluster does (its kube-controller-manager runs the garbage
// collector and the namespace controller): deleting an Order deletes its Serving and its
// Preparations through their ownerReferences, and Kokumi deletes the Serving's Application;
// the other Order of the namespace keeps all of its. Deleting the namespace then removes it,
// not left Terminating: Kokumi lets the remaining Serving go once its Application has gone.
func TestDeletingAnOrderAndItsNamespaceOnTheHub(t *testing.T) {
	const (
		ns     = "team-deleted"
		target = "podinfo-deleted"
		gone   = "podinfo-gone"
		stays  = "podinfo-stays"
	)
	ctx := context.Background()
	must(t, fleet.RegisterDemoClusters(ctx, wideMembers...))
	must(t, fleet.SetUpEnvironment(ctx, sandbox.EnvironmentSetup{
		Namespace: ns, Name: sandbox.DemoStagingEnvironment, Project: "deleted", TargetNamespaces: []string{target},
		Selector: map[string]string{sandbox.StagingLabel: sandbox.DemoStagingEnvironment},
	}))
	t.Cleanup(func() { _ = hub.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
	must(t, hub.Create(ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns}, Spec: v1.ProductSpec{
		Source: v1.ProductSource{URL: demo.ChartURL, Version: demo.ChartVersion}, TargetNamespace: target,
		Render: &v1.RenderSpec{Helm: &v1.HelmRender{Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicaCount":1}`)}}},
	}}))
	for _, name := range []string{gone, stays} {
		must(t, hub.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1.OrderSpec{
			ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: sandbox.DemoStagingEnvironment},
			Promotion: v1.Promotion{Mode: v1.PromotionAutomatic},
		}}))
	}
	for _, name := range []string{gone, stays} {
		eventually(t, settle, "Serving "+name+" Deployed", func(ctx context.Context) error {
			var s v1.Serving
			if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
				return err
			}
			if c := readyCondition(&s); c == nil || c.Reason != v1.ReasonDeployed {
				return fmt.Errorf("Serving %s is %v", name, c)
			}
			return nil
		})
	}
	owned := func(ctx context.Context, order string) (serving bool, preparations, apps int, err error) {
		var s v1.Serving
		switch err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: order}, &s); {
		case err == nil:
			serving = true
		case !apierrors.IsNotFound(err):
			return false, 0, 0, err
		}
		var preps v1.PreparationList
		if err := hub.List(ctx, &preps, client.InNamespace(ns)); err != nil {
			return false, 0, 0, err
		}
		for _, p := range preps.Items {
			if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "Order" && ref.Name == order {
				preparations++
			}
		}
		all, err := servingApplications(ctx, ns, order)
		return serving, preparations, len(all), err
	}
	for _, name := range []string{gone, stays} {
		serving, preps, apps, err := owned(ctx, name)
		must(t, err)
		if !serving || preps == 0 || apps != 1 {
			t.Fatalf("Order %s deployed with Serving %t, %d Preparations, %d Applications; want a Serving, its Preparations and 1 Application", name, serving, preps, apps)
		}
	}

	start := time.Now()
	must(t, hub.Delete(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: gone, Namespace: ns}}))
	eventually(t, settle, "the deleted Order's Serving, Preparations and Application gone", func(ctx context.Context) error {
		serving, preps, apps, err := owned(ctx, gone)
		if err != nil {
			return err
		}
		if serving || preps > 0 || apps > 0 {
			return fmt.Errorf("Serving left %t, %d Preparations, %d Applications", serving, preps, apps)
		}
		return nil
	})
	t.Logf("Order %s's Serving, Preparations and Application gone %s after it", gone, time.Since(start).Round(100*time.Millisecond))
	if serving, preps, apps, err := owned(ctx, stays); err != nil || !serving || preps == 0 || apps != 1 {
		t.Fatalf("the other Order %s lost what it owns: Serving %t, %d Preparations, %d Applications (%v)", stays, serving, preps, apps, err)
	}

	start = time.Now()
	must(t, hub.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	eventually(t, settle, "namespace "+ns+" gone", func(ctx context.Context) error {
		var n corev1.Namespace
		switch err := hub.Get(ctx, client.ObjectKey{Name: ns}, &n); {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		default:
			return fmt.Errorf("namespace %s is %s: %v", ns, n.Status.Phase, n.Status.Conditions)
		}
	})
	t.Logf("namespace %s gone %s after its deletion", ns, time.Since(start).Round(100*time.Millisecond))
	apps, err := servingApplications(ctx, ns, stays)
	must(t, err)
	if len(apps) != 0 {
		t.Errorf("the namespace went, but %d Applications of its Serving %s stay", len(apps), stays)
	}
}
