package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// AggregateTenantRoles applies Kokumi's tenant and view roles (config/rbac/kokumi_tenant_role.yaml)
// and fills the standard admin, edit and view roles from them, as a cluster's controller
// manager does (the test control plane runs none): whoever holds edit in a namespace may then
// deliver there.
func (e *Env) AggregateTenantRoles(ctx context.Context) error {
	if _, err := e.Kubectl(ctx, "apply", "-f", filepath.Join(e.Assets.Root, "config", "rbac", "kokumi_tenant_role.yaml")); err != nil {
		return fmt.Errorf("apply the tenant roles: %w", err)
	}
	var roles rbacv1.ClusterRoleList
	if err := e.Client.List(ctx, &roles); err != nil {
		return fmt.Errorf("list ClusterRoles: %w", err)
	}
	for _, standard := range []string{"admin", "edit", "view"} {
		var role rbacv1.ClusterRole
		if err := e.Client.Get(ctx, client.ObjectKey{Name: standard}, &role); err != nil {
			return fmt.Errorf("get ClusterRole %s: %w", standard, err)
		}
		if role.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range role.AggregationRule.ClusterRoleSelectors {
			selector, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return fmt.Errorf("aggregation rule of %s: %w", standard, err)
			}
			for _, r := range roles.Items {
				if r.Name != standard && selector.Matches(labels.Set(r.Labels)) {
					rules = append(rules, r.Rules...)
				}
			}
		}
		role.Rules = rules
		if err := e.Client.Update(ctx, &role); err != nil {
			return fmt.Errorf("aggregate ClusterRole %s: %w", standard, err)
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
