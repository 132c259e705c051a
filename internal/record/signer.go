package record

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// Signer signs records with an ECDSA P-256 private key. It implements dsse.Signer.
type Signer struct {
	key    *ecdsa.PrivateKey
	pubPEM []byte
	keyID  string
}

// GenerateKey makes a new ECDSA P-256 private key, as a PKCS#8 PEM "PRIVATE KEY" block.
func GenerateKey() (privatePEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal signing key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseSigner reads an ECDSA P-256 private key from a PEM "PRIVATE KEY" (PKCS#8) or
// "EC PRIVATE KEY" (SEC 1) block. Errors never quote the key.
func ParseSigner(privatePEM []byte) (*Signer, error) {
	block, _ := pem.Decode(privatePEM)
	if block == nil {
		return nil, errors.New("parse signing key: no PEM block")
	}
	var key *ecdsa.PrivateKey
	switch block.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, errors.New("parse signing key: not a valid PKCS#8 private key")
		}
		ec, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("parse signing key: a %T, not an ECDSA key", k)
		}
		key = ec
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, errors.New("parse signing key: not a valid EC private key")
		}
		key = k
	default:
		return nil, fmt.Errorf("parse signing key: a PEM %q block, not PRIVATE KEY", block.Type)
	}
	if key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("parse signing key: curve %s, not P-256", key.Curve.Params().Name)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("parse signing key: marshal public key: %w", err)
	}
	return &Signer{
		key:    key,
		pubPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}),
		keyID:  keyID(der),
	}, nil
}

// keyID is the first 16 hex digits of the SHA-256 of a PKIX public key.
func keyID(pkixDER []byte) string {
	sum := sha256.Sum256(pkixDER)
	return hex.EncodeToString(sum[:])[:16]
}

// PublicKeyPEM is the public key as a PKIX PEM "PUBLIC KEY" block: what `cosign --key` reads.
func (s *Signer) PublicKeyPEM() []byte { return slices.Clone(s.pubPEM) }

// KeyID is the stable id of the public key: the first 16 hex digits of the SHA-256 of its PKIX
// DER encoding.
func (s *Signer) KeyID() string { return s.keyID }

// Sign signs the SHA-256 of data (a DSSE PAE) with an ASN.1 ECDSA signature. It is
// deterministic (RFC 6979): the same data always gives the same signature.
func (s *Signer) Sign(_ context.Context, data []byte) ([]byte, error) {
	sum := sha256.Sum256(data)
	sig, err := s.key.Sign(nil, sum[:], crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return sig, nil
}

var _ dsse.Signer = dsseSigner{}

// dsseSigner adapts Signer to dsse.Signer, whose KeyID returns an error too.
type dsseSigner struct{ s *Signer }

func (d dsseSigner) Sign(ctx context.Context, data []byte) ([]byte, error) {
	return d.s.Sign(ctx, data)
}

func (d dsseSigner) KeyID() (string, error) { return d.s.keyID, nil }

// TrustedKeys are the public keys records may be signed with, by key id. The zero value trusts
// no key.
type TrustedKeys struct {
	keys map[string]*ecdsa.PublicKey
}

// ParseTrustedKeys reads PEM "PUBLIC KEY" (PKIX, ECDSA) blocks; each argument may hold one or
// more. Blocks of other types are ignored; an argument without a public key is an error.
func ParseTrustedKeys(pems ...[]byte) (TrustedKeys, error) {
	t := TrustedKeys{keys: map[string]*ecdsa.PublicKey{}}
	for i, data := range pems {
		found := false
		for {
			var block *pem.Block
			block, data = pem.Decode(data)
			if block == nil {
				break
			}
			if block.Type != "PUBLIC KEY" {
				continue
			}
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return TrustedKeys{}, fmt.Errorf("parse public key %d: %w", i+1, err)
			}
			ec, ok := k.(*ecdsa.PublicKey)
			if !ok {
				return TrustedKeys{}, fmt.Errorf("parse public key %d: a %T, not an ECDSA key", i+1, k)
			}
			t.keys[keyID(block.Bytes)] = ec
			found = true
		}
		if !found {
			return TrustedKeys{}, fmt.Errorf("parse public key %d: no PEM PUBLIC KEY block", i+1)
		}
	}
	return t, nil
}

// IDs are the key ids, sorted.
func (t TrustedKeys) IDs() []string {
	ids := make([]string, 0, len(t.keys))
	for id := range t.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Set names the key set: its key ids, sorted, joined by commas. Two sets with the same keys have
// the same name; a cache of what a set verified is keyed by it.
func (t TrustedKeys) Set() string { return strings.Join(t.IDs(), ",") }

// Len is how many keys are trusted.
func (t TrustedKeys) Len() int { return len(t.keys) }

// VerifySignature checks an ASN.1 ECDSA signature over the SHA-256 of data, as `cosign sign`
// makes it, against each key in key id order, and returns the id of the key that made it.
func (t TrustedKeys) VerifySignature(data, sig []byte) (keyID string, ok bool) {
	sum := sha256.Sum256(data)
	for _, id := range t.IDs() {
		if ecdsa.VerifyASN1(t.keys[id], sum[:], sig) {
			return id, true
		}
	}
	return "", false
}

// verifiers are the keys as DSSE verifiers, in key id order.
func (t TrustedKeys) verifiers() []dsse.Verifier {
	v := make([]dsse.Verifier, 0, len(t.keys))
	for _, id := range t.IDs() {
		v = append(v, verifier{id: id, key: t.keys[id]})
	}
	return v
}

// verifier checks ASN.1 ECDSA signatures over the SHA-256 of the data, as cosign makes them.
type verifier struct {
	id  string
	key *ecdsa.PublicKey
}

func (v verifier) Verify(_ context.Context, data, sig []byte) error {
	sum := sha256.Sum256(data)
	if !ecdsa.VerifyASN1(v.key, sum[:], sig) {
		return errors.New("signature does not match")
	}
	return nil
}

func (v verifier) KeyID() (string, error) { return v.id, nil }

func (v verifier) Public() crypto.PublicKey { return v.key }
