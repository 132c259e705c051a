// Package registrycreds keeps the bundled registry's credentials: it creates them when absent
// and keeps Argo CD's credential template in step with the puller.
package registrycreds

import (
	"bytes"
	"context"
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

// The bundled registry signs two identities in (internal/oci): the pusher, which Kokumi's
// controller pushes Preparations, vendored images and deployment records as, and the puller,
// which Argo CD's repo-server pulls as. Their passwords live in the Secret
// oci.RegistryCredentialsSecret of Kokumi's namespace, which the controller creates when it is
// absent and the registry mounts; the controller keeps Argo CD's credential template
// (bundled.ArgoCDSecret) in step with the puller. Secrets are read without the
// cache, which would list and watch every Secret.

const (
	// secretTypeRepoCreds declares a credential template to Argo CD: it signs in to every
	// repository whose URL starts with the template's url.
	secretTypeRepoCreds = "repo-creds"
	// registryCredentialsResync is how often the keeper checks both Secrets.
	registryCredentialsResync = time.Minute
	// registryCredentialsRetry is how soon the keeper tries again after a failure.
	registryCredentialsRetry = 10 * time.Second
)

// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",namespace=argocd,resources=secrets,verbs=get;create;update

// Setup adds the Keeper to a manager.
func Setup(mgr ctrl.Manager, cfg config.Config) error {
	if err := mgr.Add(&Keeper{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Config: cfg}); err != nil {
		return fmt.Errorf("add the keeper of the bundled registry's credentials: %w", err)
	}
	return nil
}

// Keeper creates the bundled registry's credentials at start, when absent,
// and keeps Argo CD's credential template in step; it runs on the leader, and checks again
// every minute, so that a deleted Secret is made anew (with new passwords).
type Keeper struct {
	// Client writes the Secrets.
	Client client.Client
	// Reader reads them from the API server.
	Reader client.Reader
	// Config names Kokumi's and Argo CD's namespaces and the bundled registry.
	Config config.Config
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the leader writes.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: it keeps both Secrets until ctx ends.
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

// Ensure creates the credentials Secret with random passwords when it is absent, makes Argo
// CD's credential template sign in as its puller, and returns the credentials.
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
	return creds, k.keepArgoCD(ctx, creds.Puller)
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

// keepArgoCD creates or updates Argo CD's credential template for the bundled registry.
func (k *Keeper) keepArgoCD(ctx context.Context, puller oci.Credential) error {
	want := ArgoCDRegistryCredentials(k.Config, puller)
	var have corev1.Secret
	err := k.Reader.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := k.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("create Argo CD's credentials of the bundled registry %s/%s: %w", want.Namespace, want.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read Argo CD's credentials of the bundled registry %s/%s: %w", want.Namespace, want.Name, err)
	}
	if sameData(have.Data, want.Data) && have.Labels[argocd.LabelSecretType] == secretTypeRepoCreds {
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
		return fmt.Errorf("update Argo CD's credentials of the bundled registry %s/%s: %w", want.Namespace, want.Name, err)
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

// ArgoCDRegistryCredentials is Argo CD's credential template that signs the repo-server in to
// the bundled registry as puller. Argo CD gives a repository the template whose url is the
// longest prefix of its repoURL (oci://<bundled registry>/kokumi/<namespace>/<order>); the
// trailing slash keeps it from matching another port of the same host. The registry serves
// plain HTTP inside the cluster.
func ArgoCDRegistryCredentials(cfg config.Config, puller oci.Credential) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: bundled.ArgoCDSecret, Namespace: cfg.ArgoCDNamespace,
			Labels: map[string]string{argocd.LabelSecretType: secretTypeRepoCreds, argocd.LabelManagedBy: argocd.ManagedByKokumi},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			"type":                 []byte("oci"),
			"url":                  []byte("oci://" + cfg.BundledRegistry + "/"),
			"username":             []byte(puller.Username),
			"password":             []byte(puller.Password),
			"insecureOCIForceHttp": []byte("true"),
		},
	}
}
