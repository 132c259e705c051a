package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/dev/chart"
)

// The demo runs Kokumi's controller and server as an installation does: each as its own
// ServiceAccount of Kokumi's namespace, bound to the roles config/rbac and config/server ship,
// so that the demo's admin token (which writes as the server) may not approve, as nowhere may
// it: approvals come from people.

// ControllerServiceAccount and ServerServiceAccount are the ServiceAccounts, in KokumiNamespace,
// the controller and the server run as (config/rbac/service_account.yaml, config/server/server.yaml).
const (
	ControllerServiceAccount = "kokumi-controller"
	ServerServiceAccount     = "kokumi-server"
)

// identityFiles are the files, relative to the checkout, that make the controller's and the
// server's ServiceAccounts and bind their shipped roles; of config/server/server.yaml, all but
// the Deployment and the Service.
var identityFiles = []string{"config/rbac/service_account.yaml", "config/rbac/role.yaml", "config/rbac/role_binding.yaml",
	"config/server/role.yaml", "config/server/server.yaml"}

// identityTokenTTL is how long the tokens the controller and the server run with last.
const identityTokenTTL = 30 * 24 * time.Hour

// Identities are the configs the controller and the server reach the hub with.
type Identities struct {
	// Controller reaches the hub as the ServiceAccount kokumi-controller.
	Controller *rest.Config
	// Server reaches the hub as the ServiceAccount kokumi-server.
	Server *rest.Config
}

// InstallIdentities applies the controller's and the server's ServiceAccounts and roles, as
// shipped in the checkout at root, to the cluster of admin (whose Argo CD namespace is argocd,
// as the shipped roles name it), and returns configs that act as each with a token the API
// server issued.
func InstallIdentities(ctx context.Context, admin *rest.Config, root string) (*Identities, error) {
	c, err := client.New(admin, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("client of the hub: %w", err)
	}
	for _, ns := range []string{KokumiNamespace, ArgoCDNamespace} {
		if err := createIfMissing(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	for _, name := range identityFiles {
		if err := applyFile(ctx, c, filepath.Join(root, name), "Deployment", "Service"); err != nil {
			return nil, err
		}
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, fmt.Errorf("client of the hub: %w", err)
	}
	ids := &Identities{}
	for _, id := range []struct {
		name string
		cfg  **rest.Config
	}{{ControllerServiceAccount, &ids.Controller}, {ServerServiceAccount, &ids.Server}} {
		seconds := int64(identityTokenTTL / time.Second)
		tr, err := cs.CoreV1().ServiceAccounts(KokumiNamespace).CreateToken(ctx, id.name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("issue a token for the ServiceAccount %s/%s: %w", KokumiNamespace, id.name, err)
		}
		cfg := rest.AnonymousClientConfig(admin)
		cfg.BearerToken = tr.Status.Token
		*id.cfg = cfg
	}
	return ids, nil
}

// applyFile applies the objects of the YAML file at path to c (server-side, as kokumi-dev),
// but those of the kinds in skip.
func applyFile(ctx context.Context, c client.Client, path string, skip ...string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	objs, err := chart.Decode(data)
	if err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	for _, o := range objs {
		if slices.Contains(skip, o.GetKind()) {
			continue
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.ForceOwnership, client.FieldOwner("kokumi-dev")); err != nil {
			return fmt.Errorf("apply %s %s of %s: %w", o.GetKind(), o.GetName(), path, err)
		}
	}
	return nil
}
