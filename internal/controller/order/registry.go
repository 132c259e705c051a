package order

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// withPusher returns creds with the bundled registry's pusher of namespace added
// (oci.RegistryCredentials.NamespacePusher: it writes namespace's repositories alone), in place
// of any credential the Product's Secret gives for that host.
func (r *Reconciler) withPusher(ctx context.Context, creds oci.Credentials, namespace string) (oci.Credentials, error) {
	var reader client.Reader = r.Client
	switch {
	case r.Credentials != nil:
		reader = r.Credentials
	case r.APIReader != nil:
		reader = r.APIReader
	}
	registry, ok, err := bundled.ReadCredentials(ctx, reader, r.Config.Namespace)
	if err != nil || !ok {
		return creds, err
	}
	out := make(oci.Credentials, len(creds)+1)
	for host, c := range creds {
		out[host] = c
	}
	out[r.Config.BundledRegistry] = registry.NamespacePusher(namespace)
	return out, nil
}

// ownRepositories refuses the repositories of the bundled registry that Kokumi keeps for
// another namespace than namespace: kokumi/<other>/… (Preparations) and vendor/<other>/…
// (vendored images). The controller signs in to the bundled registry as the pusher for every
// Order: without this, a Product could name another namespace's Preparation as its source, or
// its vendored image as an image, and have it copied into its own. Other repositories of the
// bundled registry (charts an admin pushed) stay shared.
func (r *Reconciler) ownRepositories(namespace string) func(repository string) error {
	return func(repository string) error {
		host, path, _ := strings.Cut(repository, "/")
		if host != r.Config.BundledRegistry {
			return nil
		}
		top, rest, _ := strings.Cut(path, "/")
		if top != preparation.ArtifactDir && top != images.VendorDir {
			return nil
		}
		if owner, _, _ := strings.Cut(rest, "/"); owner != namespace {
			return fmt.Errorf("%s belongs to namespace %s in the bundled registry: an Order of namespace %s reads and writes only its own namespace's Preparations (%s/%s/…) and vendored images (%s/%s/…)",
				repository, owner, namespace, preparation.ArtifactDir, namespace, images.VendorDir, namespace)
		}
		return nil
	}
}
