package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What makes the hub behave as a real cluster for the people who use Kokumi there: the
// controllers of kube-controller-manager the docs rely on, and the roles an installation gives
// people (config/rbac).

// HubControllers are the controllers of kube-controller-manager the hub runs: those of a real
// cluster that Kokumi and its docs rely on. The garbage collector deletes an Order's Serving
// and Preparations with it (their ownerReferences name the Order), and a Serving's
// verification Jobs with it; the namespace controller empties a deleted namespace and removes
// it; the ClusterRole aggregation controller fills the standard admin, edit and view roles from
// the roles labelled for them, such as kokumi-tenant and kokumi-view. The Job controller runs
// the verification Jobs of roll-outs (their Pods run on the hub's simulated node), the
// TTL-after-finished controller deletes them a day after they finished, and the ServiceAccount
// controller makes the ServiceAccount "default" of each namespace they run as. The node
// lifecycle controller lifts the not-ready taint the API server gives a new node once the node
// is Ready (KWOK keeps it so, and its Lease fresh): until then nothing is scheduled there.
var HubControllers = []string{"garbage-collector-controller", "namespace-controller", "clusterrole-aggregation-controller",
	"job-controller", "ttl-after-finished-controller", "serviceaccount-controller", "node-lifecycle-controller"}

// PeopleRBAC are the files of config/rbac that give people their roles, as an installation
// applies them: kokumi-admin, kokumi-tenant (aggregated into admin and edit), kokumi-view
// (aggregated into view), kokumi-approver (bound by an admin), the public keys everyone may
// read, and the admission policies that keep Kokumi's finalizer on Servings and hold the names
// of who paused, promoted and approved to the writers. The controller's and the server's own roles are
// InstallIdentities': `kokumi dev` runs each as its ServiceAccount (test/e2e, as a cluster admin).
var PeopleRBAC = []string{"kokumi_admin_role.yaml", "kokumi_tenant_role.yaml", "kokumi_approver_role.yaml", "public_keys.yaml",
	"serving_finalizer_policy.yaml", "serving_rollout_policy.yaml", "serving_approval_policy.yaml"}

// controllerManager says how to run kube-controller-manager as name on the cluster of
// kubeconfig, with the given controllers ("*" for a cluster's defaults) and extra flags.
func controllerManager(name, binary, kubeconfig string, controllers []string, extra ...string) processSpec {
	return processSpec{
		name: name + "-kube-controller-manager",
		path: binary,
		args: append([]string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-skip-lookup=true",
			"--secure-port=0",
			"--leader-elect=false",
			"--cluster-name=" + name,
			"--use-service-account-credentials=false",
			"--controllers=" + strings.Join(controllers, ","),
		}, extra...),
	}
}

// InstallPeopleRBAC applies the files of PeopleRBAC from the config/rbac of the checkout at
// root to the cluster of c, creating Kokumi's namespace (where two of its Roles live) first.
func InstallPeopleRBAC(ctx context.Context, c client.Client, root string) error {
	if err := createIfMissing(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KokumiNamespace}}); err != nil {
		return err
	}
	for _, name := range PeopleRBAC {
		if err := applyFile(ctx, c, filepath.Join(root, "config", "rbac", name)); err != nil {
			return fmt.Errorf("apply the roles people are given: %w", err)
		}
	}
	return nil
}

// Aggregated reports whether the standard role holds every rule of the ClusterRoles its
// aggregation rule selects, as the ClusterRole aggregation controller makes it.
func Aggregated(ctx context.Context, c client.Client, standard string) (bool, error) {
	var role rbacv1.ClusterRole
	if err := c.Get(ctx, client.ObjectKey{Name: standard}, &role); err != nil {
		return false, fmt.Errorf("get ClusterRole %s: %w", standard, err)
	}
	if role.AggregationRule == nil {
		return false, fmt.Errorf("ClusterRole %s aggregates nothing", standard)
	}
	var roles rbacv1.ClusterRoleList
	if err := c.List(ctx, &roles); err != nil {
		return false, fmt.Errorf("list ClusterRoles: %w", err)
	}
	for _, sel := range role.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			return false, fmt.Errorf("aggregation rule of %s: %w", standard, err)
		}
		for _, r := range roles.Items {
			if r.Name == standard || !selector.Matches(labels.Set(r.Labels)) {
				continue
			}
			for _, rule := range r.Rules {
				if !hasRule(role.Rules, rule) {
					return false, nil
				}
			}
		}
	}
	return true, nil
}

func hasRule(rules []rbacv1.PolicyRule, want rbacv1.PolicyRule) bool {
	for _, r := range rules {
		if slices.Equal(r.APIGroups, want.APIGroups) && slices.Equal(r.Resources, want.Resources) &&
			slices.Equal(r.Verbs, want.Verbs) && slices.Equal(r.ResourceNames, want.ResourceNames) &&
			slices.Equal(r.NonResourceURLs, want.NonResourceURLs) {
			return true
		}
	}
	return false
}
