// Package examples holds the spec's examples, and a test that applies them with kubectl.
package examples

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var env *harness.Env

func TestMain(m *testing.M) { harness.Main(m, &env) }

func TestMultiClusterExampleApplies(t *testing.T) {
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, "platform"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kubectl(ctx, "apply", "-n", "platform", "-k", "multi-cluster"); err != nil {
		t.Fatal(err)
	}
	var o v1.Order
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "platform", Name: "podinfo-edge"}, &o); err != nil {
		t.Fatal(err)
	}
	if o.Spec.ProductRef.Name != "podinfo-fleet" || o.Spec.EnvironmentRef.Name != "edge" || o.Spec.Promotion.Mode != v1.PromotionAutomatic {
		t.Errorf("Order read back as %+v", o.Spec)
	}
	var p v1.Product
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "platform", Name: "podinfo-fleet"}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.Source.URL != "oci://ghcr.io/stefanprodan/charts/podinfo" || p.Spec.Source.Version != "6.14.1" ||
		p.Spec.TargetNamespace != "podinfo" || p.Spec.Images.Policy != v1.ImagePolicyPin {
		t.Errorf("Product read back as %+v", p.Spec)
	}
	if p.Spec.Render == nil || p.Spec.Render.Helm == nil || p.Spec.Render.Helm.Values == nil ||
		string(p.Spec.Render.Helm.Values.Raw) != `{"ui":{"message":"Hello from the edge"}}` {
		t.Errorf("Product values read back as %+v", p.Spec.Render)
	}
}
