// Package record writes and reads Kokumi's deployment records: an in-toto Statement about a
// Preparation's artifact, signed as a DSSE envelope with an ECDSA P-256 key and attached to the
// artifact in cosign's attestation layout (the tag sha256-<hex>.att of the artifact's
// repository), so that stock cosign verifies it:
//
//	cosign verify-attestation --key cosign.pub --insecure-ignore-tlog \
//	  --type https://kokumi.dev/deployment-record/v1 <host>/<repo>@sha256:<hex>
package record

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// PredicateType is the predicate type of a deployment record.
const PredicateType = "https://kokumi.dev/deployment-record/v1"

// ProvenancePredicateType is SLSA Provenance v1, the predicate type of the provenance Kokumi
// attaches to every artifact it renders (internal/provenance), next to its records.
const ProvenancePredicateType = "https://slsa.dev/provenance/v1"

// StatementType is the in-toto Statement type records are written as.
const StatementType = "https://in-toto.io/Statement/v1"

// PayloadType is the DSSE payload type of an in-toto Statement (the only one cosign accepts).
const PayloadType = "application/vnd.in-toto+json"

// MediaTypeEnvelope is the media type of a DSSE envelope layer in cosign's attestation image.
const MediaTypeEnvelope = "application/vnd.dsse.envelope.v1+json"

// statementTypeV01 is the older in-toto Statement type, which cosign reads as well.
const statementTypeV01 = "https://in-toto.io/Statement/v0.1"

// Predicate is what a record says.
type Predicate struct {
	// Order is the name of the Order that deployed the Preparation.
	Order string `json:"order"`
	// Namespace is the Order's namespace.
	Namespace string `json:"namespace"`
	// Environment is the Environment it was deployed to.
	Environment string `json:"environment"`
	// Wave, when set, is the wave of the Environment's roll-out the record is of: the clusters
	// named are those of that wave and the waves before it. Empty: the whole Environment.
	Wave string `json:"wave,omitempty"`
	// TargetNamespace is the namespace the workloads run in on each cluster.
	TargetNamespace string `json:"targetNamespace"`
	// Preparation is the name of the deployed Preparation.
	Preparation string `json:"preparation"`
	// Clusters are the clusters that ran it synced and healthy at the digest, sorted.
	Clusters []string `json:"clusters"`
	// Time is when the record was made.
	Time time.Time `json:"time"`
	// Verified says that every verification and approval the Environment asked for, of the
	// waves up to Wave (or of all and of the Environment itself when Wave is empty), passed or
	// was given, and at least one was asked for.
	Verified bool `json:"verified,omitempty"`
	// Verifications are the verifications that passed, in roll-out order.
	Verifications []VerificationEvidence `json:"verifications,omitempty"`
	// Approvers are the approvals given, in roll-out order.
	Approvers []ApprovalEvidence `json:"approvers,omitempty"`
}

// VerificationEvidence is one verification a record says passed.
type VerificationEvidence struct {
	// Name of the verification; Wave the wave it verified (empty: the Environment).
	Name string `json:"name"`
	Wave string `json:"wave,omitempty"`
	// Kind is job or http.
	Kind string `json:"kind"`
	// Time is when it passed.
	Time time.Time `json:"time"`
	// Checked counts the clusters the last run of a per-cluster check asked, of the wave and of
	// the baseline; Clusters are their answers (at most ten: the status's).
	Checked  int32             `json:"checked,omitempty"`
	Clusters []ClusterEvidence `json:"clusters,omitempty"`
}

// ClusterEvidence is one cluster's answer to the last run of a per-cluster check.
type ClusterEvidence struct {
	Cluster string `json:"cluster"`
	// Baseline is true for a cluster that ran the release before.
	Baseline bool `json:"baseline,omitempty"`
	// Value is what its answer measured.
	Value string `json:"value,omitempty"`
}

// ApprovalEvidence is one approval a record names.
type ApprovalEvidence struct {
	// By is who approved, as the API server named them; Wave the wave approved (empty: the
	// Environment).
	By   string `json:"by"`
	Wave string `json:"wave,omitempty"`
}

// statement is an in-toto Statement.
type statement struct {
	Type          string          `json:"_type"`
	Subject       []subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// recordStatement is an in-toto Statement read as a deployment record.
type recordStatement struct {
	Type          string    `json:"_type"`
	Subject       []subject `json:"subject"`
	PredicateType string    `json:"predicateType"`
	Predicate     Predicate `json:"predicate"`
}

// subject is one artifact a statement is about.
type subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Record is one record read back from the registry.
type Record struct {
	// Digest is the digest of the DSSE envelope layer (sha256:...).
	Digest string
	// KeyID is which trusted key verified it ("" when none did).
	KeyID string
	// Predicate is what the record says; filled in whenever the statement could be read, even
	// when it did not verify.
	Predicate Predicate
	// Verified says that a trusted key signed it, and that it is a Kokumi record about the
	// artifact.
	Verified bool
	// Problem says why it did not verify, short and human.
	Problem string
}

// splitDigest checks a sha256:<64 hex> digest and returns the hex part.
func splitDigest(d string) (string, error) {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex digits>", d)
	}
	if _, err := hex.DecodeString(hexPart); err != nil {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex digits>", d)
	}
	return hexPart, nil
}

// Envelope signs a statement about the artifact repository@artifactDigest with predicate p and
// returns the DSSE envelope as JSON. The clusters are sorted and the time is in UTC; the same
// inputs and key always give the same bytes (RFC 6979 signatures).
func Envelope(ctx context.Context, repository, artifactDigest string, signer *Signer, p Predicate) ([]byte, error) {
	p.Clusters = slices.Clone(p.Clusters)
	if p.Clusters == nil {
		p.Clusters = []string{}
	}
	slices.Sort(p.Clusters)
	p.Time = p.Time.UTC()
	out, err := SignStatement(ctx, repository, artifactDigest, signer, PredicateType, p)
	if err != nil {
		return nil, fmt.Errorf("sign record: %w", err)
	}
	return out, nil
}

// SignStatement signs an in-toto Statement v1 about the artifact repository@artifactDigest with
// the predicate type and predicate (marshalled as JSON), as a DSSE envelope the way `cosign
// attest` signs one, and returns the envelope as JSON. The same inputs and key always give the
// same bytes.
func SignStatement(ctx context.Context, repository, artifactDigest string, signer *Signer, predicateType string, predicate any) ([]byte, error) {
	if signer == nil {
		return nil, errors.New("sign statement: no signer")
	}
	hexPart, err := splitDigest(artifactDigest)
	if err != nil {
		return nil, fmt.Errorf("sign statement: %w", err)
	}
	pred, err := json.Marshal(predicate)
	if err != nil {
		return nil, fmt.Errorf("sign statement: marshal predicate: %w", err)
	}
	body, err := json.Marshal(statement{
		Type:          StatementType,
		Subject:       []subject{{Name: repository, Digest: map[string]string{"sha256": hexPart}}},
		PredicateType: predicateType,
		Predicate:     pred,
	})
	if err != nil {
		return nil, fmt.Errorf("sign statement: marshal statement: %w", err)
	}
	es, err := dsse.NewEnvelopeSigner(dsseSigner{signer})
	if err != nil {
		return nil, fmt.Errorf("sign statement: %w", err)
	}
	env, err := es.SignPayload(ctx, PayloadType, body)
	if err != nil {
		return nil, fmt.Errorf("sign statement: %w", err)
	}
	out, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("sign statement: marshal envelope: %w", err)
	}
	return out, nil
}

// recordGroup says who made the record in envelope, without verifying it: the namespace, Order,
// Environment and wave of its predicate and the key ids of its signatures. ok is false when it is
// not a deployment record.
func recordGroup(envelope []byte) (group string, ok bool) {
	var env dsse.Envelope
	if err := json.Unmarshal(envelope, &env); err != nil || env.PayloadType != PayloadType {
		return "", false
	}
	body, err := env.DecodeB64Payload()
	if err != nil {
		return "", false
	}
	var st recordStatement
	if err := json.Unmarshal(body, &st); err != nil || st.PredicateType != PredicateType {
		return "", false
	}
	keyIDs := make([]string, 0, len(env.Signatures))
	for _, sig := range env.Signatures {
		keyIDs = append(keyIDs, sig.KeyID)
	}
	slices.Sort(keyIDs)
	p := st.Predicate
	g, err := json.Marshal([]string{p.Namespace, p.Order, p.Environment, p.Wave, strings.Join(keyIDs, ",")})
	if err != nil {
		return "", false
	}
	return string(g), true
}

// Verify verifies one DSSE envelope for artifactDigest with keys: a listed key signed it, it
// holds an in-toto Statement of PredicateType, and its subject is the artifact. It makes no
// network call.
func Verify(envelope []byte, artifactDigest string, keys TrustedKeys) Record {
	r := Record{}
	c := verifyStatement(envelope, artifactDigest, keys, PredicateType, "record", "deployment record", &r.Predicate)
	r.Digest, r.KeyID, r.Verified, r.Problem = c.digest, c.keyID, c.verified, c.problem
	return r
}

// checked is what verifyStatement found of an envelope.
type checked struct {
	digest, keyID, problem string
	verified               bool
}

// verifyStatement verifies one DSSE envelope for artifactDigest with keys: a listed key signed
// it, it holds an in-toto Statement of predicateType, and its subject is the artifact. The
// statement's predicate is read into predicate whenever it could be read, even when it did not
// verify; kind ("record") and what ("deployment record") name it in problems.
func verifyStatement(envelope []byte, artifactDigest string, keys TrustedKeys, predicateType, kind, what string, predicate any) checked {
	sum := sha256.Sum256(envelope)
	r := checked{digest: "sha256:" + hex.EncodeToString(sum[:])}
	var env dsse.Envelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		r.problem = "not a DSSE envelope"
		return r
	}
	if env.PayloadType != PayloadType {
		r.problem = fmt.Sprintf("not a Kokumi %s (payload type %q)", kind, env.PayloadType)
		return r
	}
	body, err := env.DecodeB64Payload()
	if err != nil {
		r.problem = "payload is not base64"
		return r
	}
	var st statement
	if err := json.Unmarshal(body, &st); err != nil {
		r.problem = "payload is not an in-toto statement"
		return r
	}
	if st.PredicateType != predicateType {
		r.problem = fmt.Sprintf("not a Kokumi %s (predicate type %q)", kind, st.PredicateType)
		return r
	}
	if st.Type != StatementType && st.Type != statementTypeV01 {
		r.problem = fmt.Sprintf("not an in-toto statement (type %q)", st.Type)
		return r
	}
	if len(st.Predicate) > 0 {
		if err := json.Unmarshal(st.Predicate, predicate); err != nil {
			r.problem = "predicate is not a " + what
			return r
		}
	}
	if len(keys.keys) == 0 {
		r.problem = "no trusted keys are listed"
		return r
	}
	ev, err := dsse.NewEnvelopeVerifier(keys.verifiers()...)
	if err != nil {
		r.problem = "no trusted keys are listed"
		return r
	}
	accepted, err := ev.Verify(context.Background(), &env)
	if err != nil || len(accepted) == 0 {
		// cosign ignores the key ids of signatures; so does Kokumi when a signature names a
		// key id it does not know, trying every listed key instead.
		if anon, ok := withoutUnknownKeyIDs(env, keys); ok {
			accepted, err = ev.Verify(context.Background(), &anon)
		}
	}
	if err != nil || len(accepted) == 0 {
		r.problem = "signature does not match any listed key"
		return r
	}
	r.keyID = accepted[0].KeyID
	want, err := splitDigest(artifactDigest)
	if err != nil {
		r.problem = "the artifact digest is not sha256"
		return r
	}
	var named []string
	for _, s := range st.Subject {
		if s.Digest["sha256"] == want {
			r.verified = true
			return r
		}
		if d, ok := s.Digest["sha256"]; ok {
			named = append(named, "sha256:"+d)
		}
	}
	switch len(named) {
	case 0:
		r.problem = "subject names no sha256 digest"
	case 1:
		r.problem = fmt.Sprintf("subject is %s not the artifact", named[0])
	default:
		r.problem = fmt.Sprintf("subjects are %s, not the artifact", strings.Join(named, ", "))
	}
	return r
}

// withoutUnknownKeyIDs returns env with the key ids that name no listed key cleared, and
// whether there were any.
func withoutUnknownKeyIDs(env dsse.Envelope, keys TrustedKeys) (dsse.Envelope, bool) {
	changed := false
	sigs := slices.Clone(env.Signatures)
	for i := range sigs {
		if _, ok := keys.keys[sigs[i].KeyID]; sigs[i].KeyID != "" && !ok {
			sigs[i].KeyID = ""
			changed = true
		}
	}
	env.Signatures = sigs
	return env, changed
}
