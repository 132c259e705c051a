package sourcesig_test

import (
	"context"
	"strings"
	"testing"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
	"github.com/kokumi-dev/kokumi/internal/sourcesig/sigtest"
)

func trusted(t testing.TB, keys ...sigtest.Key) record.TrustedKeys {
	t.Helper()
	pems := make([][]byte, len(keys))
	for i, k := range keys {
		pems[i] = k.Public
	}
	tk, err := record.ParseTrustedKeys(pems...)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestVerifyCosignSignatures(t *testing.T) {
	reg := ocitest.Start(t)
	repo := ocitest.Repo(reg, "charts/app")
	publisher, other := sigtest.NewKey(t), sigtest.NewKey(t)
	keys := trusted(t, other, publisher) // several keys: any one of them verifies
	c := &oci.Client{}
	ctx := context.Background()
	var v sourcesig.Verifier

	check := func(digest string) sourcesig.Result {
		t.Helper()
		r, err := v.Verify(ctx, c, "source "+repo, repo, digest, keys)
		if err != nil {
			t.Fatalf("verify %s: %v", digest, err)
		}
		return r
	}
	want := func(r sourcesig.Result, reason string) {
		t.Helper()
		if r.Reason != reason || (reason == "") != r.Verified() {
			t.Fatalf("verify %s: reason %q (%s), want %q", r.Digest, r.Reason, r.Problem, reason)
		}
	}

	for i, cosign := range sigtest.Cosigns {
		digest := ocitest.PushChart(t, repo, "1.0."+string(rune('0'+i)), "app", "1.0.0", ocitest.Chart(t, "app", map[string]string{"templates/cm.yaml": cosign}))
		want(check(digest), v1.ReasonSignatureMissing)
		sigtest.Sign(t, cosign, publisher, repo+"@"+digest)
		r := check(digest)
		want(r, "")
		if pub := trusted(t, publisher).IDs()[0]; r.KeyID != pub {
			t.Errorf("%s: verified by key %s, want the publisher's %s", cosign, r.KeyID, pub)
		}
		// Unchanged: answered from the cache, after one request for the signature tag.
		fetches := v.Fetches()
		want(check(digest), "")
		if v.Fetches() != fetches {
			t.Errorf("%s: an unchanged, verified input was read again (%d reads, want %d)", cosign, v.Fetches(), fetches)
		}
	}

	// Signed by a key nobody trusts.
	stranger := sigtest.NewKey(t)
	digest := ocitest.PushChart(t, repo, "2.0.0", "app", "2.0.0", ocitest.Chart(t, "app", map[string]string{"templates/cm.yaml": "stranger"}))
	sigtest.Sign(t, "cosign", stranger, repo+"@"+digest)
	r := check(digest)
	want(r, v1.ReasonUntrustedSigner)
	if !strings.Contains(r.Problem, keys.Set()) {
		t.Errorf("problem %q does not name the trusted keys %s", r.Problem, keys.Set())
	}

	// Tampered with after signing: the signed chart is replaced by another, and its signature
	// copied onto it.
	signed := ocitest.PushChart(t, repo, "3.0.0", "app", "3.0.0", ocitest.Chart(t, "app", map[string]string{"templates/cm.yaml": "good"}))
	sigtest.Sign(t, "cosign", publisher, repo+"@"+signed)
	tampered := ocitest.PushChart(t, repo, "3.0.0", "app", "3.0.0", ocitest.Chart(t, "app", map[string]string{"templates/cm.yaml": "evil"}))
	sigTag, _ := sourcesig.SignatureTag(signed)
	tamperedTag, _ := sourcesig.SignatureTag(tampered)
	sigtest.Retag(t, repo+":"+sigTag, repo+":"+tamperedTag)
	r = check(tampered)
	want(r, v1.ReasonSignatureInvalid)
	if !strings.Contains(r.Problem, signed) {
		t.Errorf("problem %q does not name the digest the signature is about", r.Problem)
	}

	// A signature replaced (here: by the stranger's) is seen at the next check, cache or not.
	want(check(signed), "")
	strangerTag, _ := sourcesig.SignatureTag(digest)
	sigtest.Retag(t, repo+":"+strangerTag, repo+":"+sigTag)
	want(check(signed), v1.ReasonSignatureInvalid)
}
