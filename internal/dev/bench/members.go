package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"
)

// MemberVersion is the Kubernetes version every fake member answers /version with.
const MemberVersion = "v1.37.2"

// Members plays the API servers of many member clusters behind one TLS listener: cluster
// name's server is <URL>/clusters/<name>, and it answers /version to the bearer token
// Token(name) alone, as a kube-apiserver does. Its certificate is its own CA. (The same fake as
// test/crash's.)
type Members struct {
	srv *httptest.Server
	// CA verifies the server's certificate.
	CA []byte
	// probes counts the /version requests answered.
	probes atomic.Int64
}

// StartMembers starts the fake members' server on a loopback port.
func StartMembers() (*Members, error) {
	cert, caPEM, err := SelfSigned()
	if err != nil {
		return nil, err
	}
	m := &Members{CA: caPEM}
	m.srv = httptest.NewUnstartedServer(http.HandlerFunc(m.serve))
	m.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	m.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	m.srv.StartTLS()
	return m, nil
}

// Close stops the server.
func (m *Members) Close() { m.srv.Close() }

// Server is the API server URL of the member cluster name.
func (m *Members) Server(name string) string { return m.srv.URL + "/clusters/" + name }

// Probes is how many /version requests were answered.
func (m *Members) Probes() int64 { return m.probes.Load() }

// Token is the bearer token the member cluster name accepts.
func Token(name string) string { return "token-" + name }

func (m *Members) serve(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, "/clusters/")
	name, ok2 := strings.CutSuffix(name, "/version")
	if !ok || !ok2 || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+Token(name) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
		return
	}
	m.probes.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"major":"1","minor":"37","gitVersion":%q,"platform":"linux/amd64"}`, MemberVersion)
}

// SelfSigned makes an ECDSA certificate for 127.0.0.1 that is its own CA (ECDSA keeps the
// many TLS handshakes of the probes cheap).
func SelfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("generate the members' key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "members"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("create the members' certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
