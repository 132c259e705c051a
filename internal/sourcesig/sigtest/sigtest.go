// Package sigtest runs the stock cosign binaries `make test-assets` builds (v2 and v3) for
// tests: it makes key pairs and signs images and artifacts in a registry on loopback, with
// nothing leaving the machine (no transparency log, no Sigstore TUF repository).
package sigtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Cosigns are the stock cosign commands, as `make test-assets` links them: v2 and v3.
var Cosigns = []string{"cosign", "cosign-v3"}

// CosignPath finds a cosign `make test-assets` builds, where the test harness finds
// kube-apiserver: $KUBEBUILDER_ASSETS, else bin/envtest of the checkout (the module's root).
func CosignPath(tb testing.TB, name string) string {
	tb.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			tb.Fatalf("find the checkout: go env GOMOD: %v", err)
		}
		dir = filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "bin", "envtest")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("%s is missing at %s: run `make test-assets` (it builds it once into bin/): %v", name, p, err)
	}
	return p
}

// Run runs a stock cosign (one of Cosigns) in dir, with an empty home there and no password
// on its keys, and returns its combined output and error.
func Run(tb testing.TB, cosign, dir string, args ...string) (string, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, CosignPath(tb, cosign), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"),
		"DOCKER_CONFIG="+filepath.Join(dir, "docker"), "COSIGN_PASSWORD=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Key is a cosign key pair in a directory of its own.
type Key struct {
	// Dir holds cosign.key and cosign.pub.
	Dir string
	// Public is cosign.pub: a PEM public key.
	Public []byte
}

// NewKey makes a key pair with `cosign generate-key-pair` (cosign v2).
func NewKey(tb testing.TB) Key {
	tb.Helper()
	dir := tb.TempDir()
	if out, err := Run(tb, "cosign", dir, "generate-key-pair"); err != nil {
		tb.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		tb.Fatal(err)
	}
	return Key{Dir: dir, Public: pub}
}

// Sign signs ref (host/path@sha256:...) with the key, with stock cosign (one of Cosigns), in
// cosign's signature layout (the tag sha256-<hex>.sig), offline.
func Sign(tb testing.TB, cosign string, key Key, ref string) {
	tb.Helper()
	args := []string{"sign", "--key", filepath.Join(key.Dir, "cosign.key"), "--tlog-upload=false", "--allow-http-registry", "--yes"}
	if cosign == "cosign-v3" {
		// v3 writes a Sigstore bundle as an OCI referrer by default, and reads its signing
		// config from Sigstore's TUF repository.
		args = append(args, "--use-signing-config=false", "--new-bundle-format=false")
	}
	if out, err := Run(tb, cosign, tb.TempDir(), append(args, ref)...); err != nil {
		tb.Fatalf("%s sign %s: %v\n%s", cosign, ref, err, out)
	}
}

// Retag points the tag dst (host/path:tag) at the manifest src (host/path:tag or @digest)
// names, on a registry on loopback: a signature moved onto another artifact.
func Retag(tb testing.TB, src, dst string) {
	tb.Helper()
	s, err := name.ParseReference(src, name.Insecure)
	if err != nil {
		tb.Fatal(err)
	}
	d, err := name.NewTag(dst, name.Insecure)
	if err != nil {
		tb.Fatal(err)
	}
	desc, err := remote.Get(s)
	if err != nil {
		tb.Fatalf("get %s: %v", src, err)
	}
	if err := remote.Tag(d, desc); err != nil {
		tb.Fatalf("tag %s: %v", dst, err)
	}
}

// Unsign takes the signatures of repository@digest away, on a registry on loopback: its
// sha256-<hex>.sig tag then names an image without signature layers (registries that let
// nobody but their owner delete keep the tag, and lose its content, this way).
func Unsign(tb testing.TB, repository, digest string) {
	tb.Helper()
	tag := "sha256-" + strings.TrimPrefix(digest, "sha256:") + ".sig"
	ref, err := name.NewTag(repository+":"+tag, name.Insecure)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := remote.Head(ref); err != nil {
		tb.Fatalf("find the signature of %s@%s: %v", repository, digest, err)
	}
	img, err := random.Image(64, 1)
	if err != nil {
		tb.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		tb.Fatalf("replace the signature of %s@%s: %v", repository, digest, err)
	}
}
