package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/server"
)

// publishKeys lists a key of its own in namespace's public-key ConfigMap, as the controller
// does, and a previous key beside it; it returns the current key's signer and the previous
// key's ID and PEM.
func publishKeys(t *testing.T, namespace string) (current *record.Signer, previousID, previousPEM string) {
	t.Helper()
	ctx := context.Background()
	current, err := (&record.Keys{Client: env.Client, Namespace: namespace}).Ensure(ctx)
	must(t, err)
	pemKey, err := record.GenerateKey()
	must(t, err)
	previous, err := record.ParseSigner(pemKey)
	must(t, err)
	var cm corev1.ConfigMap
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: record.ConfigMapName}, &cm))
	cm.Data[previous.KeyID()+".pub"] = string(previous.PublicKeyPEM())
	must(t, env.Client.Update(ctx, &cm))
	return current, previous.KeyID(), string(previous.PublicKeyPEM())
}

func TestPublicKeysListsTheKeysOfKokumisNamespace(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: kokumiNS, Name: record.ConfigMapName}}
	if err := env.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	var keys server.PublicKeys
	if res := do(t, call{path: "/api/v1/public-keys", bearer: token}, &keys); res.StatusCode != http.StatusOK || keys.Current != "" || len(keys.Keys) != 0 {
		t.Fatalf("without the ConfigMap: %d %+v, want 200 and no key", res.StatusCode, keys)
	}
	if res := do(t, call{path: "/api/v1/public-keys"}, nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: status %d, want 401", res.StatusCode)
	}

	current, previousID, previousPEM := publishKeys(t, kokumiNS)
	for _, path := range []string{"/api/v1/public-keys"} {
		keys = server.PublicKeys{}
		if res := do(t, call{path: path, bearer: token}, &keys); res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: status %d", path, res.StatusCode)
		}
		if keys.Current != string(current.PublicKeyPEM()) || keys.CurrentID != current.KeyID() || len(keys.Keys) != 2 {
			t.Fatalf("GET %s: %+v, want the current key %s and two listed", path, keys, current.KeyID())
		}
	}
	want := map[string]string{current.KeyID(): string(current.PublicKeyPEM()), previousID: previousPEM}
	for i, k := range keys.Keys {
		if want[k.ID] != k.PEM || (i > 0 && keys.Keys[i-1].ID > k.ID) {
			t.Errorf("keys %+v, want %v by ID", keys.Keys, want)
		}
	}
	if keys.Verify != server.CosignVerifyCommand("<registry>/<repository>@sha256:<digest>") || !strings.Contains(keys.Verify, "--type "+record.PredicateType) {
		t.Errorf("verify %q", keys.Verify)
	}
}

// kokumi builds the kokumi binary once per test that needs it.
func kokumi(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kokumi")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/kokumi-dev/kokumi/cmd/kokumi")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/kokumi: %v: %s", err, out)
	}
	return bin
}

// runKokumi runs the binary with the test control plane's kubeconfig.
func runKokumi(t *testing.T, bin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func TestPublicKeyCommandPrintsTheKeys(t *testing.T) {
	ns := "kokumi-cli"
	must(t, env.CreateNamespace(context.Background(), ns))
	bin := kokumi(t)

	_, stderr, err := runKokumi(t, bin, "public-key", "--namespace", ns)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(stderr, "no ConfigMap kokumi-public-keys in namespace kokumi-cli: Kokumi creates it when the controller first starts") {
		t.Fatalf("without the ConfigMap: %v, stderr %q; want a failure naming the ConfigMap and namespace", err, stderr)
	}

	current, previousID, previousPEM := publishKeys(t, ns)
	stdout, stderr, err := runKokumi(t, bin, "public-key", "--namespace", ns)
	if err != nil || stdout != string(current.PublicKeyPEM()) {
		t.Fatalf("public-key: %v %q, stdout %q; want the current key's PEM", err, stderr, stdout)
	}
	stdout, stderr, err = runKokumi(t, bin, "public-key", "--all", "--namespace="+ns)
	first, second := "# "+current.KeyID()+"\n"+string(current.PublicKeyPEM()), "# "+previousID+"\n"+previousPEM
	if previousID < current.KeyID() {
		first, second = second, first
	}
	if err != nil || stdout != first+second {
		t.Errorf("public-key --all: %v %q, stdout %q; want both keys by ID, each after # <keyid>", err, stderr, stdout)
	}
}
