package oci

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// RegistryCredentialsSecret is the Secret of Kokumi's namespace that holds the bundled
// registry's credentials (the keys below). The controller creates it when it is absent; the
// registry reads it mounted as files.
const RegistryCredentialsSecret = "kokumi-registry-credentials"

// The keys of RegistryCredentialsSecret, and the names of the files `kokumi registry
// --credentials-dir` reads.
const (
	// PusherUsernameKey is the user name of the pusher (Kokumi's controller).
	PusherUsernameKey = "pusher-username"
	// PusherPasswordKey is the pusher's password.
	PusherPasswordKey = "pusher-password"
	// PullerUsernameKey is the user name of the puller (Kokumi's own reads of every
	// namespace's artifacts and records: the API server's).
	PullerUsernameKey = "puller-username"
	// PullerPasswordKey is the puller's password.
	PullerPasswordKey = "puller-password"
)

// Default user names of the bundled registry's identities.
const (
	// DefaultPusher is the user name Kokumi's controller pushes as.
	DefaultPusher = "kokumi-controller"
	// DefaultPuller is the user name Kokumi's API server reads records and artifacts as. Argo
	// CD never gets it: it pulls each namespace's artifacts as that namespace's puller
	// (RegistryCredentials.NamespacePuller).
	DefaultPuller = "kokumi-puller"
)

// RegistryCredentials are the two stored identities of the bundled registry; the pusher's
// password also keys the namespace pullers (NamespacePuller), which are derived, not stored.
type RegistryCredentials struct {
	// Pusher pulls and pushes: Kokumi's controller.
	Pusher Credential
	// Puller only pulls, from every namespace: Kokumi's API server.
	Puller Credential
}

// NamespacePullerPrefix begins the user name of every namespace puller:
// NamespacePullerPrefix + <namespace>. The stored identities may not use it.
const NamespacePullerPrefix = "pull-"

// namespacePullerContext separates the namespace pullers' passwords from any other use of the
// pusher's password as a key.
const namespacePullerContext = "kokumi namespace puller v1\x00"

// NamespacePusherPrefix begins the user name of every namespace pusher:
// NamespacePusherPrefix + <namespace>. The stored identities may not use it.
const NamespacePusherPrefix = "push-"

// namespacePusherContext separates the namespace pushers' passwords from the pullers' and any
// other use of the pusher's password as a key.
const namespacePusherContext = "kokumi namespace pusher v1\x00"

// NamespacePuller is the identity that pulls only namespace's Preparations
// (kokumi/<namespace>/…) and vendored images (vendor/<namespace>/…): the one Argo CD and the
// namespace's Pods get. Its password is HMAC-SHA256 of the namespace keyed with the pusher's
// password, so that the registry checks it and the controller hands it out without storing
// one per namespace, and a new pusher password (a rotation) changes every one of them.
func (c RegistryCredentials) NamespacePuller(namespace string) Credential {
	return c.derived(NamespacePullerPrefix, namespacePullerContext, namespace)
}

// NamespacePusher is the identity the controller renders an Order of namespace as: it pushes
// only namespace's Preparations (kokumi/<namespace>/…) and vendored images
// (vendor/<namespace>/…), and reads those and the repositories of no namespace (charts an
// admin pushed), so that what keeps one tenant's render from writing or reading another's
// lives in the registry too, not only in Kokumi's client. Derived as NamespacePuller is.
func (c RegistryCredentials) NamespacePusher(namespace string) Credential {
	return c.derived(NamespacePusherPrefix, namespacePusherContext, namespace)
}

// derived is the identity prefix+namespace whose password is HMAC-SHA256 of context and the
// namespace, keyed with the pusher's password.
func (c RegistryCredentials) derived(prefix, context, namespace string) Credential {
	mac := hmac.New(sha256.New, []byte(c.Pusher.Password))
	mac.Write([]byte(context + namespace))
	return Credential{Username: prefix + namespace, Password: base64.RawURLEncoding.EncodeToString(mac.Sum(nil))}
}

// dnsLabel is a Kubernetes namespace's name (RFC 1123 label).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// NamespaceOfPuller returns the namespace of a namespace puller's user name; ok is false when
// username names no namespace puller.
func NamespaceOfPuller(username string) (namespace string, ok bool) {
	namespace, ok = strings.CutPrefix(username, NamespacePullerPrefix)
	return namespace, ok && dnsLabel.MatchString(namespace)
}

// NamespaceOfPusher returns the namespace of a namespace pusher's user name; ok is false when
// username names no namespace pusher.
func NamespaceOfPusher(username string) (namespace string, ok bool) {
	namespace, ok = strings.CutPrefix(username, NamespacePusherPrefix)
	return namespace, ok && dnsLabel.MatchString(namespace)
}

// GenerateRegistryCredentials makes the default users with random passwords (32 bytes each).
func GenerateRegistryCredentials() (RegistryCredentials, error) {
	pusher, err := randomPassword()
	if err != nil {
		return RegistryCredentials{}, err
	}
	puller, err := randomPassword()
	if err != nil {
		return RegistryCredentials{}, err
	}
	return RegistryCredentials{
		Pusher: Credential{Username: DefaultPusher, Password: pusher},
		Puller: Credential{Username: DefaultPuller, Password: puller},
	}, nil
}

func randomPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate a registry password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Data returns the credentials as the data of RegistryCredentialsSecret.
func (c RegistryCredentials) Data() map[string][]byte {
	return map[string][]byte{
		PusherUsernameKey: []byte(c.Pusher.Username),
		PusherPasswordKey: []byte(c.Pusher.Password),
		PullerUsernameKey: []byte(c.Puller.Username),
		PullerPasswordKey: []byte(c.Puller.Password),
	}
}

// ParseRegistryCredentials reads the data of RegistryCredentialsSecret. Every key must be set,
// the two user names must differ, and neither may begin with NamespacePullerPrefix or
// NamespacePusherPrefix.
func ParseRegistryCredentials(data map[string][]byte) (RegistryCredentials, error) {
	var missing []string
	value := func(key string) string {
		v := strings.TrimSpace(string(data[key]))
		if v == "" {
			missing = append(missing, key)
		}
		return v
	}
	c := RegistryCredentials{
		Pusher: Credential{Username: value(PusherUsernameKey), Password: value(PusherPasswordKey)},
		Puller: Credential{Username: value(PullerUsernameKey), Password: value(PullerPasswordKey)},
	}
	if len(missing) > 0 {
		return RegistryCredentials{}, fmt.Errorf("registry credentials lack %s", strings.Join(missing, ", "))
	}
	if c.Pusher.Username == c.Puller.Username {
		return RegistryCredentials{}, fmt.Errorf("the pusher and the puller are both %q: they must differ", c.Pusher.Username)
	}
	for _, name := range []string{c.Pusher.Username, c.Puller.Username} {
		for _, prefix := range []string{NamespacePullerPrefix, NamespacePusherPrefix} {
			if strings.HasPrefix(name, prefix) {
				return RegistryCredentials{}, fmt.Errorf("the user name %q begins with %q, which names the namespace pullers and pushers", name, prefix)
			}
		}
	}
	return c, nil
}

// ReadRegistryCredentials reads the credentials from dir, one file per key of
// RegistryCredentialsSecret, as a Secret volume mounts them.
func ReadRegistryCredentials(dir string) (RegistryCredentials, error) {
	data := map[string][]byte{}
	for _, key := range []string{PusherUsernameKey, PusherPasswordKey, PullerUsernameKey, PullerPasswordKey} {
		b, err := os.ReadFile(filepath.Join(dir, key))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return RegistryCredentials{}, fmt.Errorf("read registry credentials: %w", err)
		}
		data[key] = b
	}
	c, err := ParseRegistryCredentials(data)
	if err != nil {
		return RegistryCredentials{}, fmt.Errorf("read registry credentials in %s: %w", dir, err)
	}
	return c, nil
}

// The top directories of the bundled registry that Kokumi keeps per namespace.
const (
	// ArtifactDir holds the Preparations of each namespace: kokumi/<namespace>/<order>.
	ArtifactDir = "kokumi"
	// VendorDir holds the images vendored for each namespace: vendor/<namespace>/<source>.
	VendorDir = "vendor"
)

// OwnerOfRepository returns the namespace a repository of the bundled registry belongs to:
// <namespace> for ArtifactDir/<namespace>/… and VendorDir/<namespace>/…; ok is false for any
// other repository (charts an admin pushed, which no namespace owns).
func OwnerOfRepository(repository string) (namespace string, ok bool) {
	top, rest, _ := strings.Cut(repository, "/")
	if top != ArtifactDir && top != VendorDir {
		return "", false
	}
	namespace, below, _ := strings.Cut(rest, "/")
	if namespace == "" || below == "" {
		return "", false
	}
	return namespace, true
}
