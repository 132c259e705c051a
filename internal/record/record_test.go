package record_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
)

// startRegistry runs a registry on loopback for the test. Before it stops, the shared
// transports drop their idle connections: a connection dialed but never used counts as active
// for five seconds when the registry shuts down.
func startRegistry(tb testing.TB) *registry.Registry {
	tb.Helper()
	reg := ocitest.Start(tb)
	tb.Cleanup(closeIdleConnections)
	return reg
}

func closeIdleConnections() {
	for _, t := range []http.RoundTripper{http.DefaultTransport, remote.DefaultTransport} {
		if c, ok := t.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}

// trust lists the public keys of signers.
func trust(tb testing.TB, signers ...*record.Signer) record.TrustedKeys {
	tb.Helper()
	var pems [][]byte
	for _, s := range signers {
		pems = append(pems, s.PublicKeyPEM())
	}
	keys, err := record.ParseTrustedKeys(pems...)
	if err != nil {
		tb.Fatal(err)
	}
	return keys
}

// pushArtifact pushes a small Preparation-like artifact and returns its digest.
func pushArtifact(tb testing.TB, repo, tag string) string {
	tb.Helper()
	return ocitest.PushBundle(tb, repo, tag, map[string]string{"deploy.yaml": "kind: ConfigMap\nmetadata:\n  name: " + tag + "\n"})
}

func predicate(clusters ...string) record.Predicate {
	return record.Predicate{
		Order: "shop", Namespace: "team-a", Environment: "prod", TargetNamespace: "shop",
		Preparation: "shop-7f3a", Clusters: clusters,
		Time: time.Date(2026, 3, 1, 12, 30, 0, 0, time.FixedZone("CET", 3600)),
	}
}

func attach(tb testing.TB, st *record.Store, repo, digest string, s *record.Signer, p record.Predicate) string {
	tb.Helper()
	d, err := st.Attach(context.Background(), repo, digest, s, p)
	if err != nil {
		tb.Fatalf("Attach: %v", err)
	}
	return d
}

func records(tb testing.TB, st *record.Store, repo, digest string, keys record.TrustedKeys) []record.Record {
	tb.Helper()
	rs, err := st.Records(context.Background(), repo, digest, keys)
	if err != nil {
		tb.Fatalf("Records: %v", err)
	}
	return rs
}

func TestAttachThenRecordsVerifies(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	digest := pushArtifact(t, repo, "v1")
	st := &record.Store{Client: &oci.Client{}}
	a := recordtest.NewSigner(t)

	if rs := records(t, st, repo, digest, trust(t, a)); rs == nil || len(rs) != 0 {
		t.Fatalf("an artifact without records gave %#v, want an empty slice", rs)
	}

	p := predicate("edge-2", "edge-1")
	d := attach(t, st, repo, digest, a, p)
	rs := records(t, st, repo, digest, trust(t, a))
	if len(rs) != 1 {
		t.Fatalf("got %d records, want 1: %+v", len(rs), rs)
	}
	r := rs[0]
	if !r.Verified || r.Problem != "" || r.KeyID != a.KeyID() || r.Digest != d {
		t.Errorf("record = %+v, want verified by %s with digest %s", r, a.KeyID(), d)
	}
	if !slices.Equal(r.Predicate.Clusters, []string{"edge-1", "edge-2"}) {
		t.Errorf("clusters = %v, want them sorted", r.Predicate.Clusters)
	}
	if !r.Predicate.Time.Equal(p.Time) || r.Predicate.Time.Location() != time.UTC {
		t.Errorf("time = %v, want %v in UTC", r.Predicate.Time, p.Time)
	}
	if r.Predicate.Order != "shop" || r.Predicate.Namespace != "team-a" || r.Predicate.Environment != "prod" ||
		r.Predicate.TargetNamespace != "shop" || r.Predicate.Preparation != "shop-7f3a" {
		t.Errorf("predicate = %+v", r.Predicate)
	}

	// The layout cosign reads: an OCI image manifest at sha256-<hex>.att whose layers are DSSE
	// envelopes carrying cosign's annotations.
	_, img := recordtest.AttImage(t, repo, digest)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 {
		t.Fatalf("manifest = %+v", m)
	}
	l := m.Layers[0]
	if l.MediaType != record.MediaTypeEnvelope || l.Digest.String() != d {
		t.Errorf("layer = %+v", l)
	}
	if sig, ok := l.Annotations["dev.cosignproject.cosign/signature"]; !ok || sig != "" {
		t.Errorf("layer annotations = %v, want an empty dev.cosignproject.cosign/signature", l.Annotations)
	}
	if l.Annotations["predicateType"] != record.PredicateType {
		t.Errorf("layer annotations = %v, want predicateType %s", l.Annotations, record.PredicateType)
	}
}

func TestTwoAttachesTwoRecordsAndTheSameRecordOnce(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	digest := pushArtifact(t, repo, "v1")
	st := &record.Store{Client: &oci.Client{}}
	a := recordtest.NewSigner(t)

	first := attach(t, st, repo, digest, a, predicate("edge-1"))
	second := attach(t, st, repo, digest, a, predicate("edge-1", "edge-2"))
	again := attach(t, st, repo, digest, a, predicate("edge-1"))
	if first == second {
		t.Fatal("two different records have the same digest")
	}
	if again != first {
		t.Errorf("the same record attached again gave %s, want %s", again, first)
	}
	rs := records(t, st, repo, digest, trust(t, a))
	if len(rs) != 2 || rs[0].Digest != first || rs[1].Digest != second || !rs[0].Verified || !rs[1].Verified {
		t.Fatalf("records = %+v, want %s then %s, both verified", rs, first, second)
	}
}

func TestTamperedRecordDoesNotVerify(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	digest := pushArtifact(t, repo, "v1")
	st := &record.Store{Client: &oci.Client{}}
	a := recordtest.NewSigner(t)
	attach(t, st, repo, digest, a, predicate("edge-1"))
	recordtest.Tamper(t, repo, digest)

	rs := records(t, st, repo, digest, trust(t, a))
	if len(rs) != 1 {
		t.Fatalf("got %d records, want 1", len(rs))
	}
	if rs[0].Verified || rs[0].Problem != "signature does not match any listed key" || rs[0].KeyID != "" {
		t.Errorf("tampered record = %+v, want unverified with a signature problem", rs[0])
	}
	if !slices.Contains(rs[0].Predicate.Clusters, "rogue") {
		t.Errorf("the tampered record's predicate is not shown: %+v", rs[0].Predicate)
	}
}

func TestRecordOfAnUnlistedKeyDoesNotVerify(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	digest := pushArtifact(t, repo, "v1")
	st := &record.Store{Client: &oci.Client{}}
	a, stranger := recordtest.NewSigner(t), recordtest.NewSigner(t)
	attach(t, st, repo, digest, stranger, predicate("edge-1"))

	rs := records(t, st, repo, digest, trust(t, a))
	if len(rs) != 1 || rs[0].Verified || rs[0].Problem != "signature does not match any listed key" {
		t.Errorf("records = %+v, want one unverified", rs)
	}
	if rs := records(t, st, repo, digest, record.TrustedKeys{}); len(rs) != 1 || rs[0].Verified || rs[0].Problem == "" {
		t.Errorf("with no trusted keys: records = %+v, want one unverified", rs)
	}
}

func TestRecordAboutAnotherDigestDoesNotVerify(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	one, other := pushArtifact(t, repo, "v1"), pushArtifact(t, repo, "v2")
	st := &record.Store{Client: &oci.Client{}}
	a := recordtest.NewSigner(t)
	attach(t, st, repo, one, a, predicate("edge-1"))

	// Someone copies the first artifact's attestations to the second.
	_, img := recordtest.AttImage(t, repo, one)
	otherTag, _ := record.AttestationTag(other)
	tag, err := name.NewTag(repo + ":" + otherTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	rs := records(t, st, repo, other, trust(t, a))
	want := fmt.Sprintf("subject is %s not the artifact", one)
	if len(rs) != 1 || rs[0].Verified || rs[0].Problem != want {
		t.Errorf("records = %+v, want one unverified with %q", rs, want)
	}
	if rs := records(t, st, repo, one, trust(t, a)); len(rs) != 1 || !rs[0].Verified {
		t.Errorf("the original's records = %+v, want one verified", rs)
	}
}

func TestRotationKeepsListedKeysTrusted(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	digest := pushArtifact(t, repo, "v1")
	st := &record.Store{Client: &oci.Client{}}
	a, b := recordtest.NewSigner(t), recordtest.NewSigner(t)
	byA := attach(t, st, repo, digest, a, predicate("edge-1"))
	byB := attach(t, st, repo, digest, b, predicate("edge-1", "edge-2"))

	both := records(t, st, repo, digest, trust(t, a, b))
	if len(both) != 2 || !both[0].Verified || both[0].KeyID != a.KeyID() || both[0].Digest != byA ||
		!both[1].Verified || both[1].KeyID != b.KeyID() || both[1].Digest != byB {
		t.Errorf("with A and B listed: records = %+v", both)
	}
	onlyB := records(t, st, repo, digest, trust(t, b))
	if len(onlyB) != 2 || onlyB[0].Verified || onlyB[0].KeyID != "" || !onlyB[1].Verified || onlyB[1].KeyID != b.KeyID() {
		t.Errorf("with only B listed: records = %+v", onlyB)
	}
}

// countingTransport counts the blob requests it sends.
type countingTransport struct{ blobs atomic.Int64 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.Path, "/blobs/") {
		c.blobs.Add(1)
	}
	return http.DefaultTransport.RoundTrip(req)
}

func TestRecordsAreVerifiedOnce(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	digest := pushArtifact(t, repo, "v1")
	counter := &countingTransport{}
	st := &record.Store{Client: &oci.Client{HTTPClient: &http.Client{Transport: counter}}}
	a, b := recordtest.NewSigner(t), recordtest.NewSigner(t)
	attach(t, st, repo, digest, a, predicate("edge-1"))
	attach(t, st, repo, digest, a, predicate("edge-2"))

	records(t, st, repo, digest, trust(t, a))
	before := counter.blobs.Load()
	if rs := records(t, st, repo, digest, trust(t, a)); len(rs) != 2 || !rs[0].Verified || !rs[1].Verified {
		t.Fatalf("records = %+v", rs)
	}
	if n := counter.blobs.Load() - before; n != 0 {
		t.Errorf("reading the same records again fetched %d blobs, want none", n)
	}
	// Other keys: verified afresh.
	if rs := records(t, st, repo, digest, trust(t, b)); len(rs) != 2 || rs[0].Verified {
		t.Fatalf("with another key: records = %+v", rs)
	}
	if counter.blobs.Load() == before {
		t.Error("another key set reused the verifications of the first")
	}
}

func TestStoreSignsInWithTheClientCredentials(t *testing.T) {
	reg := ocitest.StartWithAuth(t, "robot", "s3cret")
	t.Cleanup(closeIdleConnections)
	repo := ocitest.Repo(reg, "team-a/shop")
	digest := pushArtifact(t, repo, "v1")
	a := recordtest.NewSigner(t)

	anonymous := &record.Store{Client: &oci.Client{}}
	if _, err := anonymous.Attach(context.Background(), repo, digest, a, predicate("edge-1")); err == nil {
		t.Fatal("an anonymous Attach to a registry that wants a password worked")
	}
	st := &record.Store{Client: &oci.Client{Credentials: oci.Credentials{reg.Addr: {Username: "robot", Password: "s3cret"}}}}
	attach(t, st, repo, digest, a, predicate("edge-1"))
	if rs := records(t, st, repo, digest, trust(t, a)); len(rs) != 1 || !rs[0].Verified {
		t.Errorf("records = %+v", rs)
	}
}

func TestAttachRefusesAMissingArtifact(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	pushArtifact(t, repo, "v1")
	st := &record.Store{Client: &oci.Client{}}
	missing := "sha256:" + strings.Repeat("ab", 32)
	if _, err := st.Attach(context.Background(), repo, missing, recordtest.NewSigner(t), predicate()); err == nil {
		t.Error("a record was attached to an artifact that does not exist")
	}
	if _, err := st.Attach(context.Background(), repo, "latest", recordtest.NewSigner(t), predicate()); err == nil {
		t.Error("a record was attached to a tag")
	}
}

func TestVerifyProblems(t *testing.T) {
	a := recordtest.NewSigner(t)
	digest := "sha256:" + strings.Repeat("0f", 32)
	env, err := record.Envelope(context.Background(), "registry.example/shop", digest, a, predicate("edge-1"))
	if err != nil {
		t.Fatal(err)
	}
	if r := record.Verify(env, digest, trust(t, a)); !r.Verified || r.KeyID != a.KeyID() {
		t.Errorf("Verify = %+v, want verified", r)
	}
	other := func(payloadType, statement string) []byte {
		b, _ := json.Marshal(map[string]any{
			"payloadType": payloadType, "payload": base64.StdEncoding.EncodeToString([]byte(statement)),
			"signatures": []map[string]string{{"keyid": "", "sig": "MEUCIQ=="}},
		})
		return b
	}
	for name, tc := range map[string]struct {
		envelope []byte
		problem  string
	}{
		"garbage":        {[]byte("not json"), "not a DSSE envelope"},
		"payload type":   {other("text/plain", "{}"), `not a Kokumi record (payload type "text/plain")`},
		"predicate type": {other("application/vnd.in-toto+json", `{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://slsa.dev/provenance/v1","subject":[]}`), `not a Kokumi record (predicate type "https://slsa.dev/provenance/v1")`},
		"statement type": {other("application/vnd.in-toto+json", `{"_type":"x","predicateType":"https://kokumi.dev/deployment-record/v1"}`), `not an in-toto statement (type "x")`},
		"bad signature":  {other("application/vnd.in-toto+json", `{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://kokumi.dev/deployment-record/v1","predicate":{}}`), "signature does not match any listed key"},
	} {
		if r := record.Verify(tc.envelope, digest, trust(t, a)); r.Verified || r.Problem != tc.problem {
			t.Errorf("%s: Verify = %+v, want problem %q", name, r, tc.problem)
		}
	}
	// A signature whose key id names no listed key is still checked against every listed key,
	// as cosign does.
	var e map[string]any
	_ = json.Unmarshal(env, &e)
	e["signatures"].([]any)[0].(map[string]any)["keyid"] = "somebody-else"
	renamed, _ := json.Marshal(e)
	if r := record.Verify(renamed, digest, trust(t, a)); !r.Verified {
		t.Errorf("a signature with a foreign key id: Verify = %+v, want verified", r)
	}
}

func TestKeysParseAndIDs(t *testing.T) {
	a, b := recordtest.NewSigner(t), recordtest.NewSigner(t)
	if len(a.KeyID()) != 16 || a.KeyID() == b.KeyID() {
		t.Errorf("key ids %q and %q", a.KeyID(), b.KeyID())
	}
	both, err := record.ParseTrustedKeys(append(a.PublicKeyPEM(), b.PublicKeyPEM()...))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a.KeyID(), b.KeyID()}
	slices.Sort(want)
	if !slices.Equal(both.IDs(), want) {
		t.Errorf("IDs = %v, want %v", both.IDs(), want)
	}
	if _, err := record.ParseTrustedKeys([]byte("nothing here")); err == nil {
		t.Error("a file without a public key parsed")
	}
	if _, err := record.ParseSigner(a.PublicKeyPEM()); err == nil {
		t.Error("a public key parsed as a private key")
	}
	pemKey, _ := record.GenerateKey()
	if !strings.HasPrefix(string(pemKey), "-----BEGIN PRIVATE KEY-----") {
		t.Errorf("GenerateKey wrote %.30q, want a PKCS#8 PRIVATE KEY block", pemKey)
	}
	_, err = record.ParseSigner([]byte(strings.Replace(string(pemKey), "A", "B", 5)))
	if err == nil {
		t.Fatal("a damaged key parsed")
	}
	if strings.Contains(err.Error(), string(pemKey[30:60])) {
		t.Errorf("the error quotes the key: %v", err)
	}
}

// BenchmarkVerify verifies 100 envelopes, each naming 1,000 clusters.
func BenchmarkVerify(b *testing.B) {
	signer := recordtest.NewSigner(b)
	keys := trust(b, signer, recordtest.NewSigner(b))
	digest := "sha256:" + strings.Repeat("3c", 32)
	clusters := make([]string, 1000)
	for i := range clusters {
		clusters[i] = fmt.Sprintf("edge-%04d.region-%02d", i, i%17)
	}
	envelopes := make([][]byte, 100)
	for i := range envelopes {
		p := predicate(clusters...)
		p.Time = p.Time.Add(time.Duration(i) * time.Minute)
		env, err := record.Envelope(context.Background(), "registry.example/team-a/shop", digest, signer, p)
		if err != nil {
			b.Fatal(err)
		}
		envelopes[i] = env
	}
	b.ResetTimer()
	for b.Loop() {
		for _, env := range envelopes {
			if r := record.Verify(env, digest, keys); !r.Verified {
				b.Fatalf("Verify = %+v", r.Problem)
			}
		}
	}
}

func TestRevocationsAreReadApartFromRecordsAndVerified(t *testing.T) {
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "team-a/shop")
	digest := pushArtifact(t, repo, "v1")
	st := &record.Store{Client: &oci.Client{}}
	a := recordtest.NewSigner(t)
	recordDigest := attach(t, st, repo, digest, a, predicate("edge-1"))
	p := revocationPredicate(recordDigest)
	revDigest, _, err := st.Revoke(context.Background(), repo, digest, a, p)
	if err != nil {
		t.Fatal(err)
	}
	// The same revocation again is not attached twice.
	if again, _, err := st.Revoke(context.Background(), repo, digest, a, p); err != nil || again != revDigest {
		t.Fatalf("Revoke again = %s, %v; want %s", again, err, revDigest)
	}
	got, err := st.Attestations(context.Background(), repo, digest, trust(t, a))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Records) != 1 || got.Records[0].Digest != recordDigest || !got.Records[0].Verified {
		t.Errorf("records %+v", got.Records)
	}
	if len(got.Revocations) != 1 || !got.Revocations[0].Verified || got.Revocations[0].Digest != revDigest ||
		got.Revocations[0].Predicate.Revokes != recordDigest || got.Revocations[0].Predicate.Check.Name != "error-rate" {
		t.Fatalf("revocations %+v", got.Revocations)
	}
	// Records lists the records alone.
	if rs := records(t, st, repo, digest, trust(t, a)); len(rs) != 1 || rs[0].Digest != recordDigest {
		t.Errorf("Records = %+v", rs)
	}
	// Another key's trust does not verify it; an altered one does not verify.
	if got, _ := st.Attestations(context.Background(), repo, digest, trust(t, recordtest.NewSigner(t))); len(got.Revocations) != 1 || got.Revocations[0].Verified {
		t.Errorf("with another key: %+v", got.Revocations)
	}
	recordtest.TamperPayloads(t, repo, digest, `"name":"error-rate"`, `"name":"latency"`)
	if got, _ := st.Attestations(context.Background(), repo, digest, trust(t, a)); len(got.Revocations) != 1 || got.Revocations[0].Verified ||
		got.Revocations[0].Problem != "signature does not match any listed key" {
		t.Errorf("an altered revocation: %+v", got.Revocations)
	}
}
