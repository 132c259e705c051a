package harness

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
)

// AggregateTenantRoles applies Kokumi's tenant and view roles (config/rbac/kokumi_tenant_role.yaml)
// and runs kube-controller-manager's ClusterRole aggregation controller (the one a cluster
// runs, and the only one: these tests own their objects' lifecycle), then waits until it has
// filled the standard admin, edit and view roles from them: whoever holds edit in a namespace
// may then deliver there. It starts the controller once per control plane.
func (e *Env) AggregateTenantRoles(ctx context.Context) error {
	if _, err := e.Kubectl(ctx, "apply", "-f", filepath.Join(e.Assets.Root, "config", "rbac", "kokumi_tenant_role.yaml")); err != nil {
		return fmt.Errorf("apply the tenant roles: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !e.aggregating {
		if err := e.StartControllers(e.Assets, e.tmp, "clusterrole-aggregation-controller"); err != nil {
			return err
		}
		e.aggregating = true
	}
	for _, role := range []string{"admin", "edit", "view"} {
		for {
			ok, err := sandbox.Aggregated(ctx, e.Client, role)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("ClusterRole %s not aggregated: %w", role, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// AppStatus is what Argo CD reports of an Application, for CreateApplication.
type AppStatus struct {
	Health, Sync, Revision, Message string
	// Since is the health's lastTransitionTime.
	Since time.Time
}

// CreateApplication creates, in Argo CD's namespace argoNS, the Application Kokumi would keep
// for the Serving ns/serving on cluster (named <ns>-<serving>-<cluster>, project edge), with the
// status Argo CD would write, and returns its name.
func (e *Env) CreateApplication(ctx context.Context, argoNS, ns, serving, cluster string, st AppStatus) (string, error) {
	name := fmt.Sprintf("%s-%s-%s", ns, serving, cluster)
	a := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"project":     "edge",
		"source":      map[string]any{"repoURL": "oci://127.0.0.1:5000/" + ns + "/" + serving, "path": ".", "targetRevision": st.Revision},
		"destination": map[string]any{"server": "https://" + cluster + ".example:6443", "namespace": "podinfo"},
	}}}
	a.SetGroupVersionKind(argocd.ApplicationGVK)
	a.SetNamespace(argoNS)
	a.SetName(name)
	a.SetLabels(map[string]string{
		argocd.LabelServing: serving, argocd.LabelServingNamespace: ns, argocd.LabelCluster: cluster,
		argocd.LabelManagedBy: argocd.ManagedByKokumi,
	})
	if err := e.Client.Create(ctx, a); err != nil {
		return "", fmt.Errorf("create Application %s: %w", name, err)
	}
	a.Object["status"] = map[string]any{
		"sync":   map[string]any{"status": st.Sync, "revision": st.Revision},
		"health": map[string]any{"status": st.Health, "message": st.Message, "lastTransitionTime": st.Since.UTC().Format(time.RFC3339)},
	}
	if err := e.Client.Update(ctx, a); err != nil {
		return "", fmt.Errorf("set the status of Application %s: %w", name, err)
	}
	return name, nil
}

// ApprovalPolicyEnforced waits until the API server enforces the shipped admission policy
// kokumi-serving-approval once it is applied (the API server loads policies a moment after):
// a dry-run create of a Serving promoted in someone else's name, in namespace, is refused.
func (e *Env) ApprovalPolicyEnforced(t testing.TB, namespace string) {
	t.Helper()
	Eventually(t, "the API server enforces kokumi-serving-approval", time.Minute, func() error {
		probe := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "policy-probe"},
			Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "policy-probe"}, PreparationName: "policy-probe-1", PromotedBy: "nobody"}}
		err := e.Client.Create(context.Background(), probe, client.DryRunAll)
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "spec.promotedBy") {
			return nil
		}
		if err == nil {
			return errors.New("a promotion in someone else's name was admitted: the policy is not enforced yet")
		}
		return fmt.Errorf("a promotion in someone else's name: %w, want the policy's refusal", err)
	})
}
