package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
)

// The fleet's bundled registry runs in this process with authentication on, as an installation
// runs it: it signs in the pusher and the puller of the Secret oci.RegistryCredentialsSecret in
// Kokumi's namespace on the hub, read when needed. The fleet creates that Secret when the hub
// comes up (as an installer may), so that the demo chart is pushed before Kokumi's controller
// starts; the controller keeps it from then on and gives Argo CD the puller.

// startRegistry serves the bundled registry, in this process, with its content in the state
// directory.
func (f *Fleet) startRegistry() error {
	addr, err := f.ports.addr("registry")
	if err != nil {
		return err
	}
	r, err := registry.StartWithOptions(addr, registry.Options{
		Dir:      filepath.Join(f.opts.StateDir, "registry"),
		GCPeriod: time.Hour, GCGrace: registry.DefaultGCGrace,
		Credentials: func() (oci.RegistryCredentials, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return f.RegistryCredentials(ctx)
		},
	})
	if err != nil {
		return fmt.Errorf("start the bundled registry: %w", err)
	}
	f.registry = r
	f.Registry = r.Addr
	return nil
}

// RegistryCredentials reads the bundled registry's pusher and puller from the hub.
func (f *Fleet) RegistryCredentials(ctx context.Context) (oci.RegistryCredentials, error) {
	c, err := f.hubClient()
	if err != nil {
		return oci.RegistryCredentials{}, err
	}
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: KokumiNamespace, Name: oci.RegistryCredentialsSecret}, &s); err != nil {
		return oci.RegistryCredentials{}, fmt.Errorf("read the bundled registry's credentials on the hub: %w", err)
	}
	creds, err := oci.ParseRegistryCredentials(s.Data)
	if err != nil {
		return creds, fmt.Errorf("secret %s/%s on the hub: %w", KokumiNamespace, oci.RegistryCredentialsSecret, err)
	}
	return creds, nil
}

// seedRegistryCredentials creates the credentials Secret on the hub, with random passwords,
// unless it exists (a fleet started again keeps its credentials).
func (f *Fleet) seedRegistryCredentials(ctx context.Context) error {
	c, err := f.hubClient()
	if err != nil {
		return err
	}
	if err := createIfMissing(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KokumiNamespace}}); err != nil {
		return err
	}
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		return err
	}
	return createIfMissing(ctx, c, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: oci.RegistryCredentialsSecret, Namespace: KokumiNamespace},
		Data:       creds.Data(),
	})
}

// hubClient returns the one admin client of the hub the registry reads its credentials with.
func (f *Fleet) hubClient() (client.Client, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub != nil {
		return f.hub, nil
	}
	if f.Hub == nil || f.Hub.Config == nil {
		return nil, fmt.Errorf("the hub is not up yet")
	}
	c, err := f.AdminClient()
	if err != nil {
		return nil, err
	}
	f.hub = c
	return c, nil
}

// PushDemo pushes the demo's chart and image (see PushDemo) into the fleet's bundled registry,
// as the pusher.
func (f *Fleet) PushDemo(ctx context.Context, chartDir string) (*Demo, error) {
	creds, err := f.RegistryCredentials(ctx)
	if err != nil {
		return nil, err
	}
	return PushDemo(ctx, f.Registry, creds.Pusher, chartDir)
}
