package oci

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// Credential is a user name and password (or token) for one registry.
type Credential struct {
	// Username is the user name; empty with a bearer token.
	Username string
	// Password is the password or token.
	Password string
}

// Credentials maps registry hosts to what signs in to them. The zero value is anonymous.
type Credentials map[string]Credential

// dockerConfig is the part of a kubernetes.io/dockerconfigjson Secret Kokumi reads.
type dockerConfig struct {
	Auths map[string]struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Auth     string `json:"auth"`
	} `json:"auths"`
}

// ParseDockerConfig reads the .dockerconfigjson of a kubernetes.io/dockerconfigjson Secret.
func ParseDockerConfig(data []byte) (Credentials, error) {
	var cfg dockerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("parse .dockerconfigjson: %w", err)
	}
	creds := Credentials{}
	for host, a := range cfg.Auths {
		c := Credential{Username: a.Username, Password: a.Password}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("decode auth of %s in .dockerconfigjson: %w", host, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("auth of %s in .dockerconfigjson is not user:password", host)
			}
			c = Credential{Username: user, Password: pass}
		}
		creds[normalizeHost(host)] = c
	}
	return creds, nil
}

// Lookup returns the credential for a registry host, and whether there is one.
func (c Credentials) Lookup(host string) (Credential, bool) {
	cred, ok := c[normalizeHost(host)]
	return cred, ok
}

// normalizeHost turns the keys docker config files use (https://host/v1/, docker.io aliases)
// into a bare host[:port].
func normalizeHost(host string) string {
	host = strings.TrimPrefix(host, "https://")
	host = strings.TrimPrefix(host, "http://")
	host, _, _ = strings.Cut(host, "/")
	switch host {
	case "index.docker.io", "registry-1.docker.io", "docker.io":
		return "index.docker.io"
	}
	return host
}

// Keychain signs go-containerregistry's clients in with Credentials: a user and password, or a
// bearer token when the user name is empty; hosts without a credential are reached anonymously.
type Keychain struct{ Credentials Credentials }

// Resolve implements authn.Keychain.
func (k Keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	c, ok := k.Credentials.Lookup(r.RegistryStr())
	if !ok {
		return authn.Anonymous, nil
	}
	if c.Username == "" {
		return &authn.Bearer{Token: c.Password}, nil
	}
	return &authn.Basic{Username: c.Username, Password: c.Password}, nil
}
