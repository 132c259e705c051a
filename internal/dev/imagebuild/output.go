package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PushOptions say how to reach the registry.
type PushOptions struct {
	// Insecure talks plain HTTP to the registry, for registries on loopback or in a test.
	Insecure bool
	// Auth signs in to the registry; nil means the default keychain: the Docker config
	// ($DOCKER_CONFIG or ~/.docker/config.json) and its credential helpers, else anonymous.
	Auth authn.Authenticator
	// Remote are further options of go-containerregistry's remote package (transport, jobs…),
	// not auth options: use Auth.
	Remote []remote.Option
}

// Push pushes the image index to ref (registry/repository[:tag]) and then each platform's SBOM,
// by digest, as a referrer of that platform's image: the registry lists it in its referrers API,
// or, when it has none, go-containerregistry updates the referrers tag (sha256-<digest>) as the
// OCI distribution spec says. It returns the pushed index by digest.
func Push(ctx context.Context, im *Image, ref string, o PushOptions) (name.Digest, error) {
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return name.Digest{}, fmt.Errorf("parse image reference %q: %w", ref, err)
	}
	if _, ok := r.(name.Digest); ok {
		return name.Digest{}, fmt.Errorf("image reference %q: push to a tag, not a digest", ref)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if o.Auth != nil {
		opts[1] = remote.WithAuth(o.Auth)
	}
	opts = append(opts, o.Remote...)

	d, err := im.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	if err := remote.WriteIndex(r, im.Index, opts...); err != nil {
		return name.Digest{}, fmt.Errorf("push image index to %s: %w", r, err)
	}
	for _, p := range im.Platforms {
		sd, err := p.SBOM.Digest()
		if err != nil {
			return name.Digest{}, fmt.Errorf("digest %s SBOM: %w", platformString(p.Platform), err)
		}
		if err := remote.Write(r.Context().Digest(sd.String()), p.SBOM, opts...); err != nil {
			return name.Digest{}, fmt.Errorf("push %s SBOM to %s: %w", platformString(p.Platform), r.Context(), err)
		}
	}
	return r.Context().Digest(d.String()), nil
}

// WriteLayout writes the image as an OCI image layout in dir: the index, named by its version
// (org.opencontainers.image.ref.name) in index.json, and each SBOM listed in index.json too, by
// its descriptor with artifactType application/spdx+json, its manifest naming its image as
// subject (tools that read referrers from a layout, such as `oras discover --oci-layout`,
// find them so). An existing layout in dir is replaced; any other non-empty dir is an error.
// It returns the index's digest.
func WriteLayout(im *Image, dir string) (v1.Hash, error) {
	if err := clearLayout(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("start OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(im.Index, layout.WithAnnotations(map[string]string{
		AnnotationRefName: im.Version,
		LabelCreated:      im.Created.UTC().Format(time.RFC3339),
	})); err != nil {
		return v1.Hash{}, fmt.Errorf("write image index to %s: %w", dir, err)
	}
	for _, pi := range im.Platforms {
		if err := p.WriteImage(pi.SBOM); err != nil {
			return v1.Hash{}, fmt.Errorf("write %s SBOM to %s: %w", platformString(pi.Platform), dir, err)
		}
		desc, err := partial.Descriptor(pi.SBOM)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("describe %s SBOM: %w", platformString(pi.Platform), err)
		}
		m, err := pi.SBOM.Manifest()
		if err != nil {
			return v1.Hash{}, fmt.Errorf("read %s SBOM manifest: %w", platformString(pi.Platform), err)
		}
		desc.ArtifactType = m.ArtifactType
		desc.Annotations = m.Annotations
		if err := p.AppendDescriptor(*desc); err != nil {
			return v1.Hash{}, fmt.Errorf("list %s SBOM in %s: %w", platformString(pi.Platform), dir, err)
		}
	}
	return im.Digest()
}

// clearLayout empties dir when it holds an OCI layout (or nothing), so a new build does not
// leave the blobs of the last one, and refuses to touch any other directory.
func clearLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("read output directory: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("output directory %s is not empty and not an OCI layout: not replacing it", dir)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clear old layout in %s: %w", dir, err)
		}
	}
	return nil
}
