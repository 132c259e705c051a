package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/record"
)

// The server reads the public keys of deployment records, in Kokumi's namespace only.
// +kubebuilder:rbac:groups="",namespace=kokumi-system,resources=configmaps,verbs=get

// CosignVerifyCommand is the command that verifies the deployment records attached to an
// artifact with stock cosign and Kokumi's public key saved as kokumi.pub; ref is the artifact,
// <registry>/<repository>@sha256:<digest>. The UI and the docs show it.
func CosignVerifyCommand(ref string) string {
	return "cosign verify-attestation --key kokumi.pub --insecure-ignore-tlog --type " + record.PredicateType + " " + ref
}

// PublicKeys are the public keys deployment records are verified with, from the ConfigMap
// record.ConfigMapName in Kokumi's namespace.
type PublicKeys struct {
	// Current is the PEM of the key Kokumi signs new records with; empty when the ConfigMap
	// is absent.
	Current string `json:"current"`
	// CurrentID is the key ID of Current.
	CurrentID string `json:"currentID,omitempty"`
	// Keys are every listed key (the current one and previous ones), by key ID.
	Keys []PublicKey `json:"keys"`
	// Verify is CosignVerifyCommand with a placeholder for the artifact.
	Verify string `json:"verify"`
}

// PublicKey is one listed public key.
type PublicKey struct {
	ID  string `json:"id"`
	PEM string `json:"pem"`
}

// ReadPublicKeys reads the public keys from the ConfigMap in namespace; found is false when
// the ConfigMap is absent.
func ReadPublicKeys(ctx context.Context, r client.Reader, namespace string) (keys PublicKeys, found bool, err error) {
	keys = PublicKeys{Keys: []PublicKey{}, Verify: CosignVerifyCommand("<registry>/<repository>@sha256:<digest>")}
	var cm corev1.ConfigMap
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: record.ConfigMapName}, &cm); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return keys, false, nil
		}
		return keys, false, fmt.Errorf("read ConfigMap %s/%s: %w", namespace, record.ConfigMapName, err)
	}
	keys.Current = cm.Data[record.CurrentKeyEntry]
	if t, err := record.ParseTrustedKeys([]byte(keys.Current)); err == nil && len(t.IDs()) == 1 {
		keys.CurrentID = t.IDs()[0]
	}
	for entry, pem := range cm.Data {
		id, ok := strings.CutSuffix(entry, ".pub")
		if ok && entry != record.CurrentKeyEntry {
			keys.Keys = append(keys.Keys, PublicKey{ID: id, PEM: pem})
		}
	}
	sort.Slice(keys.Keys, func(i, j int) bool { return keys.Keys[i].ID < keys.Keys[j].ID })
	return keys, true, nil
}

// WritePEM writes the current key, or with all every listed key, each after a "# <keyid>"
// line, as `kokumi public-key` prints them.
func (k PublicKeys) WritePEM(w io.Writer, all bool) error {
	if !all {
		_, err := io.WriteString(w, withNewline(k.Current))
		return err
	}
	var b strings.Builder
	for _, key := range k.Keys {
		fmt.Fprintf(&b, "# %s\n%s", key.ID, withNewline(key.PEM))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func withNewline(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

// publicKeys answers GET /api/v1/public-keys: empty keys when the ConfigMap is absent (the
// controller creates it when it first starts).
func (s *Server) publicKeys(w http.ResponseWriter, r *http.Request) {
	keys, _, err := ReadPublicKeys(r.Context(), s.reader, s.opts.Namespace)
	if err != nil {
		writeAPIError(w, "read the public keys", err)
		return
	}
	writeJSON(w, http.StatusOK, keys)
}
