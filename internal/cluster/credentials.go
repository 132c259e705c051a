package cluster

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Keys of a credentials Secret. A Secret holds either a kubeconfig under KeyKubeconfig, or a
// bearer token under KeyToken (and, optionally, a client certificate under KeyClientCert and
// KeyClientKey instead of or beside it) with the server's CA bundle under KeyCA. A Secret of
// type kubernetes.io/service-account-token has exactly KeyToken and KeyCA.
const (
	KeyKubeconfig = "kubeconfig"
	KeyToken      = "token"
	KeyCA         = "ca.crt"
	KeyClientCert = "tls.crt"
	KeyClientKey  = "tls.key"
)

// Credentials reach one cluster's API server. Format them with %v freely: they print redacted.
type Credentials struct {
	// BearerToken authenticates as a ServiceAccount or a user.
	BearerToken string
	// CAData is the PEM bundle that verifies the server's certificate; empty trusts the
	// system's roots.
	CAData []byte
	// CertData and KeyData are a PEM client certificate and its key.
	CertData []byte
	KeyData  []byte
	// Insecure skips the verification of the server's certificate (kubeconfig only).
	Insecure bool
	// ServerName overrides the name the server's certificate is verified against.
	ServerName string
}

// String prints what kind of credentials these are, never their content.
func (c Credentials) String() string {
	var kinds []string
	if c.BearerToken != "" {
		kinds = append(kinds, "token")
	}
	if len(c.CertData) > 0 {
		kinds = append(kinds, "client certificate")
	}
	if len(c.CAData) > 0 {
		kinds = append(kinds, "CA bundle")
	}
	if c.Insecure {
		kinds = append(kinds, "insecure")
	}
	return "Credentials{" + strings.Join(kinds, ", ") + " (redacted)}"
}

// GoString is String, so that %#v redacts too.
func (c Credentials) GoString() string { return c.String() }

// InvalidError says why a credentials Secret holds nothing usable, naming the key and the fix.
// Its message never contains credential data.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &InvalidError{msg: fmt.Sprintf(format, args...)}
}

// IsInvalid reports whether err says the credentials are unusable as given.
func IsInvalid(err error) bool {
	var ie *InvalidError
	return errors.As(err, &ie)
}

// ParseSecret reads the data of a credentials Secret. An error is an *InvalidError naming the
// key at fault and what to put there.
func ParseSecret(data map[string][]byte) (Credentials, error) {
	if kc, ok := data[KeyKubeconfig]; ok {
		return parseKubeconfig(kc)
	}
	c := Credentials{
		BearerToken: strings.TrimSpace(string(data[KeyToken])),
		CAData:      data[KeyCA],
		CertData:    data[KeyClientCert],
		KeyData:     data[KeyClientKey],
	}
	if c.BearerToken == "" && len(c.CertData) == 0 {
		return Credentials{}, invalid("holds neither %q nor %q (keys present: %s): put a kubeconfig under %q, "+
			"or a bearer token under %q with the server's CA bundle under %q", KeyKubeconfig, KeyToken,
			keyList(data), KeyKubeconfig, KeyToken, KeyCA)
	}
	if err := c.check(KeyToken, KeyCA, KeyClientCert, KeyClientKey); err != nil {
		return Credentials{}, err
	}
	return c, nil
}

func keyList(data map[string][]byte) string {
	if len(data) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, fmt.Sprintf("%q", k))
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// check verifies the token (no control characters) and the PEM parts, naming the keys they
// came from.
func (c Credentials) check(tokenKey, caKey, certKey, keyKey string) error {
	// A token goes into an HTTP header: a control character there fails every request, which
	// would read as an unreachable server.
	if i := strings.IndexFunc(c.BearerToken, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return invalid("%q holds a control character at byte %d: put the token there as the API server issued it, on one line (a base64 in a Secret's data is decoded once; do not encode it twice)", tokenKey, i)
	}
	if len(c.CAData) > 0 {
		if err := checkCertificates(c.CAData); err != nil {
			return invalid("%s is not a PEM CA bundle (%v): put the server's CA certificate there, "+
				"as `kubectl config view --raw` or the ServiceAccount token Secret shows it", caKey, err)
		}
	}
	if (len(c.CertData) > 0) != (len(c.KeyData) > 0) {
		return invalid("%s and %s come together: give both the client certificate and its key, or neither", certKey, keyKey)
	}
	if len(c.CertData) > 0 {
		if err := checkCertificates(c.CertData); err != nil {
			return invalid("%s is not a PEM certificate (%v): put the client certificate there", certKey, err)
		}
		if block, _ := pem.Decode(c.KeyData); block == nil || !strings.Contains(block.Type, "PRIVATE KEY") {
			return invalid("%s is not a PEM private key: put the client certificate's key there", keyKey)
		}
	}
	return nil
}

func checkCertificates(data []byte) error {
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("certificate %d does not parse", n+1)
		}
		n++
	}
	if n == 0 {
		return errors.New("no CERTIFICATE block")
	}
	return nil
}

// parseKubeconfig takes the cluster and user of the kubeconfig's current context (or of its
// only context). Paths to files, exec plugins and auth providers cannot be followed from a
// Secret and are refused with the field at fault.
func parseKubeconfig(data []byte) (Credentials, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		// The parser's message may quote the content; it stays out of the condition.
		return Credentials{}, invalid("%q does not parse as a kubeconfig: put the output of "+
			"`kubectl config view --raw --minify --flatten` there", KeyKubeconfig)
	}
	ctxName := cfg.CurrentContext
	if ctxName == "" && len(cfg.Contexts) == 1 {
		for name := range cfg.Contexts {
			ctxName = name
		}
	}
	kctx, ok := cfg.Contexts[ctxName]
	if !ok || kctx == nil {
		return Credentials{}, invalid("%q has no current-context naming one of its %d contexts: set current-context, "+
			"or keep only the cluster's context (`kubectl config view --raw --minify --flatten`)", KeyKubeconfig, len(cfg.Contexts))
	}
	kcluster, ok := cfg.Clusters[kctx.Cluster]
	if !ok || kcluster == nil {
		return Credentials{}, invalid("%q: context %q names cluster %q, which it does not define", KeyKubeconfig, ctxName, kctx.Cluster)
	}
	user, ok := cfg.AuthInfos[kctx.AuthInfo]
	if !ok || user == nil {
		return Credentials{}, invalid("%q: context %q names user %q, which it does not define", KeyKubeconfig, ctxName, kctx.AuthInfo)
	}
	if err := refuseIndirections(kcluster, user); err != nil {
		return Credentials{}, err
	}
	c := Credentials{
		BearerToken: strings.TrimSpace(user.Token),
		CAData:      kcluster.CertificateAuthorityData,
		CertData:    user.ClientCertificateData,
		KeyData:     user.ClientKeyData,
		Insecure:    kcluster.InsecureSkipTLSVerify,
		ServerName:  kcluster.TLSServerName,
	}
	if c.BearerToken == "" && len(c.CertData) == 0 {
		return Credentials{}, invalid("%q: user %q has neither a token nor client-certificate-data: "+
			"give the user a token (such as a ServiceAccount token) or an embedded client certificate", KeyKubeconfig, kctx.AuthInfo)
	}
	if err := c.check("kubeconfig users[].user.token", "kubeconfig clusters[].cluster.certificate-authority-data",
		"kubeconfig users[].user.client-certificate-data", "kubeconfig users[].user.client-key-data"); err != nil {
		return Credentials{}, err
	}
	return c, nil
}

func refuseIndirections(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) error {
	const fix = "embed the data instead (`kubectl config view --raw --minify --flatten`), or use a ServiceAccount token"
	switch {
	case c.CertificateAuthority != "" && len(c.CertificateAuthorityData) == 0:
		return invalid("%q: certificate-authority names a file Kokumi cannot read: %s", KeyKubeconfig, fix)
	case u.TokenFile != "" && u.Token == "":
		return invalid("%q: tokenFile names a file Kokumi cannot read: %s", KeyKubeconfig, fix)
	case u.ClientCertificate != "" && len(u.ClientCertificateData) == 0, u.ClientKey != "" && len(u.ClientKeyData) == 0:
		return invalid("%q: client-certificate or client-key names a file Kokumi cannot read: %s", KeyKubeconfig, fix)
	case u.Exec != nil:
		return invalid("%q: the user runs an exec plugin (%s), which Kokumi and Argo CD do not run from a Secret: %s",
			KeyKubeconfig, u.Exec.Command, fix)
	case u.AuthProvider != nil:
		return invalid("%q: the user uses the auth provider %q, which Kokumi does not support: %s", KeyKubeconfig, u.AuthProvider.Name, fix)
	case u.Username != "" || u.Password != "":
		return invalid("%q: the user authenticates with a username and password, which Kubernetes no longer accepts: %s", KeyKubeconfig, fix)
	}
	return nil
}

// RESTConfig is a client configuration for server with these credentials; each request gives
// up after timeout.
func (c Credentials) RESTConfig(server string, timeout time.Duration) *rest.Config {
	return &rest.Config{
		Host:        server,
		BearerToken: c.BearerToken,
		Timeout:     timeout,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   c.Insecure,
			ServerName: c.ServerName,
			CAData:     c.CAData,
			CertData:   c.CertData,
			KeyData:    c.KeyData,
		},
		UserAgent: "kokumi-cluster-probe",
	}
}

// argoCDClusterConfig is the `config` of an Argo CD cluster Secret, as Argo CD's ClusterConfig
// reads it ([]byte fields are base64 in JSON, as Argo CD expects).
type argoCDClusterConfig struct {
	BearerToken     string                `json:"bearerToken,omitempty"`
	TLSClientConfig argoCDTLSClientConfig `json:"tlsClientConfig"`
}

type argoCDTLSClientConfig struct {
	Insecure   bool   `json:"insecure"`
	ServerName string `json:"serverName,omitempty"`
	CAData     []byte `json:"caData,omitempty"`
	CertData   []byte `json:"certData,omitempty"`
	KeyData    []byte `json:"keyData,omitempty"`
}

// ArgoCDConfig is the `config` value of the Argo CD cluster Secret for these credentials.
func (c Credentials) ArgoCDConfig() []byte {
	out, err := json.Marshal(argoCDClusterConfig{
		BearerToken: c.BearerToken,
		TLSClientConfig: argoCDTLSClientConfig{
			Insecure:   c.Insecure,
			ServerName: c.ServerName,
			CAData:     c.CAData,
			CertData:   c.CertData,
			KeyData:    c.KeyData,
		},
	})
	if err != nil {
		// Strings, bools and byte slices always marshal.
		panic(fmt.Sprintf("marshal Argo CD cluster config: %v", err))
	}
	return out
}

// Redact replaces every secret part of the credentials found in msg, so that a message built
// from an error can go into a condition, an event or a log line.
func (c Credentials) Redact(msg string) string {
	for _, s := range []string{c.BearerToken, string(c.KeyData)} {
		if len(s) >= 4 {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return msg
}
