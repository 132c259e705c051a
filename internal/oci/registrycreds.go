package oci

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// PullerUsernameKey is the user name of the puller (Argo CD's repo-server).
	PullerUsernameKey = "puller-username"
	// PullerPasswordKey is the puller's password.
	PullerPasswordKey = "puller-password"
)

// Default user names of the bundled registry's identities.
const (
	// DefaultPusher is the user name Kokumi's controller pushes as.
	DefaultPusher = "kokumi-controller"
	// DefaultPuller is the user name Argo CD's repo-server pulls as.
	DefaultPuller = "argocd-repo-server"
)

// RegistryCredentials are the two identities of the bundled registry.
type RegistryCredentials struct {
	// Pusher pulls and pushes: Kokumi's controller.
	Pusher Credential
	// Puller only pulls: Argo CD's repo-server.
	Puller Credential
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
// and the two user names must differ.
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
