package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/changes"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/preparation"
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

// artifacts reads the artifacts of Preparations from their registries.
type artifacts struct {
	client *oci.Client
	// bundled are the hosts of Kokumi's bundled registry among them.
	bundled map[string]bool
	// puller is why the bundled registry is not signed in to as Kokumi's puller, when it is
	// not and the docker config holds nothing for it either: a refusal says so.
	puller string
	// moved reads an artifact of the bundled registry where --bundled-registry says it is now.
	moved bool
	// kokumiNamespace, argoCDNamespace and bundledRegistry are the plugin's flags.
	kokumiNamespace, argoCDNamespace, bundledRegistry string
	// diffArgs are the Preparations and namespace of the diff, as a hint repeats them.
	diffArgs string
}

// artifactClient reaches the registries of the artifacts of preps. Each registry is signed in
// to with what the docker config keychain holds for it; the bundled registry, when the
// keychain holds nothing for it, as Kokumi's read-only puller, read as you from the Secret
// bundled.PullerSecret of --kokumi-namespace, the Secret Kokumi's API server reads it from for
// the UI's diff (bundled.ReadPuller). The bundled registry is --bundled-registry and the host
// of every artifact in Kokumi's own repository of its Preparation (kokumi/<namespace>/<order>):
// only Kokumi's controller writes Preparations (tenants may only read them), and it pushes
// them to the bundled registry alone, so the puller is sent to no registry a tenant chose. A
// Secret you may not get, or that does not exist, leaves the bundled registry anonymous, and a
// refusal says what to do (pull). With moved, an artifact of the bundled registry is read
// from --bundled-registry (preparation.ArtifactLocation), such as a port-forward of it.
func (o *options) artifactClient(ctx context.Context, c client.Client, moved bool, preps ...*v1.Preparation) (*artifacts, error) {
	a := &artifacts{bundled: map[string]bool{o.bundledRegistry: true}, moved: moved,
		kokumiNamespace: o.kokumiNamespace, argoCDNamespace: o.argoCDNamespace, bundledRegistry: o.bundledRegistry}
	if len(preps) == 2 {
		a.diffArgs = preps[0].Name + " " + preps[1].Name + " -n " + preps[0].Namespace
	}
	var hosts []string
	for _, prep := range preps {
		repository, _ := a.location(prep)
		hosts = append(hosts, registryHost(repository))
		if a.ownRepository(prep, repository) {
			a.bundled[registryHost(repository)] = true
		}
	}
	a.client = o.registryClient(hosts...)
	var unsigned []string
	for _, h := range hosts {
		if _, ok := a.client.Credentials[h]; !ok && a.bundled[h] && !slices.Contains(unsigned, h) {
			unsigned = append(unsigned, h)
		}
	}
	if len(unsigned) == 0 {
		return a, nil
	}
	cred, ok, err := bundled.ReadPuller(ctx, c, o.kokumiNamespace)
	switch {
	case apierrors.IsForbidden(err):
		a.puller = "you may not get it"
	case err != nil:
		return nil, err
	case !ok:
		a.puller = "it does not exist (is Kokumi's namespace not " + o.kokumiNamespace + "? See --kokumi-namespace)"
	default:
		for _, h := range unsigned {
			a.client.Credentials[h] = cred
		}
	}
	return a, nil
}

// location is where a Preparation's artifact is read: where spec.artifact.ref says, or, with
// moved, where --bundled-registry says the bundled registry is now.
func (a *artifacts) location(prep *v1.Preparation) (repository, digest string) {
	if a.moved {
		return preparation.ArtifactLocation(a.bundledRegistry, prep)
	}
	return artifactOf(prep)
}

// ownRepository says whether repository is Kokumi's own repository of prep in the bundled
// registry: kokumi/<namespace>/<order>.
func (a *artifacts) ownRepository(prep *v1.Preparation, repository string) bool {
	_, path, _ := strings.Cut(repository, "/")
	return path == preparation.OwnArtifactPath(prep.Namespace, prep.Spec.OrderRef.Name)
}

// pull pulls a Preparation's artifact and returns its rendered manifests. A registry that
// speaks plain HTTP says to add --registry-insecure; one that asks who you are, or refuses
// you, says how to sign in.
func (a *artifacts) pull(ctx context.Context, prep *v1.Preparation) ([]byte, error) {
	repository, digest := a.location(prep)
	host := registryHost(repository)
	m, err := changes.PullManifests(ctx, a.client, prep.Name, repository, digest, maxManifests)
	if err == nil {
		return m, nil
	}
	if !a.client.UsesPlainHTTP(host) && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return nil, fmt.Errorf("%w (the registry speaks plain HTTP: add --registry-insecure)", err)
	}
	var netErr *net.OpError
	if a.bundled[host] && !a.moved && errors.As(err, &netErr) {
		return nil, fmt.Errorf(`%w.
Kokumi's bundled registry at %s cannot be reached from here: it runs inside the cluster. Port-forward it and name it with --bundled-registry:

  kubectl -n %s port-forward service/kokumi-registry 5000:5000 &
  kubectl kokumi diff %s --manifests --bundled-registry localhost:5000`, err, host, a.kokumiNamespace, a.diffArgs)
	}
	status := oci.RefusalStatus(err)
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		return nil, err
	}
	if !a.bundled[host] {
		return nil, fmt.Errorf("%w.\nThe registry %s refused to let you pull: sign in to it with docker login %s (the plugin reads your docker config and its credential helpers)", err, host, host)
	}
	how := fmt.Sprintf("\nKokumi's bundled registry at %s refused to let you pull.", host)
	if a.puller != "" {
		how += fmt.Sprintf(" The plugin signs in to it as Kokumi's read-only puller, from the Secret %s/%s, but %s.", a.kokumiNamespace, bundled.PullerSecret, a.puller)
	}
	how += fmt.Sprintf(` Either ask an admin of %s to let you get that Secret, or sign in as the puller of namespace %s, which reads that namespace's artifacts alone (an admin of %s reads its password from the repository Secret Kokumi gives Argo CD for a Serving of the namespace):

  kubectl -n %s get secret -l %s=%s,%s=%s -o jsonpath='{.items[0].data.password}' | base64 -d | docker login %s -u %s --password-stdin`,
		a.kokumiNamespace, prep.Namespace, a.argoCDNamespace, a.argoCDNamespace, argocd.LabelServingNamespace, prep.Namespace,
		argocd.LabelSecretType, argocd.SecretTypeRepository, host, oci.NamespacePullerPrefix+prep.Namespace)
	return nil, fmt.Errorf("%w.%s", err, how)
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
