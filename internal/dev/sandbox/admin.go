package sandbox

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// What an admin sets up on the hub before tenants deploy: the demo's and the end-to-end tests'
// Clusters, Environment and AppProject.

// KokumiNamespace is Kokumi's own namespace on the hub: Cluster credentials live there.
const KokumiNamespace = "kokumi-system"

// EnvironmentLabel is the label the demo's Environment selects its Clusters by.
const EnvironmentLabel = "environment"

// StagingLabel marks the member the demo's Environment staging selects (edge-1).
const StagingLabel = "stage"

// AdminClient returns a client of the hub that knows the built-in kinds and Kokumi's.
func (f *Fleet) AdminClient() (client.Client, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register built-in kinds: %w", err)
	}
	if err := v1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("register Kokumi's kinds: %w", err)
	}
	c, err := client.New(f.Hub.Config, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("client of the hub: %w", err)
	}
	return c, nil
}

// RegisterCluster registers a member with Kokumi as an admin does: a credentials Secret holding
// a kubeconfig of the member's identity in Kokumi's namespace, and a Cluster with labels.
func (f *Fleet) RegisterCluster(ctx context.Context, c *Cluster, labels map[string]string) error {
	hub, err := f.AdminClient()
	if err != nil {
		return err
	}
	if err := createIfMissing(ctx, hub, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KokumiNamespace}}); err != nil {
		return err
	}
	kubeconfig, err := c.IdentityKubeconfig()
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name + "-credentials", Namespace: KokumiNamespace},
		Data:       map[string][]byte{"kubeconfig": kubeconfig},
	}
	if err := apply(ctx, hub, secret); err != nil {
		return err
	}
	cluster := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Labels: labels},
		Spec: v1.ClusterSpec{
			Server:         c.Server,
			CredentialsRef: v1.LocalObjectReference{Name: secret.Name},
		},
	}
	existing := &v1.Cluster{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(cluster), existing); err == nil {
		existing.Labels, existing.Spec = labels, cluster.Spec
		if err := hub.Update(ctx, existing); err != nil {
			return fmt.Errorf("update Cluster %s: %w", c.Name, err)
		}
		return nil
	}
	if err := hub.Create(ctx, cluster); err != nil {
		return fmt.Errorf("register Cluster %s: %w", c.Name, err)
	}
	return nil
}

// RegisterDemoClusters registers every member but those named in except as the demo does: each
// labelled EnvironmentLabel=DemoEnvironment, the first also StagingLabel=DemoStagingEnvironment.
func (f *Fleet) RegisterDemoClusters(ctx context.Context, except ...string) error {
	for i, m := range f.Members() {
		if slices.Contains(except, m.Name) {
			continue
		}
		labels := map[string]string{EnvironmentLabel: DemoEnvironment}
		if i == 0 {
			labels[StagingLabel] = DemoStagingEnvironment
		}
		if err := f.RegisterCluster(ctx, m, labels); err != nil {
			return err
		}
	}
	return nil
}

// EnvironmentSetup is an Environment of a tenant namespace and the AppProject it deploys with.
type EnvironmentSetup struct {
	// Namespace is the tenant namespace the Environment and the Orders live in.
	Namespace string
	// Name is the Environment's name; its Clusters carry EnvironmentLabel=Name.
	Name string
	// Project is the AppProject's name.
	Project string
	// TargetNamespaces are the namespaces (globs) the AppProject lets it deploy into.
	TargetNamespaces []string
	// Selector picks the Environment's Clusters; empty means EnvironmentLabel=Name.
	Selector map[string]string
	// Requires are the stages the Environment requires first.
	Requires []v1.StageRequirement
}

// SetUpEnvironment creates the tenant namespace, the AppProject (admitting the namespace, and
// the target namespaces on every server) and the Environment selecting Clusters labelled
// EnvironmentLabel=Name.
func (f *Fleet) SetUpEnvironment(ctx context.Context, e EnvironmentSetup) error {
	hub, err := f.AdminClient()
	if err != nil {
		return err
	}
	if err := createIfMissing(ctx, hub, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.Namespace}}); err != nil {
		return err
	}
	spec := AppProjectSpec{
		SourceRepos:      []string{"*"},
		SourceNamespaces: []string{e.Namespace},
		// Argo CD creates the target namespace where it is missing.
		ClusterResourceWhitelist: []map[string]string{{"group": "", "kind": "Namespace"}},
	}
	for _, ns := range e.TargetNamespaces {
		spec.Destinations = append(spec.Destinations, AppProjectDestination{Server: "*", Namespace: ns})
	}
	if err := createIfMissing(ctx, hub, AppProject(f.ArgoCDNamespace, e.Project, spec)); err != nil {
		return err
	}
	selector := e.Selector
	if len(selector) == 0 {
		selector = map[string]string{EnvironmentLabel: e.Name}
	}
	env := &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace},
		Spec: v1.EnvironmentSpec{
			ClusterSelector: metav1.LabelSelector{MatchLabels: selector},
			Project:         e.Project,
			Requires:        e.Requires,
		},
	}
	return createIfMissing(ctx, hub, env)
}

// StagingOrder creates the demo's Order of the example's Product for the Environment staging,
// promoting automatically, so that each release runs there before edge takes it.
func (f *Fleet) StagingOrder(ctx context.Context, namespace string) error {
	hub, err := f.AdminClient()
	if err != nil {
		return err
	}
	return createIfMissing(ctx, hub, &v1.Order{
		ObjectMeta: metav1.ObjectMeta{Name: DemoStagingOrder, Namespace: namespace},
		Spec: v1.OrderSpec{
			ProductRef:     v1.LocalObjectReference{Name: DemoProduct},
			EnvironmentRef: v1.LocalObjectReference{Name: DemoStagingEnvironment},
			Promotion:      v1.Promotion{Mode: v1.PromotionAutomatic},
		},
	})
}
