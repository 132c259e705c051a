package cluster_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/kokumi-dev/kokumi/internal/cluster"
)

const token = "eyJhbGciOiJSUzI1NiJ9.secret-token-value.sig"

var testCert, testKey = mustCert()

func mustCert() ([]byte, []byte) {
	crt, key, err := certutil.GenerateSelfSignedCertKey("edge-1.example.com", nil, nil)
	if err != nil {
		panic(err)
	}
	return crt, key
}

func kubeconfig(t testing.TB, mutate func(*clientcmdapi.Config)) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["edge"] = &clientcmdapi.Cluster{Server: "https://edge-1.example.com:6443", CertificateAuthorityData: testCert}
	cfg.AuthInfos["kokumi"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["edge"] = &clientcmdapi.Context{Cluster: "edge", AuthInfo: "kokumi"}
	cfg.CurrentContext = "edge"
	if mutate != nil {
		mutate(cfg)
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseSecretAcceptsTheFormsAnAdminHas(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string][]byte
		want func(cluster.Credentials) string // "" when right
	}{
		{"a bearer token with the server's CA", map[string][]byte{"token": []byte(token), "ca.crt": testCert},
			func(c cluster.Credentials) string {
				if c.BearerToken != token || string(c.CAData) != string(testCert) {
					return "token or CA not taken"
				}
				return ""
			}},
		{"a token pasted with a trailing newline is trimmed", map[string][]byte{"token": []byte(token + "\n")},
			func(c cluster.Credentials) string {
				if c.BearerToken != token {
					return fmt.Sprintf("token %q", c.BearerToken)
				}
				return ""
			}},
		{"a copied ServiceAccount token Secret, namespace key and all", map[string][]byte{"token": []byte(token), "ca.crt": testCert, "namespace": []byte("kube-system")},
			func(c cluster.Credentials) string {
				if c.BearerToken != token {
					return "token not taken"
				}
				return ""
			}},
		{"a client certificate instead of a token", map[string][]byte{"tls.crt": testCert, "tls.key": testKey, "ca.crt": testCert},
			func(c cluster.Credentials) string {
				if string(c.CertData) != string(testCert) || string(c.KeyData) != string(testKey) || c.BearerToken != "" {
					return "client certificate not taken"
				}
				return ""
			}},
		{"a kubeconfig with a token", map[string][]byte{"kubeconfig": kubeconfig(t, nil)},
			func(c cluster.Credentials) string {
				if c.BearerToken != token || string(c.CAData) != string(testCert) {
					return "token or CA not taken from the kubeconfig"
				}
				return ""
			}},
		{"a kubeconfig with an embedded client certificate, insecure and a server name", map[string][]byte{"kubeconfig": kubeconfig(t, func(c *clientcmdapi.Config) {
			c.AuthInfos["kokumi"] = &clientcmdapi.AuthInfo{ClientCertificateData: testCert, ClientKeyData: testKey}
			c.Clusters["edge"].CertificateAuthorityData = nil
			c.Clusters["edge"].InsecureSkipTLSVerify = true
			c.Clusters["edge"].TLSServerName = "edge-1.internal"
		})}, func(c cluster.Credentials) string {
			if string(c.KeyData) != string(testKey) || !c.Insecure || c.ServerName != "edge-1.internal" {
				return fmt.Sprintf("got %v insecure=%v serverName=%q", c, c.Insecure, c.ServerName)
			}
			return ""
		}},
		{"a kubeconfig without current-context but a single context", map[string][]byte{"kubeconfig": kubeconfig(t, func(c *clientcmdapi.Config) {
			c.CurrentContext = ""
		})}, func(c cluster.Credentials) string {
			if c.BearerToken != token {
				return "the only context was not used"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := cluster.ParseSecret(tc.data)
			if err != nil {
				t.Fatalf("ParseSecret: %v", err)
			}
			if msg := tc.want(c); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

func TestParseSecretNamesTheKeyAtFaultAndTheFix(t *testing.T) {
	for _, tc := range []struct {
		name  string
		data  map[string][]byte
		wants []string
	}{
		{"an empty Secret", nil, []string{`"kubeconfig"`, `"token"`, `"ca.crt"`, "keys present: none"}},
		{"a Secret with the wrong keys", map[string][]byte{"bearer": []byte(token)}, []string{`keys present: "bearer"`, `"token"`}},
		{"a CA that is not PEM", map[string][]byte{"token": []byte(token), "ca.crt": []byte("not a certificate")}, []string{"ca.crt", "PEM"}},
		{"a client certificate without its key", map[string][]byte{"tls.crt": testCert}, []string{"tls.crt and tls.key"}},
		{"a client key that is not a key", map[string][]byte{"tls.crt": testCert, "tls.key": testCert}, []string{"tls.key is not a PEM private key"}},
		{"a kubeconfig that does not parse", map[string][]byte{"kubeconfig": []byte("apiVersion: v1\nusers: [" + token)}, []string{`"kubeconfig" does not parse`, "kubectl config view --raw --minify --flatten"}},
		{"a kubeconfig with two contexts and none current", map[string][]byte{"kubeconfig": kubeconfig(t, func(c *clientcmdapi.Config) {
			c.CurrentContext = ""
			c.Contexts["other"] = &clientcmdapi.Context{Cluster: "edge", AuthInfo: "kokumi"}
		})}, []string{"current-context", "2 contexts"}},
		{"a kubeconfig whose user runs an exec plugin", map[string][]byte{"kubeconfig": kubeconfig(t, func(c *clientcmdapi.Config) {
			c.AuthInfos["kokumi"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "aws-iam-authenticator", APIVersion: "client.authentication.k8s.io/v1"}}
		})}, []string{"exec plugin (aws-iam-authenticator)", "ServiceAccount token"}},
		{"a kubeconfig reading the token from a file", map[string][]byte{"kubeconfig": kubeconfig(t, func(c *clientcmdapi.Config) {
			c.AuthInfos["kokumi"] = &clientcmdapi.AuthInfo{TokenFile: "/var/run/token"}
		})}, []string{"tokenFile names a file"}},
		{"a kubeconfig reading the CA from a file", map[string][]byte{"kubeconfig": kubeconfig(t, func(c *clientcmdapi.Config) {
			c.Clusters["edge"].CertificateAuthorityData = nil
			c.Clusters["edge"].CertificateAuthority = "/etc/ca.crt"
		})}, []string{"certificate-authority names a file"}},
		{"a kubeconfig user without any credential", map[string][]byte{"kubeconfig": kubeconfig(t, func(c *clientcmdapi.Config) {
			c.AuthInfos["kokumi"] = &clientcmdapi.AuthInfo{}
		})}, []string{`user "kokumi" has neither a token nor client-certificate-data`}},
		{"a kubeconfig with a bad CA", map[string][]byte{"kubeconfig": kubeconfig(t, func(c *clientcmdapi.Config) {
			c.Clusters["edge"].CertificateAuthorityData = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
		})}, []string{"certificate-authority-data is not a PEM CA bundle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cluster.ParseSecret(tc.data)
			if err == nil {
				t.Fatal("ParseSecret accepted it")
			}
			if !cluster.IsInvalid(err) {
				t.Fatalf("error %v is not an InvalidError", err)
			}
			for _, want := range tc.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "secret-token-value") {
				t.Errorf("message %q carries the token", err)
			}
		})
	}
}

func TestArgoCDConfigIsWhatArgoCDReads(t *testing.T) {
	c := cluster.Credentials{BearerToken: token, CAData: testCert, CertData: testCert, KeyData: testKey, ServerName: "edge-1.internal"}
	var got struct {
		BearerToken     string `json:"bearerToken"`
		TLSClientConfig struct {
			Insecure   *bool  `json:"insecure"`
			ServerName string `json:"serverName"`
			CAData     []byte `json:"caData"`
			CertData   []byte `json:"certData"`
			KeyData    []byte `json:"keyData"`
		} `json:"tlsClientConfig"`
	}
	raw := c.ArgoCDConfig()
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("config %s: %v", raw, err)
	}
	tls := got.TLSClientConfig
	if got.BearerToken != token || string(tls.CAData) != string(testCert) || string(tls.CertData) != string(testCert) ||
		string(tls.KeyData) != string(testKey) || tls.ServerName != "edge-1.internal" || tls.Insecure == nil || *tls.Insecure {
		t.Fatalf("config %s does not round-trip", raw)
	}
	// Argo CD's []byte fields are base64 in JSON, as `config` of a cluster Secret carries them.
	if strings.Contains(string(raw), "BEGIN CERTIFICATE") {
		t.Fatalf("caData is not base64: %s", raw)
	}
}

func TestCredentialsPrintRedacted(t *testing.T) {
	c := cluster.Credentials{BearerToken: token, CAData: testCert, CertData: testCert, KeyData: testKey}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(format, c)
		if strings.Contains(out, "secret-token-value") || strings.Contains(out, "PRIVATE KEY") {
			t.Errorf("%s prints a credential: %s", format, out)
		}
		if !strings.Contains(out, "token") || !strings.Contains(out, "redacted") {
			t.Errorf("%s does not say what it holds: %s", format, out)
		}
	}
	msg := c.Redact("Get https://x: Authorization: Bearer " + token + " and " + string(testKey))
	if strings.Contains(msg, token) || strings.Contains(msg, "PRIVATE KEY") || !strings.Contains(msg, "[redacted]") {
		t.Fatalf("Redact left a credential: %s", msg)
	}
}

func TestRESTConfigCarriesTheCredentials(t *testing.T) {
	c := cluster.Credentials{BearerToken: token, CAData: testCert, ServerName: "edge-1.internal"}
	cfg := c.RESTConfig("https://edge-1.example.com:6443", 5e9)
	if cfg.Host != "https://edge-1.example.com:6443" || cfg.BearerToken != token || string(cfg.CAData) != string(testCert) ||
		cfg.ServerName != "edge-1.internal" || cfg.Timeout != 5e9 {
		t.Fatalf("rest config does not carry the credentials: host %s timeout %v", cfg.Host, cfg.Timeout)
	}
}

func BenchmarkParseSecretKubeconfig(b *testing.B) {
	data := map[string][]byte{"kubeconfig": kubeconfig(b, nil)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cluster.ParseSecret(data); err != nil {
			b.Fatal(err)
		}
	}
}
