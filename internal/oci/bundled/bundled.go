// Package bundled holds the clients of the bundled registry that sign in with the credentials
// Kokumi keeps in Secrets: the pusher (the controller) and the puller (the API server's reads of
// deployment records and artifacts). Credentials are read when needed, without a cache.
package bundled

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci"
)

// PullerSecret is the Secret of Kokumi's namespace that holds the puller alone (keys username
// and password), kept by the controller: the API server may read it, and not the pusher's.
const PullerSecret = "kokumi-registry-puller"

// Timeout bounds one write or read of artifacts or records in a registry.
const Timeout = 30 * time.Second

// ReadCredentials reads the credentials Secret (oci.RegistryCredentialsSecret) of namespace; ok is false when it does
// not exist.
func ReadCredentials(ctx context.Context, reader client.Reader, namespace string) (creds oci.RegistryCredentials, ok bool, err error) {
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

// Pusher returns an oci.Client that signs in to the bundled registry as the pusher,
// whose credentials reader reads when needed: the client may be made before the controller
// creates them, and outlives a rotation. Without the Secret (a registry with authentication
// off) it reaches the registry anonymously.
func Pusher(reader client.Reader, cfg config.Config) *oci.Client {
	return signedIn(cfg, func(ctx context.Context) (oci.Credential, bool, error) {
		creds, ok, err := ReadCredentials(ctx, reader, cfg.Namespace)
		return creds.Pusher, ok, err
	})
}

// Puller reaches the bundled registry as the puller, read from PullerSecret, the one Secret
// that holds it alone: the API server reads deployment records with it, and may not read the
// pusher's. Argo CD never gets it: it pulls as each namespace's puller.
func Puller(reader client.Reader, cfg config.Config) *oci.Client {
	return signedIn(cfg, func(ctx context.Context) (oci.Credential, bool, error) {
		return ReadPuller(ctx, reader, cfg.Namespace)
	})
}

// ReadPuller reads the puller from PullerSecret of namespace (Kokumi's); ok is false when the
// Secret does not exist. The API server reads it so, and the kubectl plugin as its user.
func ReadPuller(ctx context.Context, reader client.Reader, namespace string) (cred oci.Credential, ok bool, err error) {
	var s corev1.Secret
	err = reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: PullerSecret}, &s)
	if apierrors.IsNotFound(err) {
		return oci.Credential{}, false, nil
	}
	if err != nil {
		return oci.Credential{}, false, fmt.Errorf("read the bundled registry's puller %s/%s: %w", namespace, PullerSecret, err)
	}
	return oci.Credential{Username: string(s.Data["username"]), Password: string(s.Data["password"])}, true, nil
}

// signedIn reaches the bundled registry with the credential read by credential; one
// the reader may not read leaves the client anonymous, and the registry says whether that is
// enough.
func signedIn(cfg config.Config, credential func(ctx context.Context) (oci.Credential, bool, error)) *oci.Client {
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
