// Package registrycreds keeps the bundled registry's credentials: it creates them when absent,
// keeps the puller's Secret for the API server in step, and gives Argo CD one credential
// template per namespace that has Orders, signing in as that namespace's puller.
package registrycreds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
)

// The bundled registry signs in the pusher, which Kokumi's controller pushes Preparations,
// vendored images and deployment records as; the puller, which Kokumi's API server reads
// records and artifacts of every namespace as; and one puller per namespace, which reads only
// that namespace's repositories (oci.RegistryCredentials.NamespacePuller). The first two live in
// the Secret oci.RegistryCredentialsSecret of Kokumi's namespace, which the controller creates
// when it is absent and the registry mounts; the controller copies the puller alone into
// bundled.PullerSecret, for the API server, and gives Argo CD one credential template
// (ArgoCDSecretName) per namespace that has Orders, and none for any other namespace. Secrets
// are read without the cache, which would list and watch every Secret; so are Orders, as the
// main shard caches only its own.

const (
	// secretTypeRepoCreds declares a credential template to Argo CD: it signs in to every
	// repository whose URL starts with the template's url.
	secretTypeRepoCreds = "repo-creds"
	// registryCredentialsResync is how often the keeper checks every Secret.
	registryCredentialsResync = time.Minute
	// registryCredentialsRetry is how soon the keeper tries again after a failure.
	registryCredentialsRetry = 10 * time.Second
	// LabelPullNamespace names, on an Argo CD credential template Kokumi keeps, the namespace
	// whose puller it signs in as.
	LabelPullNamespace = "delivery.kokumi.dev/registry-pull-namespace"
	// LegacyArgoCDSecret is the one credential template of earlier versions, which signed Argo
	// CD in as the puller of every namespace; the keeper deletes it.
	LegacyArgoCDSecret = "kokumi-bundled-registry"
)

// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,resourceNames=kokumi-registry-puller,verbs=update
// +kubebuilder:rbac:groups="",namespace=argocd,resources=secrets,verbs=get;list;create;update;delete
// +kubebuilder:rbac:groups=delivery.kokumi.dev,resources=orders,verbs=get;list;watch

// Setup adds the Keeper to a manager: it runs every minute, and for the namespace of each
// Order the manager's cache sees created or deleted.
func Setup(mgr ctrl.Manager, cfg config.Config) error {
	k := &Keeper{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Config: cfg}
	if err := mgr.Add(k); err != nil {
		return fmt.Errorf("add the keeper of the bundled registry's credentials: %w", err)
	}
	ofNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	})
	createdOrDeleted := predicate.Funcs{
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("registry-pull-credentials").
		Watches(&v1.Order{}, ofNamespace, builder.WithPredicates(createdOrDeleted)).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, k.KeepNamespace(ctx, req.Name)
		})); err != nil {
		return fmt.Errorf("set up the keeper of the namespaces' registry credentials: %w", err)
	}
	return nil
}

// Keeper creates the bundled registry's credentials at start, when absent, and keeps the
// puller's Secret and Argo CD's credential templates in step; it runs on the leader, and
// checks again every minute, so that a deleted Secret is made anew (with new passwords).
type Keeper struct {
	// Client writes the Secrets.
	Client client.Client
	// Reader reads Secrets and Orders from the API server.
	Reader client.Reader
	// Config names Kokumi's and Argo CD's namespaces and the bundled registry.
	Config config.Config
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the leader writes.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: it keeps every Secret until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("registry-credentials")
	for {
		wait := registryCredentialsResync
		if _, err := k.Ensure(ctx); err != nil {
			log.Error(err, "keep the bundled registry's credentials; trying again", "in", registryCredentialsRetry)
			wait = registryCredentialsRetry
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Ensure creates the credentials Secret with random passwords when it is absent, copies the
// puller into bundled.PullerSecret, gives Argo CD a credential template for each namespace
// with Orders and deletes the others (and LegacyArgoCDSecret), and returns the credentials.
func (k *Keeper) Ensure(ctx context.Context) (oci.RegistryCredentials, error) {
	creds, ok, err := bundled.ReadCredentials(ctx, k.Reader, k.Config.Namespace)
	if err != nil {
		return creds, err
	}
	if !ok {
		if creds, err = k.create(ctx); err != nil {
			return creds, err
		}
	}
	if err := k.keep(ctx, PullerSecret(k.Config, creds.Puller)); err != nil {
		return creds, err
	}
	legacy := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.Config.ArgoCDNamespace, Name: LegacyArgoCDSecret}}
	if err := client.IgnoreNotFound(k.Client.Delete(ctx, legacy)); err != nil {
		return creds, fmt.Errorf("delete Argo CD's credential template of every namespace %s/%s: %w", legacy.Namespace, legacy.Name, err)
	}
	return creds, k.keepNamespaces(ctx, creds)
}

// keepNamespaces gives Argo CD the credential template of every namespace with Orders, and
// deletes the templates of the namespaces without. The templates are listed before the Orders,
// so that one written for an Order created in between is not taken for a leftover.
func (k *Keeper) keepNamespaces(ctx context.Context, creds oci.RegistryCredentials) error {
	have := &metav1.PartialObjectMetadataList{}
	have.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := k.Reader.List(ctx, have, client.InNamespace(k.Config.ArgoCDNamespace),
		client.MatchingLabels{argocd.LabelManagedBy: argocd.ManagedByKokumi}, client.HasLabels{LabelPullNamespace}); err != nil {
		return fmt.Errorf("list Argo CD's credentials of the bundled registry in %s: %w", k.Config.ArgoCDNamespace, err)
	}
	orders := &metav1.PartialObjectMetadataList{}
	orders.SetGroupVersionKind(v1.GroupVersion.WithKind("OrderList"))
	if err := k.Reader.List(ctx, orders); err != nil {
		return fmt.Errorf("list the Orders, for Argo CD's credentials of the bundled registry: %w", err)
	}
	want := map[string]bool{}
	var errs []error
	for _, o := range orders.Items {
		if !want[o.Namespace] {
			want[o.Namespace] = true
			errs = append(errs, k.keep(ctx, ArgoCDRegistryCredentials(k.Config, o.Namespace, creds.NamespacePuller(o.Namespace))))
		}
	}
	for _, s := range have.Items {
		if !want[s.Labels[LabelPullNamespace]] {
			errs = append(errs, k.deleteArgoCD(ctx, s.Labels[LabelPullNamespace]))
		}
	}
	return errors.Join(errs...)
}

// KeepNamespace gives Argo CD the credential template of namespace when it has Orders, and
// deletes it when it has none.
func (k *Keeper) KeepNamespace(ctx context.Context, namespace string) error {
	orders := &metav1.PartialObjectMetadataList{}
	orders.SetGroupVersionKind(v1.GroupVersion.WithKind("OrderList"))
	if err := k.Reader.List(ctx, orders, client.InNamespace(namespace), client.Limit(1)); err != nil {
		return fmt.Errorf("list the Orders of namespace %s: %w", namespace, err)
	}
	if len(orders.Items) == 0 {
		return k.deleteArgoCD(ctx, namespace)
	}
	creds, ok, err := bundled.ReadCredentials(ctx, k.Reader, k.Config.Namespace)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no Secret %s/%s yet: the keeper makes it at start", k.Config.Namespace, oci.RegistryCredentialsSecret)
	}
	return k.keep(ctx, ArgoCDRegistryCredentials(k.Config, namespace, creds.NamespacePuller(namespace)))
}

// deleteArgoCD deletes the credential template of namespace, if there is one.
func (k *Keeper) deleteArgoCD(ctx context.Context, namespace string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.Config.ArgoCDNamespace, Name: ArgoCDSecretName(namespace)}}
	if err := client.IgnoreNotFound(k.Client.Delete(ctx, s)); err != nil {
		return fmt.Errorf("delete Argo CD's credentials of the bundled registry for namespace %s (%s/%s): %w", namespace, s.Namespace, s.Name, err)
	}
	return nil
}

// create makes the credentials Secret; when another writer made it first, it reads theirs.
func (k *Keeper) create(ctx context.Context) (oci.RegistryCredentials, error) {
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		return creds, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: oci.RegistryCredentialsSecret, Namespace: k.Config.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":      "kokumi",
				"app.kubernetes.io/component": "registry",
				argocd.LabelManagedBy:         argocd.ManagedByKokumi,
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: creds.Data(),
	}
	err = k.Client.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		theirs, ok, err := bundled.ReadCredentials(ctx, k.Reader, k.Config.Namespace)
		if err == nil && !ok {
			err = fmt.Errorf("secret %s/%s was created and deleted at once", k.Config.Namespace, oci.RegistryCredentialsSecret)
		}
		return theirs, err
	}
	if err != nil {
		return creds, fmt.Errorf("create the bundled registry's credentials Secret %s/%s: %w", k.Config.Namespace, oci.RegistryCredentialsSecret, err)
	}
	ctrl.LoggerFrom(ctx).Info("created the bundled registry's credentials", "secret", k.Config.Namespace+"/"+oci.RegistryCredentialsSecret)
	return creds, nil
}

// keep creates want, or updates the Secret of its name to want's data and labels.
func (k *Keeper) keep(ctx context.Context, want *corev1.Secret) error {
	var have corev1.Secret
	err := k.Reader.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := k.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("create the bundled registry's credentials %s/%s: %w", want.Namespace, want.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read the bundled registry's credentials %s/%s: %w", want.Namespace, want.Name, err)
	}
	if sameData(have.Data, want.Data) && hasLabels(have.Labels, want.Labels) {
		return nil
	}
	have.Data = want.Data
	if have.Labels == nil {
		have.Labels = map[string]string{}
	}
	for key, value := range want.Labels {
		have.Labels[key] = value
	}
	if err := k.Client.Update(ctx, &have); err != nil {
		return fmt.Errorf("update the bundled registry's credentials %s/%s: %w", want.Namespace, want.Name, err)
	}
	return nil
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for key, value := range a {
		if other, ok := b[key]; !ok || !bytes.Equal(value, other) {
			return false
		}
	}
	return true
}

func hasLabels(have, want map[string]string) bool {
	for key, value := range want {
		if have[key] != value {
			return false
		}
	}
	return true
}

// PullerSecret is bundled.PullerSecret: the puller alone, which the API server reads.
func PullerSecret(cfg config.Config, puller oci.Credential) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: bundled.PullerSecret, Namespace: cfg.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "kokumi", "app.kubernetes.io/component": "registry", argocd.LabelManagedBy: argocd.ManagedByKokumi},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"username": []byte(puller.Username), "password": []byte(puller.Password)},
	}
}

// ArgoCDSecretName is the name of namespace's credential template in Argo CD's namespace.
func ArgoCDSecretName(namespace string) string { return bundled.ArgoCDSecretName(namespace) }

// ArgoCDRegistryCredentials is Argo CD's credential template that signs the repo-server in to
// the bundled registry as namespace's puller. Argo CD (3.6) gives a repository the template
// whose url is the longest prefix of its repoURL (oci://<bundled registry>/kokumi/<namespace>/<order>);
// the trailing slash keeps it from matching another namespace that begins with the same name.
// A template's project is not matched by Argo CD, so none is set: what keeps an Application of
// another AppProject from naming this namespace's artifacts is that project's sourceRepos. The
// registry serves plain HTTP inside the cluster.
func ArgoCDRegistryCredentials(cfg config.Config, namespace string, puller oci.Credential) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: ArgoCDSecretName(namespace), Namespace: cfg.ArgoCDNamespace,
			Labels: map[string]string{
				argocd.LabelSecretType: secretTypeRepoCreds, argocd.LabelManagedBy: argocd.ManagedByKokumi,
				LabelPullNamespace: namespace,
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			"type":                 []byte("oci"),
			"url":                  []byte("oci://" + cfg.BundledRegistry + "/" + oci.ArtifactDir + "/" + namespace + "/"),
			"username":             []byte(puller.Username),
			"password":             []byte(puller.Password),
			"insecureOCIForceHttp": []byte("true"),
		},
	}
}
