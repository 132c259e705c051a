package record_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
	"github.com/kokumi-dev/kokumi/internal/sourcesig/sigtest"
)

// stockCosigns are the stock cosign commands records are verified with, as `make test-assets`
// links them: cosign v2 and cosign v3.
var stockCosigns = []string{"cosign", "cosign-v3"}

// cosignPath finds a cosign `make test-assets` builds.
func cosignPath(t *testing.T, name string) string {
	t.Helper()
	return sigtest.CosignPath(t, name)
}

// verifyAttestation runs stock cosign's verify-attestation with the public key against
// repo@digest, with the flags docs/deployment-records.md gives and the extra ones, and returns its
// error and output.
func verifyAttestation(t *testing.T, cosign string, publicKey []byte, repo, digest string, extra ...string) (string, error) {
	t.Helper()
	args := []string{"verify-attestation", "--key", "$KEY", "--insecure-ignore-tlog", "--type", record.PredicateType, "--allow-http-registry"}
	args = append(append(args, extra...), repo+"@"+digest)
	return runWithKey(t, publicKey, nil, cosign, args...)
}

// attestWithStockCosignV3 attests the artifact repo@digest as stock cosign v3 does by default,
// with a key of its own: a Sigstore bundle attached as an OCI referrer of the artifact.
func attestWithStockCosignV3(t *testing.T, repo, digest string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "predicate.json"), []byte(`{"scan":"clean"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"generate-key-pair"},
		// No transparency log and no signing config from Sigstore's TUF repository: nothing leaves
		// the machine.
		{"attest", "--key", "cosign.key", "--predicate", "predicate.json", "--type", "custom", "--allow-http-registry",
			"--use-signing-config=false", "--tlog-upload=false", "--yes", repo + "@" + digest},
	} {
		cmd := exec.Command(cosignPath(t, "cosign-v3"), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"), "DOCKER_CONFIG="+filepath.Join(dir, "docker"), "COSIGN_PASSWORD=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cosign %s: %v\n%s", args[0], err, out)
		}
	}
}

// runWithKey runs the command with the public key in a file, which $KEY names in its environment
// and an argument "$KEY" is replaced with, in an empty home directory (cosign keeps its TUF cache
// and docker config there), and returns its output (stdout and stderr) and error.
func runWithKey(t *testing.T, publicKey []byte, env []string, command string, args ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "kokumi.pub")
	if err := os.WriteFile(keyFile, publicKey, 0o600); err != nil {
		t.Fatal(err)
	}
	args = slices.Clone(args)
	for i := range args {
		if args[i] == "$KEY" {
			args[i] = keyFile
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, command, args...)
	cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"), "DOCKER_CONFIG="+filepath.Join(dir, "docker"), "KEY="+keyFile)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// evidencePredicate is a record of a verified stage: two verifications passed (one of a wave,
// one of the Environment) and two people approved.
func evidencePredicate() record.Predicate {
	p := predicate("staging-2", "staging-1")
	p.Environment = "staging"
	p.Verified = true
	p.Verifications = []record.VerificationEvidence{
		{Name: "smoke", Wave: "canary", Kind: "http", Time: time.Date(2026, 3, 1, 11, 20, 0, 0, time.UTC)},
		{Name: "e2e", Kind: "job", Time: time.Date(2026, 3, 1, 11, 28, 0, 0, time.UTC)},
	}
	p.Approvers = []record.ApprovalEvidence{{By: "alice@example.com", Wave: "canary"}, {By: "bob@example.com"}}
	return p
}

func TestStockCosignVerifiesRecords(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	st := &record.Store{Client: &oci.Client{}}
	a, b := recordtest.NewSigner(t), recordtest.NewSigner(t)

	good := pushArtifact(t, repo, "good")
	attach(t, st, repo, good, a, predicate("edge-1", "edge-2"))
	attach(t, st, repo, good, b, predicate("edge-1"))

	// A verified stage's record, next to a record of the same stage, signed by another key, that
	// does not say verified.
	notVerified := predicate("staging-1")
	notVerified.Environment = "staging"
	evidence := pushArtifact(t, repo, "evidence")
	attach(t, st, repo, evidence, b, notVerified)
	attach(t, st, repo, evidence, a, evidencePredicate())

	tampered := pushArtifact(t, repo, "tampered")
	attach(t, st, repo, tampered, a, predicate("edge-1"))
	recordtest.Tamper(t, repo, tampered)

	// A record of a stage that was not verified, rewritten in the registry to say it was.
	forged := pushArtifact(t, repo, "forged")
	attach(t, st, repo, forged, a, notVerified)
	recordtest.TamperPayloads(t, repo, forged, `"clusters":[`, `"verified":true,"clusters":[`)

	// A stage whose record says it was not verified, and one verified only up to a wave.
	unverified := pushArtifact(t, repo, "unverified")
	attach(t, st, repo, unverified, a, notVerified)
	waveOnly := pushArtifact(t, repo, "wave-only")
	canary := evidencePredicate()
	canary.Wave = "canary"
	attach(t, st, repo, waveOnly, a, canary)

	// The same, and another attestation that stock cosign v3 made with its defaults (a Sigstore
	// bundle, as an OCI referrer).
	bundled := pushArtifact(t, repo, "bundled")
	attach(t, st, repo, bundled, a, evidencePredicate())
	attestWithStockCosignV3(t, repo, bundled)

	// A stage whose guard failed after it was Deployed: its record, and Kokumi's revocation of it.
	revoked := pushArtifact(t, repo, "revoked")
	recordDigest := attach(t, st, repo, revoked, a, evidencePredicate())
	revocation := revocationPredicate(recordDigest)
	if _, _, err := st.Revoke(context.Background(), repo, revoked, a, revocation); err != nil {
		t.Fatal(err)
	}

	// A roll-out that halted: Kokumi's roll-out failure of it.
	halted := pushArtifact(t, repo, "halted")
	if _, _, err := st.Fail(context.Background(), repo, halted, a, failurePredicate()); err != nil {
		t.Fatal(err)
	}

	for _, name := range stockCosigns {
		t.Run(name, func(t *testing.T) {
			cosign := cosignPath(t, name)
			checkRevocation(t, cosign, a, repo, revoked, recordDigest)
			checkFailure(t, cosign, a, repo, halted)
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

			out, err = verifyAttestation(t, cosign, a.PublicKeyPEM(), repo, evidence)
			if err != nil {
				t.Fatalf("cosign refused a record carrying verifications and approvers: %v\n%s", err, out)
			}
			checkEvidence(t, statements(out), repo, evidence)

			// An artifact that also has a Sigstore bundle: both versions then read the bundles
			// alone. cosign v3 reads Kokumi's records (cosign's older layout) again when asked to;
			// cosign v2.6 cannot be asked to (it fails on the bundles, for want of Sigstore's
			// trusted root here, or finds no record of the key where it has one).
			out, err = verifyAttestation(t, cosign, a.PublicKeyPEM(), repo, bundled)
			if err == nil || (!strings.Contains(out, "no matching attestations") && !strings.Contains(out, "trusted root is required when using new bundle format")) {
				t.Errorf("%s verified Kokumi's record next to a Sigstore bundle with the plain command (%v), which the docs say it does not:\n%s", name, err, out)
			}
			if name == "cosign-v3" {
				out, err = verifyAttestation(t, cosign, a.PublicKeyPEM(), repo, bundled, "--new-bundle-format=false")
				if err != nil {
					t.Fatalf("cosign v3 --new-bundle-format=false refused a record next to a Sigstore bundle: %v\n%s", err, out)
				}
				checkEvidence(t, statements(out), repo, bundled)
			}

			for what, digest := range map[string]string{"a tampered record": tampered, "a record forged to say verified": forged} {
				if out, err := verifyAttestation(t, cosign, a.PublicKeyPEM(), repo, digest); err == nil || !strings.Contains(out, "no matching attestations") {
					t.Errorf("cosign did not refuse %s (%v):\n%s", what, err, out)
				}
			}

			if out, err := verifyAttestation(t, cosign, recordtest.NewSigner(t).PublicKeyPEM(), repo, good); err == nil || !strings.Contains(out, "no matching attestations") {
				t.Errorf("cosign did not refuse records with a key that did not sign them (%v):\n%s", err, out)
			}

			// The pipeline step of the docs passes on the verified record of the stage alone.
			if ok, out := runStageGate(t, cosign, a.PublicKeyPEM(), repo+"@"+evidence, "team-a", "shop", "staging"); !ok {
				t.Errorf("the stage gate refused an artifact with a verified record of staging:\n%s", out)
			}
			for what, c := range map[string]struct{ digest, ns, order, env string }{
				"another Environment":                 {evidence, "team-a", "shop", "prod"},
				"another Order":                       {evidence, "team-a", "cart", "staging"},
				"another namespace":                   {evidence, "team-b", "shop", "staging"},
				"a record that does not say verified": {unverified, "team-a", "shop", "staging"},
				"a record forged to say verified":     {forged, "team-a", "shop", "staging"},
				"a record verified up to a wave only": {waveOnly, "team-a", "shop", "staging"},
			} {
				if ok, out := runStageGate(t, cosign, a.PublicKeyPEM(), repo+"@"+c.digest, c.ns, c.order, c.env); ok {
					t.Errorf("the stage gate passed %s:\n%s", what, out)
				}
			}
			// The verified record counts only with the key that signed it: b's record is not verified.
			if ok, out := runStageGate(t, cosign, b.PublicKeyPEM(), repo+"@"+evidence, "team-a", "shop", "staging"); ok {
				t.Errorf("the stage gate passed on a verified record signed by another key than the one given:\n%s", out)
			}
		})
	}
}

// stageGate is the pipeline step docs/deployment-records.md gives: stock cosign verifies the
// records of an artifact with Kokumi's key, and jq passes only when one of them is a record of
// the whole Environment $env (no wave), made by the Order $order of namespace $ns, that says
// verified. COSIGN, KEY and REF name the cosign command, the public key file and the artifact.
const stageGate = `set -o pipefail
"$COSIGN" verify-attestation --key "$KEY" --insecure-ignore-tlog --allow-http-registry \
  --type https://kokumi.dev/deployment-record/v1 "$REF" 2>/dev/null |
  jq -se --arg ns "$NS" --arg order "$ORDER" --arg env "$ENV" \
    'map(.payload | @base64d | fromjson | .predicate)
     | any(.namespace == $ns and .order == $order and .environment == $env
           and (.wave // "") == "" and .verified == true)'`

// runStageGate runs stageGate with bash and says whether it passed, with its output.
func runStageGate(t *testing.T, cosign string, publicKey []byte, ref, ns, order, env string) (bool, string) {
	t.Helper()
	out, err := runWithKey(t, publicKey, []string{"COSIGN=" + cosign, "REF=" + ref, "NS=" + ns, "ORDER=" + order, "ENV=" + env},
		"bash", "-c", stageGate)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run the stage gate: %v\n%s", err, out)
	}
	return err == nil, out
}

// checkEvidence checks that the statements cosign verified are the one evidence record: its
// subject is the artifact and its predicate says, field for field, what was signed.
func checkEvidence(t *testing.T, sts []string, repo, digest string) {
	t.Helper()
	if len(sts) != 1 {
		t.Fatalf("cosign verified %d statements with the key, want the one record it signed: %q", len(sts), sts)
	}
	var st struct {
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Name   string            `json:"name"`
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
		Predicate record.Predicate `json:"predicate"`
	}
	if err := json.Unmarshal([]byte(sts[0]), &st); err != nil {
		t.Fatalf("the verified statement does not read: %v\n%s", err, sts[0])
	}
	if st.PredicateType != record.PredicateType || len(st.Subject) != 1 || st.Subject[0].Name != repo ||
		"sha256:"+st.Subject[0].Digest["sha256"] != digest {
		t.Errorf("the verified statement is not a record about %s@%s: %s", repo, digest, sts[0])
	}
	want, got := evidencePredicate(), st.Predicate
	if !got.Verified || got.Environment != want.Environment || !reflect.DeepEqual(got.Clusters, []string{"staging-1", "staging-2"}) {
		t.Errorf("the verified predicate says verified=%v environment=%q clusters=%v, want true, %q, [staging-1 staging-2]",
			got.Verified, got.Environment, got.Clusters, want.Environment)
	}
	if len(got.Verifications) != len(want.Verifications) {
		t.Fatalf("the verified predicate names %d verifications, want %d: %+v", len(got.Verifications), len(want.Verifications), got.Verifications)
	}
	for i, v := range got.Verifications {
		w := want.Verifications[i]
		if v.Name != w.Name || v.Wave != w.Wave || v.Kind != w.Kind || !v.Time.Equal(w.Time) {
			t.Errorf("verification %d is %+v, want %+v", i, v, w)
		}
	}
	if !reflect.DeepEqual(got.Approvers, want.Approvers) {
		t.Errorf("the verified predicate's approvers are %+v, want %+v", got.Approvers, want.Approvers)
	}
}

// statements are the in-toto statements of the envelopes cosign printed, one a line.
func statements(out string) []string { return recordtest.CosignStatements(out) }

// revocationPredicate is Kokumi's revocation of the record recordDigest of staging: its guard's
// error-rate check failed.
func revocationPredicate(recordDigest string) record.RevocationPredicate {
	return record.RevocationPredicate{Order: "shop", Namespace: "team-a", Environment: "staging", Preparation: "staging-2",
		Revokes: recordDigest, Time: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Check: record.RevokingCheck{Name: "error-rate", Kind: "http", Runs: 3, Failures: 1, Message: "successCondition does not hold; the answer: 200 OK"}}
}

// checkRevocation checks that stock cosign verifies the revocation of the record recordDigest
// attached to repo@digest with the documented command (--type the revocation's predicate type),
// that the record's own command still finds the record alone, and that another key's refused.
func checkRevocation(t *testing.T, cosign string, a *record.Signer, repo, digest, recordDigest string) {
	t.Helper()
	args := []string{"verify-attestation", "--key", "$KEY", "--insecure-ignore-tlog", "--type", record.RevocationPredicateType, "--allow-http-registry", repo + "@" + digest}
	out, err := runWithKey(t, a.PublicKeyPEM(), nil, cosign, args...)
	if err != nil {
		t.Fatalf("cosign refused Kokumi's revocation: %v\n%s", err, out)
	}
	sts := statements(out)
	if len(sts) != 1 || !strings.Contains(sts[0], `"predicateType":"`+record.RevocationPredicateType+`"`) {
		t.Fatalf("cosign's statements of the revocation type: %q", sts)
	}
	var st struct {
		Predicate record.RevocationPredicate `json:"predicate"`
	}
	if err := json.Unmarshal([]byte(sts[0]), &st); err != nil {
		t.Fatal(err)
	}
	if want := revocationPredicate(recordDigest); !reflect.DeepEqual(st.Predicate, want) || !strings.Contains(sts[0], `"verified":false`) {
		t.Errorf("the revocation says %+v, want %+v with verified false:\n%s", st.Predicate, want, sts[0])
	}
	if out, err := verifyAttestation(t, cosign, a.PublicKeyPEM(), repo, digest); err != nil || len(statements(out)) != 1 ||
		!strings.Contains(statements(out)[0], `"predicateType":"`+record.PredicateType+`"`) {
		t.Errorf("cosign's record command on a revoked record (%v): %q", err, statements(out))
	}
	if out, err := runWithKey(t, recordtest.NewSigner(t).PublicKeyPEM(), nil, cosign, args...); err == nil || !strings.Contains(out, "no matching attestations") {
		t.Errorf("cosign verified the revocation with a key that did not sign it (%v):\n%s", err, out)
	}
}

// failurePredicate is the roll-out failure the tests sign.
func failurePredicate() record.FailurePredicate {
	return record.FailurePredicate{Order: "podinfo-edge", Namespace: "platform", Environment: "edge", Preparation: "podinfo-edge-7",
		Attempt: 3, Outcome: record.OutcomeHalted, Wave: "canary", Time: time.Date(2026, 12, 5, 10, 14, 3, 0, time.UTC)}
}

// checkFailure checks that stock cosign verifies Kokumi's roll-out failure of repo@digest with
// its type and prints what was signed, and refuses it with another key.
func checkFailure(t *testing.T, cosign string, a *record.Signer, repo, digest string) {
	t.Helper()
	args := []string{"verify-attestation", "--key", "$KEY", "--insecure-ignore-tlog", "--type", record.FailurePredicateType, "--allow-http-registry", repo + "@" + digest}
	out, err := runWithKey(t, a.PublicKeyPEM(), nil, cosign, args...)
	if err != nil {
		t.Fatalf("cosign refused Kokumi's roll-out failure: %v\n%s", err, out)
	}
	sts := statements(out)
	if len(sts) != 1 || !strings.Contains(sts[0], `"predicateType":"`+record.FailurePredicateType+`"`) {
		t.Fatalf("cosign's statements of the roll-out failure type: %q", sts)
	}
	var st struct {
		Predicate record.FailurePredicate `json:"predicate"`
	}
	if err := json.Unmarshal([]byte(sts[0]), &st); err != nil {
		t.Fatal(err)
	}
	if want := failurePredicate(); !reflect.DeepEqual(st.Predicate, want) {
		t.Errorf("the roll-out failure says %+v, want %+v", st.Predicate, want)
	}
	if out, err := runWithKey(t, recordtest.NewSigner(t).PublicKeyPEM(), nil, cosign, args...); err == nil || !strings.Contains(out, "no matching attestations") {
		t.Errorf("cosign verified the roll-out failure with a key that did not sign it (%v):\n%s", err, out)
	}
}
