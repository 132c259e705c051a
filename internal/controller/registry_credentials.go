package controller

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
)

// The bundled registry signs two identities in (internal/oci): the pusher, which Kokumi's
// controller pushes Preparations, vendored images and deployment records as, and the puller,
// which Argo CD's repo-server pulls as. Their passwords live in the Secret
// oci.RegistryCredentialsSecret of Kokumi's namespace, which the controller creates when it is
// absent and the registry mounts; the controller keeps Argo CD's credential template
// (ArgoCDRegistryCredentialsSecret) in step with the puller. Secrets are read without the
// cache, which would list and watch every Secret.

// ArgoCDRegistryCredentialsSecret is the Argo CD credential template (repo-creds) in Argo CD's
// namespace that signs the repo-server in to the bundled registry as the puller.
const ArgoCDRegistryCredentialsSecret = "kokumi-bundled-registry"

const (
	// secretTypeRepoCreds declares a credential template to Argo CD: it signs in to every
	// repository whose URL starts with the template's url.
	secretTypeRepoCreds = "repo-creds"
	// registryCredentialsResync is how often the keeper checks both Secrets.
	registryCredentialsResync = time.Minute
	// registryCredentialsRetry is how soon the keeper tries again after a failure.
	registryCredentialsRetry = 10 * time.Second
	// artifactDir is the top directory of the Preparations of a namespace in the bundled
	// registry: kokumi/<namespace>/<order> (see artifactRepository).
	artifactDir = "kokumi"
)

// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",namespace=argocd,resources=secrets,verbs=get;create;update

func init() { setups = append(setups, SetupRegistryCredentials) }

// SetupRegistryCredentials adds the RegistryCredentialsKeeper to a manager.
func SetupRegistryCredentials(mgr ctrl.Manager, cfg Config) error {
	if err := mgr.Add(&RegistryCredentialsKeeper{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Config: cfg}); err != nil {
		return fmt.Errorf("add the keeper of the bundled registry's credentials: %w", err)
	}
	return nil
}

// RegistryCredentialsKeeper creates the bundled registry's credentials at start, when absent,
// and keeps Argo CD's credential template in step; it runs on the leader, and checks again
// every minute, so that a deleted Secret is made anew (with new passwords).
type RegistryCredentialsKeeper struct {
	// Client writes the Secrets.
	Client client.Client
	// Reader reads them from the API server.
	Reader client.Reader
	// Config names Kokumi's and Argo CD's namespaces and the bundled registry.
	Config Config
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the leader writes.
func (k *RegistryCredentialsKeeper) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: it keeps both Secrets until ctx ends.
func (k *RegistryCredentialsKeeper) Start(ctx context.Context) error {
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
func (k *RegistryCredentialsKeeper) Ensure(ctx context.Context) (oci.RegistryCredentials, error) {
	creds, ok, err := readRegistryCredentials(ctx, k.Reader, k.Config.Namespace)
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
func (k *RegistryCredentialsKeeper) create(ctx context.Context) (oci.RegistryCredentials, error) {
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
		theirs, ok, err := readRegistryCredentials(ctx, k.Reader, k.Config.Namespace)
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
func (k *RegistryCredentialsKeeper) keepArgoCD(ctx context.Context, puller oci.Credential) error {
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
func ArgoCDRegistryCredentials(cfg Config, puller oci.Credential) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: ArgoCDRegistryCredentialsSecret, Namespace: cfg.ArgoCDNamespace,
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

// readRegistryCredentials reads the credentials Secret of namespace; ok is false when it does
// not exist.
func readRegistryCredentials(ctx context.Context, reader client.Reader, namespace string) (creds oci.RegistryCredentials, ok bool, err error) {
	var secret corev1.Secret
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: oci.RegistryCredentialsSecret}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return creds, false, nil
		}
		return creds, false, fmt.Errorf("read the bundled registry's credentials Secret %s/%s: %w", namespace, oci.RegistryCredentialsSecret, err)
	}
	if creds, err = oci.ParseRegistryCredentials(secret.Data); err != nil {
		return creds, false, fmt.Errorf("secret %s/%s: %w: delete it, and the controller makes a new one", namespace, oci.RegistryCredentialsSecret, err)
	}
	return creds, true, nil
}

// pusherClient returns an oci.Client that signs in to the bundled registry as the pusher,
// whose credentials reader reads when needed: the client may be made before the controller
// creates them, and outlives a rotation. Without the Secret (a registry with authentication
// off) it reaches the registry anonymously.
func pusherClient(reader client.Reader, cfg Config) *oci.Client {
	return signedInClient(cfg, func(ctx context.Context) (oci.Credential, bool, error) {
		creds, ok, err := readRegistryCredentials(ctx, reader, cfg.Namespace)
		return creds.Pusher, ok, err
	})
}

// PullerClient reaches the bundled registry as the puller, read from Argo CD's repository
// credentials (ArgoCDRegistryCredentialsSecret), the one Secret that holds it alone: the API
// server reads deployment records with it, and may not read the pusher's.
func PullerClient(reader client.Reader, cfg Config) *oci.Client {
	return signedInClient(cfg, func(ctx context.Context) (oci.Credential, bool, error) {
		var s corev1.Secret
		err := reader.Get(ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: ArgoCDRegistryCredentialsSecret}, &s)
		if apierrors.IsNotFound(err) {
			return oci.Credential{}, false, nil
		}
		if err != nil {
			return oci.Credential{}, false, err
		}
		return oci.Credential{Username: string(s.Data["username"]), Password: string(s.Data["password"])}, true, nil
	})
}

// signedInClient reaches the bundled registry with the credential read by credential; one
// the reader may not read leaves the client anonymous, and the registry says whether that is
// enough.
func signedInClient(cfg Config, credential func(ctx context.Context) (oci.Credential, bool, error)) *oci.Client {
	return &oci.Client{
		PlainHTTP: []string{cfg.BundledRegistry},
		HTTPClient: &http.Client{Transport: &oci.SignIn{
			Host: cfg.BundledRegistry,
			Credential: func(ctx context.Context) (oci.Credential, bool, error) {
				cred, ok, err := credential(ctx)
				if apierrors.IsForbidden(err) {
					return oci.Credential{}, false, nil
				}
				return cred, ok, err
			},
		}},
	}
}

// withPusher returns creds with the bundled registry's pusher added, in place of any
// credential the Product's Secret gives for that host.
func (r *OrderReconciler) withPusher(ctx context.Context, creds oci.Credentials) (oci.Credentials, error) {
	var reader client.Reader = r.Client
	if r.APIReader != nil {
		reader = r.APIReader
	}
	registry, ok, err := readRegistryCredentials(ctx, reader, r.Config.Namespace)
	if err != nil || !ok {
		return creds, err
	}
	out := make(oci.Credentials, len(creds)+1)
	for host, c := range creds {
		out[host] = c
	}
	out[r.Config.BundledRegistry] = registry.Pusher
	return out, nil
}

// ownRepositories refuses the repositories of the bundled registry that Kokumi keeps for
// another namespace than namespace: kokumi/<other>/… (Preparations) and vendor/<other>/…
// (vendored images). The controller signs in to the bundled registry as the pusher for every
// Order: without this, a Product could name another namespace's Preparation as its source, or
// its vendored image as an image, and have it copied into its own. Other repositories of the
// bundled registry (charts an admin pushed) stay shared.
func (r *OrderReconciler) ownRepositories(namespace string) func(repository string) error {
	return func(repository string) error {
		host, path, _ := strings.Cut(repository, "/")
		if host != r.Config.BundledRegistry {
			return nil
		}
		top, rest, _ := strings.Cut(path, "/")
		if top != artifactDir && top != images.VendorDir {
			return nil
		}
		if owner, _, _ := strings.Cut(rest, "/"); owner != namespace {
			return fmt.Errorf("%s belongs to namespace %s in the bundled registry: an Order of namespace %s reads and writes only its own namespace's Preparations (%s/%s/…) and vendored images (%s/%s/…)",
				repository, owner, namespace, artifactDir, namespace, images.VendorDir, namespace)
		}
		return nil
	}
}
