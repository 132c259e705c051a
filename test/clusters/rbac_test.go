package clusters

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// userClient is a client of the hub authenticated as a user of the groups, by a client
// certificate the hub trusts.
func userClient(t *testing.T, name string, groups ...string) client.Client {
	t.Helper()
	cfg, err := env.AddUser(name, groups...)
	must(t, err)
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	must(t, err)
	return c
}

func bind(t *testing.T, namespace, name, kind, role, group string) {
	t.Helper()
	ref := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: kind, Name: role}
	subjects := []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: group}}
	var obj client.Object
	if namespace == "" {
		obj = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subjects}
	} else {
		must(t, env.CreateNamespace(context.Background(), namespace))
		obj = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, RoleRef: ref, Subjects: subjects}
	}
	must(t, env.Client.Create(context.Background(), obj))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
}

// allowed fails the test unless err is nil; forbidden fails it unless err is Forbidden.
func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: want allowed, got %v", what, err)
	}
}

func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: want Forbidden, got %v", what, err)
	}
}

func TestATenantDeliversInItsNamespaceAndNothingMore(t *testing.T) {
	ctx := context.Background()
	const ns, other = "team-rbac", "team-rbac-other"
	bind(t, ns, "devs-deliver", "ClusterRole", "kokumi-tenant", "team-rbac-devs")
	must(t, env.CreateNamespace(ctx, other))
	tenant := userClient(t, "alice", "team-rbac-devs")

	// What the admin set up for the tenant.
	edge := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns},
		Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: tier("edge")}, Project: "edge"}}
	must(t, env.Client.Create(ctx, edge))
	elsewhere := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: other},
		Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: tier("edge")}, Project: "edge"}}
	must(t, env.Client.Create(ctx, elsewhere))
	serving := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-edge", Namespace: ns},
		Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "podinfo-edge"}}}
	must(t, env.Client.Create(ctx, serving))
	putCredentials(t, "rbac-edge-1", map[string][]byte{"token": []byte("rbac-secret-token")})

	// It delivers: Products, Orders, a manual promotion.
	allowed(t, "create a Product", tenant.Create(ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-fleet", Namespace: ns},
		Spec: v1.ProductSpec{Source: v1.ProductSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1"}}}))
	allowed(t, "create an Order", tenant.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-edge", Namespace: ns},
		Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "podinfo-fleet"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"}}}))
	var s v1.Serving
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(serving), &s))
	patch := client.MergeFrom(s.DeepCopy())
	s.Spec.PreparationName, s.Spec.PromotedBy = "podinfo-edge-abc123", "alice"
	allowed(t, "promote by hand (spec.preparationName of a Serving)", tenant.Patch(ctx, &s, patch))
	allowed(t, "list Preparations", tenant.List(ctx, &v1.PreparationList{}, client.InNamespace(ns)))
	allowed(t, "read the Environments of its namespace", tenant.Get(ctx, client.ObjectKeyFromObject(edge), &v1.Environment{}))

	// It does not choose where to deploy, nor forge what was built.
	forbidden(t, "create an Environment", tenant.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "everywhere", Namespace: ns},
		Spec: v1.EnvironmentSpec{Project: "default"}}))
	var e v1.Environment
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(edge), &e))
	envPatch := client.MergeFrom(e.DeepCopy())
	e.Spec.ClusterSelector = metav1.LabelSelector{}
	forbidden(t, "change an Environment's selector", tenant.Patch(ctx, &e, envPatch))
	forbidden(t, "delete an Environment", tenant.Delete(ctx, edge))
	forbidden(t, "read the Environments of another namespace", tenant.Get(ctx, client.ObjectKeyFromObject(elsewhere), &v1.Environment{}))
	forbidden(t, "register a Cluster", tenant.Create(ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "rogue"},
		Spec: v1.ClusterSpec{Server: "https://rogue.example.com:6443", CredentialsRef: v1.LocalObjectReference{Name: "rogue"}}}))
	forbidden(t, "list Clusters", tenant.List(ctx, &v1.ClusterList{}))
	forbidden(t, "read a Cluster's credentials", tenant.Get(ctx, client.ObjectKey{Namespace: config.Namespace, Name: "rbac-edge-1"}, &corev1.Secret{}))
	forbidden(t, "list the credentials", tenant.List(ctx, &corev1.SecretList{}, client.InNamespace(config.Namespace)))
	forbidden(t, "create a Preparation", tenant.Create(ctx, &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: ns}}))
	forbidden(t, "create a Serving", tenant.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns},
		Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "other"}}}))
	forbidden(t, "create an Order in another namespace", tenant.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-edge", Namespace: other},
		Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "podinfo-fleet"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"}}}))
}

func TestAnAdminRegistersClustersAndKeepsCredentialsOnlyInKokumisNamespace(t *testing.T) {
	ctx := context.Background()
	bind(t, "", "platform-admins", "ClusterRole", "kokumi-admin", "platform-admins")
	bind(t, config.Namespace, "platform-admins", "Role", "kokumi-admin", "platform-admins")
	must(t, env.CreateNamespace(ctx, "team-admin"))
	admin := userClient(t, "carol", "platform-admins")

	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "admin-edge-1", Namespace: config.Namespace},
		StringData: map[string]string{"token": "admin-secret-token"}}
	allowed(t, "create credentials in Kokumi's namespace", admin.Create(ctx, creds))
	c := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "admin-edge-1", Labels: tier("admin-edge")},
		Spec: v1.ClusterSpec{Server: "https://admin-edge-1.example.com:6443", CredentialsRef: v1.LocalObjectReference{Name: "admin-edge-1"}}}
	allowed(t, "register a Cluster", admin.Create(ctx, c))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, c) })
	allowed(t, "create an Environment in a tenant's namespace", admin.Create(ctx, &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "team-admin"},
		Spec:       v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: tier("admin-edge")}, Project: "edge"}}))
	allowed(t, "read Orders everywhere", admin.List(ctx, &v1.OrderList{}))
	forbidden(t, "read Secrets of another namespace", admin.List(ctx, &corev1.SecretList{}, client.InNamespace("default")))
	forbidden(t, "write an Order", admin.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "team-admin"},
		Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: "p"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"}}}))
}

func TestTheTenantRolesAggregateIntoTheStandardRoles(t *testing.T) {
	// The API server defines admin, edit and view with aggregation rules; the cluster's
	// controller manager fills them from the roles their selectors match.
	ctx := context.Background()
	role := func(name string) *rbacv1.ClusterRole {
		var r rbacv1.ClusterRole
		must(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, &r))
		return &r
	}
	selects := func(standard, kokumi string) bool {
		agg := role(standard).AggregationRule
		if agg == nil {
			t.Fatalf("ClusterRole %s has no aggregation rule", standard)
		}
		for _, sel := range agg.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			must(t, err)
			if s.Matches(labels.Set(role(kokumi).Labels)) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		standard, kokumi string
		want             bool
	}{
		{"admin", "kokumi-tenant", true},
		{"edit", "kokumi-tenant", true},
		{"view", "kokumi-view", true},
		{"view", "kokumi-tenant", false},
		{"admin", "kokumi-admin", false},
		{"edit", "kokumi-admin", false},
	} {
		if got := selects(tc.standard, tc.kokumi); got != tc.want {
			t.Errorf("%s aggregates %s: %v, want %v", tc.standard, tc.kokumi, got, tc.want)
		}
	}
	// kokumi-view only reads.
	for _, rule := range role("kokumi-view").Rules {
		for _, verb := range rule.Verbs {
			if verb != "get" && verb != "list" && verb != "watch" {
				t.Errorf("kokumi-view grants %s on %v", verb, rule.Resources)
			}
		}
	}
}

// Anyone signed in reads the public keys that verify deployment records, and nothing else of
// Kokumi's namespace: not another ConfigMap, not the signing key.
func TestEveryoneReadsThePublicKeysAndNothingElseOfKokumisNamespace(t *testing.T) {
	ctx := context.Background()
	ns := "kokumi-system"
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "kokumi-public-keys", Namespace: ns}, Data: map[string]string{"cosign.pub": "-----BEGIN PUBLIC KEY-----"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "something-else", Namespace: ns}},
	} {
		if err := env.Client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	must(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kokumi-signing-key", Namespace: ns}})))
	stranger := userClient(t, "stranger", "no-roles-at-all")
	allowed(t, "get the public keys", stranger.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kokumi-public-keys"}, &corev1.ConfigMap{}))
	forbidden(t, "get another ConfigMap", stranger.Get(ctx, client.ObjectKey{Namespace: ns, Name: "something-else"}, &corev1.ConfigMap{}))
	forbidden(t, "list ConfigMaps", stranger.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)))
	forbidden(t, "get the signing key", stranger.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kokumi-signing-key"}, &corev1.Secret{}))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kokumi-public-keys", Namespace: ns}}
	forbidden(t, "change the public keys", stranger.Update(ctx, cm))
}

// A tenant who may promote (patch spec.preparationName) cannot point its Serving at another
// Order, such as one whose Environment it may not deploy to: the schema ties the two names.
func TestATenantCannotPointAServingAtAnotherOrder(t *testing.T) {
	ctx := context.Background()
	const ns = "team-orderref"
	bind(t, ns, "devs-deliver", "ClusterRole", "kokumi-tenant", "team-orderref-devs")
	must(t, env.Client.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns},
		Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "mine"}}}))
	tenant := userClient(t, "dev-orderref", "team-orderref-devs")
	var s v1.Serving
	must(t, tenant.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mine"}, &s))
	patch := client.MergeFrom(s.DeepCopy())
	s.Spec.PreparationName, s.Spec.PromotedBy = "mine-1", "dev-orderref"
	allowed(t, "promote its own Serving", tenant.Patch(ctx, &s, patch))
	patch = client.MergeFrom(s.DeepCopy())
	s.Spec.OrderRef.Name = "prod-order"
	err := tenant.Patch(ctx, &s, patch)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.orderRef.name must be the Serving's own name") {
		t.Errorf("point the Serving at another Order: want Invalid naming the rule, got %v", err)
	}
}

// The controller holds what it uses and nothing more: acting as its ServiceAccount with the
// shipped role, each right it does not need is refused (the suites run the reconcilers the same
// way, so a right it needs and lacks fails them).
func TestTheControllerHoldsNoMoreThanItUses(t *testing.T) {
	ctx := context.Background()
	sa, err := env.ControllerConfig(ctx)
	must(t, err)
	c, err := client.New(sa, client.Options{Scheme: env.Scheme})
	must(t, err)
	const tenantNS = "team-least-privilege"
	must(t, env.CreateNamespace(ctx, tenantNS))
	must(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: tenantNS}})))

	allowed(t, "get a Product's credentials Secret by name", c.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: "pull"}, &corev1.Secret{}))
	forbidden(t, "list a tenant's Secrets", c.List(ctx, &corev1.SecretList{}, client.InNamespace(tenantNS)))
	forbidden(t, "list Secrets cluster-wide", c.List(ctx, &corev1.SecretList{}))
	forbidden(t, "change a tenant's Secret", c.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: tenantNS}}))
	forbidden(t, "create a Secret in a tenant's namespace", c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted", Namespace: tenantNS}}))

	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	app.SetNamespace(tenantNS)
	app.SetName("outside-argocd")
	forbidden(t, "create an Application outside Argo CD's namespace", c.Create(ctx, app))
	forbidden(t, "list Applications cluster-wide", c.List(ctx, listOf(argocd.ApplicationListGVK)))
	forbidden(t, "take a Lease outside Kokumi's namespace", c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kokumi", Namespace: tenantNS}}))
	forbidden(t, "read ConfigMaps outside Kokumi's namespace", c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(tenantNS)))
	forbidden(t, "create a Product", c.Create(ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: tenantNS},
		Spec: v1.ProductSpec{Source: v1.ProductSource{URL: "oci://example.com/chart"}}}))
	forbidden(t, "change an Order's spec", c.Update(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "o", Namespace: tenantNS}}))
	forbidden(t, "create RBAC", c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "escalate"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"}}))

	// The secure metrics endpoint asks the API server who a scraper is and whether it may
	// read /metrics: those two reviews, and nothing near them.
	allowed(t, "create a TokenReview (authenticate a scraper)", c.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: "not-a-token"}}))
	allowed(t, "create a SubjectAccessReview (authorize a scraper)", c.Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "someone", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}}))
	forbidden(t, "create a LocalSubjectAccessReview", c.Create(ctx, &authorizationv1.LocalSubjectAccessReview{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS},
		Spec:       authorizationv1.SubjectAccessReviewSpec{User: "someone", ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: tenantNS, Verb: "get", Resource: "secrets"}}}))
	forbidden(t, "issue a ServiceAccount token", c.SubResource("token").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: tenantNS}}, &authenticationv1.TokenRequest{}))
	// At start it reads its own CRDs, by name, to refuse older ones; no other CRD, no list, no write.
	crd := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		u.SetName(name)
		return u
	}
	allowed(t, "get Kokumi's own CRD", c.Get(ctx, client.ObjectKey{Name: "servings.delivery.kokumi.dev"}, crd("")))
	forbidden(t, "get another CRD", c.Get(ctx, client.ObjectKey{Name: "applications.argoproj.io"}, crd("")))
	crds := &unstructured.UnstructuredList{}
	crds.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinitionList"})
	forbidden(t, "list CRDs", c.List(ctx, crds))
	forbidden(t, "delete Kokumi's CRD", c.Delete(ctx, crd("servings.delivery.kokumi.dev")))

	// Nor does it read its own metrics: scraping takes kokumi-metrics-reader, bound to Prometheus.
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:                  "system:serviceaccount:kokumi-system:kokumi-controller",
		Groups:                []string{"system:serviceaccounts", "system:serviceaccounts:kokumi-system", "system:authenticated"},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}}
	must(t, env.Client.Create(ctx, sar))
	if sar.Status.Allowed {
		t.Errorf("the controller may get /metrics: %s", sar.Status.Reason)
	}
}

func listOf(gvk schema.GroupVersionKind) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk)
	return l
}
