package provenance_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/provenance"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
	"github.com/kokumi-dev/kokumi/internal/sourcesig/sigtest"
)

// verifyCommand is the command docs/verified-sources.md gives, before the key file and the
// reference.
var verifyCommand = []string{"verify-attestation", "--insecure-ignore-tlog", "--type", "slsaprovenance1", "--allow-http-registry"}

// verify runs stock cosign's verify-attestation of the provenance of ref with the public key.
func verify(t *testing.T, cosign string, publicKey []byte, ref string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kokumi.pub"), publicKey, 0o600); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, verifyCommand...), "--key", "kokumi.pub", ref)
	return sigtest.Run(t, cosign, dir, args...)
}

func TestStockCosignVerifiesTheProvenance(t *testing.T) {
	reg := ocitest.Start(t)
	repo := ocitest.Repo(reg, "kokumi/team-a/shop")
	artifact := ocitest.PushBundle(t, repo, "v1", map[string]string{"manifests.yaml": "kind: ConfigMap\n"})
	source := "sha256:" + strings.Repeat("a", 64)
	image := "sha256:" + strings.Repeat("b", 64)
	render := provenance.Render{
		Namespace: "team-a", Order: "shop", Product: "shop",
		SourceURL: "oci://" + reg.Addr + "/charts/shop", Version: "1.2.3", SourceDigest: source,
		Values: map[string]any{"replicas": 2}, ReleaseName: "shop", TargetNamespace: "shop",
		Images:   []images.Pin{{Original: reg.Addr + "/app:1.0", Pinned: reg.Addr + "/app@" + image}},
		Verify:   []string{"publishers"},
		Verified: []sourcesig.Result{{Repository: reg.Addr + "/charts/shop", Digest: source, KeyID: "0123456789abcdef"}, {Repository: reg.Addr + "/app", Digest: image, KeyID: "0123456789abcdef"}},
	}
	kokumi, other := recordtest.NewSigner(t), recordtest.NewSigner(t)
	store := &record.Store{Client: &oci.Client{}}
	ctx := context.Background()
	first, err := provenance.Attach(ctx, store, kokumi, repo, artifact, render)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := provenance.Attach(ctx, store, kokumi, repo, artifact, render); err != nil || again != first {
		t.Fatalf("the same provenance attached again: %s, %v; want %s once", again, err, first)
	}
	// The provenance is no deployment record: the stages, which read records, do not see it.
	records, err := store.Records(ctx, repo, artifact, mustTrust(t, kokumi))
	if err != nil || len(records) != 0 {
		t.Fatalf("records of an artifact with a provenance only: %+v, %v; want none", records, err)
	}

	for _, cosign := range sigtest.Cosigns {
		t.Run(cosign, func(t *testing.T) {
			out, err := verify(t, cosign, kokumi.PublicKeyPEM(), repo+"@"+artifact)
			if err != nil {
				t.Fatalf("%s refused Kokumi's provenance: %v\n%s", cosign, err, out)
			}
			p := predicateOf(t, out)
			deps := p.BuildDefinition.ResolvedDependencies
			if len(deps) != 2 || deps[0].URI != render.SourceURL+"@"+source || deps[0].Annotations["verified"] != "true" ||
				deps[1].Annotations["pinned"] != render.Images[0].Pinned || deps[1].Annotations["keyID"] != "0123456789abcdef" {
				t.Errorf("the provenance cosign verified names the inputs %+v", deps)
			}
			if p.RunDetails.Builder.ID != provenance.BuilderID || len(p.RunDetails.Builder.BuilderDependencies) != 1 ||
				!strings.HasPrefix(p.BuildDefinition.ExternalParameters.ValuesDigest, "sha256:") {
				t.Errorf("builder %+v, parameters %+v", p.RunDetails.Builder, p.BuildDefinition.ExternalParameters)
			}
			if out, err := verify(t, cosign, other.PublicKeyPEM(), repo+"@"+artifact); err == nil {
				t.Errorf("%s verified the provenance with a key that did not sign it:\n%s", cosign, out)
			}
		})
	}
	// Changed in the registry (an image swapped for another), it verifies no more.
	recordtest.TamperPayloads(t, repo, artifact, `"uri":"`+render.Images[0].Original, `"uri":"`+reg.Addr+"/evil:1.0")
	for _, cosign := range sigtest.Cosigns {
		if out, err := verify(t, cosign, kokumi.PublicKeyPEM(), repo+"@"+artifact); err == nil {
			t.Errorf("%s verified a tampered provenance:\n%s", cosign, out)
		}
	}
}

func mustTrust(t *testing.T, s *record.Signer) record.TrustedKeys {
	t.Helper()
	k, err := record.ParseTrustedKeys(s.PublicKeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// predicateOf reads the one statement cosign printed (a JSON line with the envelope) and
// returns its SLSA predicate.
func predicateOf(t *testing.T, out string) provenance.Predicate {
	t.Helper()
	var found []provenance.Predicate
	for _, line := range strings.Split(out, "\n") {
		var env struct {
			Payload string `json:"payload"`
		}
		if json.Unmarshal([]byte(line), &env) != nil || env.Payload == "" {
			continue
		}
		body, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			PredicateType string               `json:"predicateType"`
			Predicate     provenance.Predicate `json:"predicate"`
		}
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		if st.PredicateType != provenance.PredicateType {
			t.Errorf("cosign printed a statement of type %s", st.PredicateType)
		}
		found = append(found, st.Predicate)
	}
	if len(found) != 1 {
		t.Fatalf("cosign printed %d statements, want 1:\n%s", len(found), out)
	}
	return found[0]
}

// BenchmarkAttach measures what the provenance adds to a render that makes a Preparation:
// signing it and attaching it to a new artifact in a registry on loopback (`make bench-verify`).
func BenchmarkAttach(b *testing.B) {
	reg := ocitest.Start(b)
	repo := ocitest.Repo(reg, "kokumi/team-a/shop")
	signer := recordtest.NewSigner(b)
	store := &record.Store{Client: &oci.Client{}}
	artifacts := make([]string, b.N)
	for i := range artifacts {
		artifacts[i] = ocitest.PushBundle(b, repo, fmt.Sprintf("v%d", i), map[string]string{"manifests.yaml": fmt.Sprintf("kind: ConfigMap # %d\n", i)})
	}
	render := provenance.Render{Namespace: "team-a", Order: "shop", Product: "shop", SourceURL: "oci://" + reg.Addr + "/charts/shop",
		SourceDigest: "sha256:" + strings.Repeat("a", 64), TargetNamespace: "shop"}
	b.ResetTimer()
	for i := range b.N {
		if _, err := provenance.Attach(context.Background(), store, signer, repo, artifacts[i], render); err != nil {
			b.Fatal(err)
		}
	}
}

// The provenance says when its render started (to the second, in UTC), and the registry's
// reader of delivery evidence reads it back, verified; a render without a start says none.
func TestTheProvenanceSaysWhenTheRenderStarted(t *testing.T) {
	ctx := context.Background()
	reg := ocitest.Start(t)
	repo := ocitest.Repo(reg, "team-a/podinfo")
	store := &record.Store{Client: &oci.Client{}}
	signer := recordtest.NewSigner(t)
	keys, err := record.ParseTrustedKeys(signer.PublicKeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	started := time.Date(2026, 1, 2, 8, 0, 0, 700_000_000, time.FixedZone("CET", 3600))
	for _, c := range []struct {
		started time.Time
		want    time.Time
	}{{started, time.Date(2026, 1, 2, 7, 0, 0, 0, time.UTC)}, {time.Time{}, time.Time{}}} {
		artifact, err := (&oci.Client{}).PushArtifact(ctx, repo, []byte("started "+c.started.String()), nil)
		if err != nil {
			t.Fatal(err)
		}
		render := provenance.Render{Namespace: "team-a", Order: "podinfo", SourceURL: "oci://example/charts/podinfo", SourceDigest: "sha256:" + strings.Repeat("a", 64), StartedOn: c.started}
		if _, err := provenance.Attach(ctx, store, signer, repo, artifact, render); err != nil {
			t.Fatal(err)
		}
		a, err := store.Evidence(ctx, repo, artifact, keys)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Changes) != 1 || !a.Changes[0].Verified || !a.Changes[0].StartedOn.Equal(c.want) {
			t.Errorf("render started %v: the evidence reads %+v, want startedOn %v", c.started, a.Changes, c.want)
		}
		if got, _ := store.Attestations(ctx, repo, artifact, keys); len(got.Changes) != 0 {
			t.Errorf("Attestations read the provenance: %+v", got.Changes)
		}
	}
}
