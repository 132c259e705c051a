package registrycreds

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
)

// Argo CD reads each Serving's artifacts through one repository Secret, which the Serving's
// reconcile writes before its Applications: the exact repository of the Serving's Order
// (oci://<bundled registry>/kokumi/<namespace>/<order>), scoped to the AppProject of its
// Environment, signed in as the puller of the Serving's namespace. Argo CD gives a repository
// Secret with a project to that project's Applications alone (a credential template's project
// it does not match), so an Application of another AppProject that names the same repository
// finds no credentials, and the registry turns it away.

// +kubebuilder:rbac:groups="",namespace=argocd,resources=secrets,verbs=get;list;watch;create;update;delete

// PullSecrets keeps the repository Secret of each Serving in Argo CD's namespace.
type PullSecrets struct {
	// Client writes the Secrets.
	Client client.Client
	// Cache reads Kokumi's repository Secrets in Argo CD's namespace and the registry's
	// credentials Secret, and nothing else (NewPullSecretCache).
	Cache client.Reader
	// APIReader reads a Secret the cache has not seen yet.
	APIReader client.Reader
	// Config names Kokumi's and Argo CD's namespaces and the bundled registry.
	Config config.Config
}

// NewPullSecretCache caches Kokumi's repository Secrets in Argo CD's namespace and the bundled
// registry's credentials Secret in Kokumi's, and no other Secret.
func NewPullSecretCache(mgr ctrl.Manager, cfg config.Config) (cache.Cache, error) {
	namespaces := map[string]cache.Config{
		cfg.ArgoCDNamespace: {LabelSelector: labels.SelectorFromSet(argocd.PullSecretLabels())},
		// The credentials; when both namespaces are the same, this wins and the repository
		// Secrets are among what it holds.
		cfg.Namespace: {FieldSelector: fields.OneTermEqualSelector("metadata.name", oci.RegistryCredentialsSecret)},
	}
	if cfg.Namespace == cfg.ArgoCDNamespace {
		namespaces[cfg.Namespace] = cache.Config{}
	}
	return NewSecretCache(mgr, namespaces, "Argo CD's repository Secrets")
}

// Serves reports whether Argo CD reads repoURL through a Secret this keeper writes: an artifact
// of the bundled registry.
func (p *PullSecrets) Serves(repoURL string) bool {
	return p.Config.BundledRegistry != "" && strings.HasPrefix(repoURL, "oci://"+p.Config.BundledRegistry+"/")
}

// Keep writes the repository Secret of serving for repoURL and project when it is absent or
// differs, and nothing when it is as wanted: a quiet fleet costs no write.
func (p *PullSecrets) Keep(ctx context.Context, serving metav1.Object, repoURL, project string) error {
	creds, ok, err := bundled.ReadCredentials(ctx, p.Cache, p.Config.Namespace)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no Secret %s/%s yet, which Argo CD's credentials for the bundled registry come from: the controller makes it at start", p.Config.Namespace, oci.RegistryCredentialsSecret)
	}
	puller := creds.NamespacePuller(serving.GetNamespace())
	want := argocd.PullSecret{
		ArgoCDNamespace: p.Config.ArgoCDNamespace, Serving: serving, RepoURL: repoURL, Project: project,
		Username: puller.Username, Password: puller.Password, PlainHTTP: true,
	}.Secret()
	_, err = argocd.KeepSecret(ctx, p.Client, p.Cache, p.APIReader, want,
		fmt.Sprintf("Argo CD's repository Secret of Serving %s/%s", serving.GetNamespace(), serving.GetName()))
	return err
}

// Remove deletes the repository Secret of the Serving key when the Serving that wrote it is gone:
// serving is what the API server holds under key right now (nil: nothing). The Secret is read from
// the API server and deleted at its UID and resourceVersion, so that a Serving re-created
// under the same name, which wrote its own meanwhile, keeps it.
func (p *PullSecrets) Remove(ctx context.Context, key types.NamespacedName, serving metav1.Object) error {
	var have corev1.Secret
	name := types.NamespacedName{Namespace: p.Config.ArgoCDNamespace, Name: argocd.PullSecretName(key.Namespace, key.Name)}
	if err := p.APIReader.Get(ctx, name, &have); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !argocd.Orphaned(&have, key.Namespace, key.Name, serving) {
		return nil
	}
	err := p.Client.Delete(ctx, &have, client.Preconditions{UID: ptr.To(have.UID), ResourceVersion: ptr.To(have.ResourceVersion)})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Argo CD's repository Secret %s of Serving %s, which is gone: %w", name, key, err)
	}
	return nil
}

// Orphaned reports whether the cache holds a repository Secret of the Serving key that serving
// (what the cache holds under key; nil: nothing) did not write: Remove then reads it again.
func (p *PullSecrets) Orphaned(ctx context.Context, key types.NamespacedName, serving metav1.Object) bool {
	var have corev1.Secret
	name := types.NamespacedName{Namespace: p.Config.ArgoCDNamespace, Name: argocd.PullSecretName(key.Namespace, key.Name)}
	if err := p.Cache.Get(ctx, name, &have); err != nil {
		return !apierrors.IsNotFound(err) // unsure: Remove reads it from the API server
	}
	return argocd.Orphaned(&have, key.Namespace, key.Name, serving)
}

// Servings lists the Servings the cached repository Secrets were written for, for the sweep
// of those whose Serving is gone.
func (p *PullSecrets) Servings(ctx context.Context) ([]types.NamespacedName, error) {
	var list corev1.SecretList
	if err := p.Cache.List(ctx, &list, client.InNamespace(p.Config.ArgoCDNamespace), client.MatchingLabels(argocd.PullSecretLabels())); err != nil {
		return nil, fmt.Errorf("list Argo CD's repository Secrets of Kokumi: %w", err)
	}
	var keys []types.NamespacedName
	for i := range list.Items {
		if key, ok := argocd.ServingOf(&list.Items[i]); ok {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// NewCredentialsCache caches the bundled registry's credentials Secret in Kokumi's namespace,
// and no other Secret: the Order reconciler signs in to the bundled registry as the pusher at
// every render, and reads the Secret from here rather than from the API server each time. A
// rotation reaches it through the watch.
func NewCredentialsCache(mgr ctrl.Manager, cfg config.Config) (cache.Cache, error) {
	namespaces := map[string]cache.Config{
		cfg.Namespace: {FieldSelector: fields.OneTermEqualSelector("metadata.name", oci.RegistryCredentialsSecret)},
	}
	return NewSecretCache(mgr, namespaces, "the registry's credentials Secret")
}

// NewSecretCache makes a cache of the Secrets of namespaces (each with its selectors) and of
// nothing else, added to mgr, which starts it; what names them in an error.
func NewSecretCache(mgr ctrl.Manager, namespaces map[string]cache.Config, what string) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:        mgr.GetHTTPClient(),
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		ByObject:          map[client.Object]cache.ByObject{&corev1.Secret{}: {Namespaces: namespaces}},
		DefaultNamespaces: namespaces, // only Secrets come from here
		// Nothing reads who wrote which field: at 10,000 Clusters that is 20,000 Secrets' worth.
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("create the cache of %s: %w", what, err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("add the cache of %s: %w", what, err)
	}
	return c, nil
}
