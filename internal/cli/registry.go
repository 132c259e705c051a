package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/changes"
	"github.com/kokumi-dev/kokumi/internal/oci"
)

// maxManifests bounds the uncompressed manifests read of one artifact.
const maxManifests = 64 << 20

// registryClient reaches registries as Kokumi does (internal/oci), signed in to each of hosts
// with what the docker config keychain (~/.docker/config.json, $DOCKER_CONFIG, credential
// helpers) holds for it; other hosts, and hosts it holds nothing for, are reached
// anonymously. With --registry-insecure every host is reached over plain HTTP.
func (o *options) registryClient(hosts ...string) *oci.Client {
	c := &oci.Client{Credentials: oci.Credentials{}}
	for _, host := range hosts {
		if host == "" {
			continue
		}
		if o.registryInsecure {
			c.PlainHTTP = append(c.PlainHTTP, host)
		}
		if cred, ok := keychainCredential(host); ok {
			c.Credentials[host] = cred
		}
	}
	return c
}

// keychainCredential is what the docker config keychain holds for a registry host.
func keychainCredential(host string) (oci.Credential, bool) {
	reg, err := name.NewRegistry(host)
	if err != nil {
		return oci.Credential{}, false
	}
	a, err := authn.DefaultKeychain.Resolve(reg)
	if err != nil || a == authn.Anonymous {
		return oci.Credential{}, false
	}
	cfg, err := a.Authorization()
	if err != nil {
		return oci.Credential{}, false
	}
	switch {
	case cfg.Username != "" || cfg.Password != "":
		return oci.Credential{Username: cfg.Username, Password: cfg.Password}, true
	case cfg.Auth != "":
		raw, err := base64.StdEncoding.DecodeString(cfg.Auth)
		if err != nil {
			return oci.Credential{}, false
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		return oci.Credential{Username: user, Password: pass}, ok
	case cfg.RegistryToken != "":
		return oci.Credential{Password: cfg.RegistryToken}, true
	}
	return oci.Credential{}, false
}

// artifactOf is where a Preparation's artifact is: its repository (host/path), as
// spec.artifact.ref names it, and its digest.
func artifactOf(prep *v1.Preparation) (repository, digest string) {
	repository, digest, ok := strings.Cut(oci.TrimScheme(prep.Spec.Artifact.Ref), "@")
	if !ok || prep.Spec.Artifact.Digest != "" {
		digest = prep.Spec.Artifact.Digest
	}
	return repository, digest
}

// registryHost is the host[:port] of a repository.
func registryHost(repository string) string {
	host, _, _ := strings.Cut(repository, "/")
	return host
}

// pullManifests pulls a Preparation's artifact and returns its rendered manifests, saying to
// add --registry-insecure when the registry turns out to speak plain HTTP.
func pullManifests(ctx context.Context, c *oci.Client, prep *v1.Preparation) ([]byte, error) {
	repository, digest := artifactOf(prep)
	m, err := changes.PullManifests(ctx, c, prep.Name, repository, digest, maxManifests)
	if err != nil && !c.UsesPlainHTTP(registryHost(repository)) && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return nil, fmt.Errorf("%w (the registry speaks plain HTTP: add --registry-insecure)", err)
	}
	return m, err
}
