// Package registrycreds keeps the bundled registry's credentials: it creates them when absent,
// keeps the puller's Secret for the API server in step, and gives Argo CD one repository Secret
// per Serving, scoped to its AppProject, signing in as the Serving's namespace's puller
// (PullSecrets).
package registrycreds

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
// bundled.PullerSecret, for the API server. Argo CD signs in through the repository Secret of
// each Serving (PullSecrets); the credential templates of earlier versions, one per namespace
// or one for every namespace, are deleted: Argo CD gives a template to an Application of any
// AppProject. Secrets are read without the cache, which would list and watch every Secret.

const (
	// registryCredentialsResync is how often the keeper checks every Secret.
	registryCredentialsResync = time.Minute
	// registryCredentialsRetry is how soon the keeper tries again after a failure.
	registryCredentialsRetry = 10 * time.Second
	// LabelPullNamespace names, on a credential template of earlier versions, the namespace
	// whose puller it signed Argo CD in as; the keeper deletes every such template.
	LabelPullNamespace = "delivery.kokumi.dev/registry-pull-namespace"
	// LegacyArgoCDSecret is the one credential template of earlier versions still, which signed
	// Argo CD in as the puller of every namespace; the keeper deletes it.
	LegacyArgoCDSecret = "kokumi-bundled-registry"
)

// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,resourceNames=kokumi-registry-puller,verbs=update
// +kubebuilder:rbac:groups="",namespace=argocd,resources=secrets,verbs=get;list;create;update;delete

// Setup adds the Keeper to a manager: it runs at start and every minute.
func Setup(mgr ctrl.Manager, cfg config.Config) error {
	k := &Keeper{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Config: cfg}
	if err := mgr.Add(k); err != nil {
		return fmt.Errorf("add the keeper of the bundled registry's credentials: %w", err)
	}
	return nil
}

// Keeper creates the bundled registry's credentials at start, when absent, and keeps the
// puller's Secret in step and deletes the credential templates of earlier versions; it runs on the leader, and
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
// puller into bundled.PullerSecret, deletes the credential templates of earlier versions, and
// returns the credentials.
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
	if err := k.deleteLegacy(ctx); err != nil {
		return creds, err
	}
	return creds, k.deleteTemplates(ctx)
}

// deleteLegacy deletes the credential template of every namespace that earlier versions gave
// Argo CD, when there is one: it is read first, so that a hub without it costs no write request
// a minute (a quiet fleet writes nothing).
func (k *Keeper) deleteLegacy(ctx context.Context) error {
	legacy := &metav1.PartialObjectMetadata{}
	legacy.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	key := client.ObjectKey{Namespace: k.Config.ArgoCDNamespace, Name: LegacyArgoCDSecret}
	if err := k.Reader.Get(ctx, key, legacy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("read Argo CD's credential template of every namespace %s: %w", key, err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := client.IgnoreNotFound(k.Client.Delete(ctx, s, client.Preconditions{UID: &legacy.UID})); err != nil {
		return fmt.Errorf("delete Argo CD's credential template of every namespace %s: %w", key, err)
	}
	return nil
}

// deleteTemplates deletes the credential templates earlier versions gave Argo CD, one per
// namespace with Orders: Argo CD gives a template to an Application of any AppProject, where
// each Serving's repository Secret (PullSecrets) is given to its own AppProject's alone.
func (k *Keeper) deleteTemplates(ctx context.Context) error {
	have := &metav1.PartialObjectMetadataList{}
	have.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := k.Reader.List(ctx, have, client.InNamespace(k.Config.ArgoCDNamespace),
		client.MatchingLabels{argocd.LabelManagedBy: argocd.ManagedByKokumi}, client.HasLabels{LabelPullNamespace}); err != nil {
		return fmt.Errorf("list Argo CD's credential templates of the bundled registry in %s: %w", k.Config.ArgoCDNamespace, err)
	}
	var errs []error
	for i := range have.Items {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: have.Items[i].Namespace, Name: have.Items[i].Name}}
		if err := client.IgnoreNotFound(k.Client.Delete(ctx, s, client.Preconditions{UID: &have.Items[i].UID})); err != nil {
			errs = append(errs, fmt.Errorf("delete Argo CD's credential template %s/%s of an earlier version: %w", s.Namespace, s.Name, err))
		}
	}
	return errors.Join(errs...)
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
	if !argocd.SyncSecret(&have, want) {
		return nil
	}
	if err := k.Client.Update(ctx, &have); err != nil {
		return fmt.Errorf("update the bundled registry's credentials %s/%s: %w", want.Namespace, want.Name, err)
	}
	return nil
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
