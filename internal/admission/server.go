package admission

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Certificate files in a certificate directory: the serving pair, as the webhook server reads
// them, and the CA a ValidatingWebhookConfiguration's caBundle holds.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// Serve serves check over HTTPS on host:port at Path, with the pair CertFile and KeyFile of
// certDir (read again when they change, so a rotated certificate needs no restart), until ctx
// ends.
func Serve(ctx context.Context, host string, port int, certDir string, check *Check) error {
	srv := webhook.NewServer(webhook.Options{Host: host, Port: port, CertDir: certDir, CertName: CertFile, KeyName: KeyFile})
	srv.Register(Path, &admission.Webhook{Handler: check})
	if err := srv.Start(ctx); err != nil {
		return fmt.Errorf("serve the admission check on %s:%d: %w", host, port, err)
	}
	return nil
}

// GenerateCert writes into dir a self-signed certificate for hosts (DNS names or IP
// addresses), valid for a year, as CertFile and KeyFile, and the same certificate as CAFile;
// it returns the certificate's PEM, for a caBundle. For tests and trials: an install uses a
// certificate its admin issues (cert-manager, or the cluster's own CA).
func GenerateCert(dir string, hosts ...string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the webhook's key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, fmt.Errorf("generate a serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kokumi-admission"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create the webhook's certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the webhook's key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	for name, data := range map[string][]byte{CertFile: certPEM, KeyFile: keyPEM, CAFile: certPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	return certPEM, nil
}
