// Package recordtest helps tests read and alter the deployment records attached to artifacts in
// a registry on loopback, as an attacker with write access to the registry would.
package recordtest

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kokumi-dev/kokumi/internal/record"
)

// AttImage reads the attestation image of an artifact.
func AttImage(tb testing.TB, repo, digest string) (name.Tag, v1.Image) {
	tb.Helper()
	tagName, err := record.AttestationTag(digest)
	if err != nil {
		tb.Fatal(err)
	}
	tag, err := name.NewTag(repo + ":" + tagName)
	if err != nil {
		tb.Fatal(err)
	}
	img, err := remote.Image(tag)
	if err != nil {
		tb.Fatalf("read %s: %v", tag, err)
	}
	return tag, img
}

// Tamper rewrites the artifact's attestation image with every envelope's payload changed (a
// cluster added), keeping the signatures.
func Tamper(tb testing.TB, repo, digest string) {
	tb.Helper()
	TamperPayloads(tb, repo, digest, `"clusters":[`, `"clusters":["rogue",`)
}

// TamperPayloads rewrites the artifact's attestation image with the first old in every
// envelope's payload (the in-toto statement's JSON) that has it replaced by replacement, keeping
// the signatures, as an attacker with write access to the registry would forge what a record
// says; envelopes without old (a render's provenance beside the records) stay as they are. It
// fails the test when no payload has old.
func TamperPayloads(tb testing.TB, repo, digest, old, replacement string) {
	tb.Helper()
	tampered := 0
	tag := rewrite(tb, repo, digest, func(_ v1.Descriptor, data []byte) ([]byte, bool) {
		var env map[string]any
		if err := json.Unmarshal(data, &env); err != nil {
			tb.Fatal(err)
		}
		body, err := base64.StdEncoding.DecodeString(env["payload"].(string))
		if err != nil {
			tb.Fatal(err)
		}
		changed := strings.Replace(string(body), old, replacement, 1)
		if changed != string(body) {
			tampered++
		}
		env["payload"] = base64.StdEncoding.EncodeToString([]byte(changed))
		out, _ := json.Marshal(env)
		return out, true
	})
	if tampered == 0 {
		tb.Fatalf("no payload of %s has %s", tag, old)
	}
}

// Drop rewrites the artifact's attestation image without the envelopes annotated with
// predicateType, as an attacker with write access to the registry would remove what they
// dislike (a revocation). It fails the test when there is none.
func Drop(tb testing.TB, repo, digest, predicateType string) {
	tb.Helper()
	dropped := 0
	tag := rewrite(tb, repo, digest, func(desc v1.Descriptor, data []byte) ([]byte, bool) {
		if desc.Annotations[record.AnnotationPredicateType] == predicateType {
			dropped++
			return nil, false
		}
		return data, true
	})
	if dropped == 0 {
		tb.Fatalf("no envelope of %s is a %s", tag, predicateType)
	}
}

// rewrite writes the artifact's attestation image anew, each layer as edit returns it (with
// its annotations and media type), left out when edit does not keep it, and returns its tag.
func rewrite(tb testing.TB, repo, digest string, edit func(desc v1.Descriptor, data []byte) ([]byte, bool)) name.Tag {
	tb.Helper()
	tag, img := AttImage(tb, repo, digest)
	m, err := img.Manifest()
	if err != nil {
		tb.Fatal(err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, desc := range m.Layers {
		l, err := img.LayerByDigest(desc.Digest)
		if err != nil {
			tb.Fatal(err)
		}
		rc, err := l.Compressed()
		if err != nil {
			tb.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			tb.Fatal(err)
		}
		out, keep := edit(desc, data)
		if !keep {
			continue
		}
		base, err = mutate.Append(base, mutate.Addendum{Layer: static.NewLayer(out, desc.MediaType), Annotations: desc.Annotations, MediaType: desc.MediaType})
		if err != nil {
			tb.Fatal(err)
		}
	}
	if err := remote.Write(tag, base); err != nil {
		tb.Fatalf("rewrite %s: %v", tag, err)
	}
	return tag
}

// NewSigner makes a fresh signing key.
func NewSigner(tb testing.TB) *record.Signer {
	tb.Helper()
	pemKey, err := record.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	s, err := record.ParseSigner(pemKey)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// CosignStatements are the in-toto statements of the envelopes `cosign verify-attestation`
// printed, one a line, decoded.
func CosignStatements(out string) []string {
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
