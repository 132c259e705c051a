package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/render"
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

// pullManifests pulls a Preparation's artifact and returns its rendered manifests
// (manifests.yaml of its one gzipped tar layer).
func pullManifests(ctx context.Context, c *oci.Client, prep *v1.Preparation) ([]byte, error) {
	repository, digest := artifactOf(prep)
	if repository == "" || digest == "" {
		return nil, fmt.Errorf("preparation %s names no artifact (spec.artifact)", prep.Name)
	}
	pulled, err := c.PullWithin(ctx, repository, digest, oci.PullLimits{Bytes: maxManifests})
	if err != nil {
		hint := ""
		if !c.UsesPlainHTTP(registryHost(repository)) && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
			hint = " (the registry speaks plain HTTP: add --registry-insecure)"
		}
		return nil, fmt.Errorf("pull the artifact of Preparation %s from %s@%s: %w%s", prep.Name, repository, digest, err, hint)
	}
	for _, l := range pulled.Layers {
		if l.MediaType != oci.MediaTypeLayerTarGzip && l.MediaType != oci.MediaTypeLayerTar {
			continue
		}
		files, _, err := oci.UntarGzWithin(l.Data, l.MediaType == oci.MediaTypeLayerTarGzip, 0, maxManifests)
		if err != nil {
			return nil, fmt.Errorf("read the layer of Preparation %s's artifact: %w", prep.Name, err)
		}
		if m, ok := files[preparation.ManifestsFile]; ok {
			return m, nil
		}
	}
	return nil, fmt.Errorf("the artifact of Preparation %s (%s@%s) holds no %s: is it a Kokumi Preparation?", prep.Name, repository, digest, preparation.ManifestsFile)
}

// objectsOf splits rendered manifests into one YAML document per object, keyed by
// apiVersion, kind, namespace and name.
func objectsOf(prep string, manifests []byte) (map[string]string, error) {
	objs, err := render.Parse(manifests)
	if err != nil {
		return nil, fmt.Errorf("parse the manifests of Preparation %s: %w", prep, err)
	}
	out := make(map[string]string, len(objs))
	for _, obj := range objs {
		data, err := render.Marshal([]*unstructured.Unstructured{obj})
		if err != nil {
			return nil, fmt.Errorf("write %s %s of Preparation %s: %w", obj.GetKind(), obj.GetName(), prep, err)
		}
		key := obj.GetAPIVersion() + "/" + obj.GetKind() + "/"
		if ns := obj.GetNamespace(); ns != "" {
			key += ns + "/"
		}
		key += obj.GetName()
		out[key] = string(data)
	}
	return out, nil
}
