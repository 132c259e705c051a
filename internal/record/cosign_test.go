package record_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
)

// cosignPath finds the cosign `make test-assets` builds, where the test harness finds
// kube-apiserver: $KUBEBUILDER_ASSETS, else bin/envtest of the checkout (the module's root).
func cosignPath(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			t.Fatalf("find the checkout: go env GOMOD: %v", err)
		}
		dir = filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "bin", "envtest")
	}
	p := filepath.Join(dir, "cosign")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("cosign is missing at %s: run `make test-assets` (it builds it once into bin/): %v", p, err)
	}
	return p
}

// verifyAttestation runs stock cosign's verify-attestation with the public key against
// repo@digest and returns its error and output.
func verifyAttestation(t *testing.T, cosign string, publicKey []byte, repo, digest string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "kokumi.pub")
	if err := os.WriteFile(keyFile, publicKey, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cosign, "verify-attestation",
		"--key", keyFile, "--insecure-ignore-tlog", "--type", record.PredicateType, "--allow-http-registry",
		repo+"@"+digest)
	// cosign keeps its TUF cache and docker config under the home directory: use an empty one.
	cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"), "DOCKER_CONFIG="+filepath.Join(dir, "docker"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestStockCosignVerifiesRecords(t *testing.T) {
	cosign := cosignPath(t)
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	st := &record.Store{Client: &oci.Client{}}
	a, b := recordtest.NewSigner(t), recordtest.NewSigner(t)

	good := pushArtifact(t, repo, "good")
	attach(t, st, repo, good, a, predicate("edge-1", "edge-2"))
	attach(t, st, repo, good, b, predicate("edge-1"))
	out, err := verifyAttestation(t, cosign, a.PublicKeyPEM(), repo, good)
	if err != nil {
		t.Fatalf("cosign refused a good record: %v\n%s", err, out)
	}
	if !strings.Contains(out, "The signatures were verified against the specified public key") || len(statements(out)) != 1 ||
		!strings.Contains(statements(out)[0], `"predicateType":"`+record.PredicateType+`"`) {
		t.Errorf("cosign's output lacks its verification header or the one record of the key:\n%s", out)
	}
	if _, err := verifyAttestation(t, cosign, b.PublicKeyPEM(), repo, good); err != nil {
		t.Errorf("cosign refused the record of the second key: %v", err)
	}

	tampered := pushArtifact(t, repo, "tampered")
	attach(t, st, repo, tampered, a, predicate("edge-1"))
	recordtest.Tamper(t, repo, tampered)
	if out, err := verifyAttestation(t, cosign, a.PublicKeyPEM(), repo, tampered); err == nil || !strings.Contains(out, "no matching attestations") {
		t.Errorf("cosign did not refuse a tampered record (%v):\n%s", err, out)
	}

	if out, err := verifyAttestation(t, cosign, recordtest.NewSigner(t).PublicKeyPEM(), repo, good); err == nil || !strings.Contains(out, "no matching attestations") {
		t.Errorf("cosign did not refuse records with a key that did not sign them (%v):\n%s", err, out)
	}
}

// statements are the in-toto statements of the envelopes cosign printed, one a line.
func statements(out string) []string {
	var st []string
	for _, line := range strings.Split(out, "\n") {
		var env struct {
			Payload string `json:"payload"`
		}
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &env) != nil {
			continue
		}
		if body, err := base64.StdEncoding.DecodeString(env.Payload); err == nil {
			st = append(st, string(body))
		}
	}
	return st
}
