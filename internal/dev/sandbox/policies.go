package sandbox

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// SpecWriterPolicyServes waits until the API server of c applies the mutating admission policy
// kokumi-spec-writer (config/rbac/spec_writer_policy.yaml) to Orders and Products: the policy
// takes a moment to be loaded, and until the API server has the schema of Kokumi's CRDs, just
// installed, a write of either is refused as unavailable. A dry run in namespace that comes back
// stamped with the writer tells.
func SpecWriterPolicyServes(ctx context.Context, c client.Client, namespace string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, obj := range []client.Object{
		&v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: namespace},
			Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "probe"}, EnvironmentRef: v1.LocalObjectReference{Name: "probe"}}},
		&v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: namespace},
			Spec: v1.ProductSpec{Source: v1.ProductSource{URL: "oci://registry.example/probe"}}},
	} {
		for {
			probe := obj.DeepCopyObject().(client.Object)
			err := c.Create(ctx, probe, client.DryRunAll)
			if err == nil && probe.GetAnnotations()[preparation.AnnotationSpecWrittenBy] != "" {
				break
			}
			if err != nil && !apierrors.IsServiceUnavailable(err) {
				return fmt.Errorf("probe the admission policy kokumi-spec-writer: %w", err)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the admission policy kokumi-spec-writer does not serve %T: %v", obj, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}
