package sandbox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// authority is the certificate authority of one cluster: it signs the API server's serving
// certificate and the client certificates the cluster trusts. It is kept on disk, so that a
// restarted fleet keeps its credentials.
type authority struct {
	dir     string
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// keyPair is a PEM certificate and its PEM key, and where they are on disk.
type keyPair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
}

const certValidity = 10 * 365 * 24 * time.Hour

// loadOrCreateAuthority loads the authority kept in dir, or creates it.
func loadOrCreateAuthority(dir, name string) (*authority, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	kp, err := loadKeyPair(dir, "ca")
	if errors.Is(err, os.ErrNotExist) {
		kp, err = createKeyPair(dir, "ca", func(key *ecdsa.PrivateKey) ([]byte, error) {
			tmpl := &x509.Certificate{
				SerialNumber:          serial(),
				Subject:               pkix.Name{CommonName: name + "-ca"},
				NotBefore:             time.Now().Add(-time.Hour),
				NotAfter:              time.Now().Add(certValidity),
				KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
				BasicConstraintsValid: true,
				IsCA:                  true,
			}
			return x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("certificate authority of %s: %w", name, err)
	}
	cert, key, err := parseKeyPair(kp)
	if err != nil {
		return nil, fmt.Errorf("certificate authority of %s: %w", name, err)
	}
	return &authority{dir: dir, cert: cert, key: key, certPEM: kp.CertPEM}, nil
}

// caFile is the path of the authority's certificate.
func (a *authority) caFile() string { return filepath.Join(a.dir, "ca.crt") }

// serving returns the API server's certificate for 127.0.0.1 and localhost.
func (a *authority) serving() (keyPair, error) {
	return a.issue("serving", func(tmpl *x509.Certificate) {
		tmpl.Subject = pkix.Name{CommonName: "kube-apiserver"}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	})
}

// client returns a client certificate for user in groups, kept as file.
func (a *authority) client(file, user string, groups ...string) (keyPair, error) {
	return a.issue(file, func(tmpl *x509.Certificate) {
		tmpl.Subject = pkix.Name{CommonName: user, Organization: groups}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
}

func (a *authority) issue(file string, fill func(*x509.Certificate)) (keyPair, error) {
	kp, err := loadKeyPair(a.dir, file)
	if errors.Is(err, os.ErrNotExist) {
		kp, err = createKeyPair(a.dir, file, func(key *ecdsa.PrivateKey) ([]byte, error) {
			tmpl := &x509.Certificate{
				SerialNumber: serial(),
				NotBefore:    time.Now().Add(-time.Hour),
				NotAfter:     time.Now().Add(certValidity),
				KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			}
			fill(tmpl)
			return x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
		})
	}
	if err != nil {
		return keyPair{}, fmt.Errorf("certificate %s: %w", file, err)
	}
	return kp, nil
}

// serviceAccountKey returns the files of the key that signs the cluster's ServiceAccount tokens.
func (a *authority) serviceAccountKey() (keyFile, pubFile string, err error) {
	keyFile, pubFile = filepath.Join(a.dir, "sa.key"), filepath.Join(a.dir, "sa.pub")
	if _, err := os.Stat(pubFile); err == nil {
		return keyFile, pubFile, nil
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", fmt.Errorf("encode service account key: %w", err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("write service account key: %w", err)
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return "", "", fmt.Errorf("write service account key: %w", err)
	}
	return keyFile, pubFile, nil
}

func loadKeyPair(dir, name string) (keyPair, error) {
	kp := keyPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
	var err error
	if kp.CertPEM, err = os.ReadFile(kp.CertFile); err != nil {
		return kp, err
	}
	if kp.KeyPEM, err = os.ReadFile(kp.KeyFile); err != nil {
		return kp, err
	}
	return kp, nil
}

func createKeyPair(dir, name string, sign func(*ecdsa.PrivateKey) ([]byte, error)) (keyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return keyPair{}, err
	}
	der, err := sign(key)
	if err != nil {
		return keyPair{}, fmt.Errorf("sign: %w", err)
	}
	kp := keyPair{
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   keyPEM,
		CertFile: filepath.Join(dir, name+".crt"),
		KeyFile:  filepath.Join(dir, name+".key"),
	}
	if err := os.WriteFile(kp.KeyFile, kp.KeyPEM, 0o600); err != nil {
		return keyPair{}, fmt.Errorf("write key: %w", err)
	}
	if err := os.WriteFile(kp.CertFile, kp.CertPEM, 0o644); err != nil {
		return keyPair{}, fmt.Errorf("write certificate: %w", err)
	}
	return kp, nil
}

func parseKeyPair(kp keyPair) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(kp.CertPEM)
	kb, _ := pem.Decode(kp.KeyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s holds no PEM block", kp.CertFile, kp.KeyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", kp.CertFile, err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", kp.KeyFile, err)
	}
	return cert, key, nil
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
