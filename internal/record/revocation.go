package record

import (
	"context"
	"time"
)

// RevocationPredicateType is the predicate type of a revocation: Kokumi's signed statement that
// a deployment record of the artifact no longer holds (an Environment's guard failed after it
// was Deployed). Stock cosign verifies it as it verifies a record:
//
//	cosign verify-attestation --key cosign.pub --insecure-ignore-tlog \
//	  --type https://kokumi.dev/revocation/v1 <host>/<repo>@sha256:<hex>
const RevocationPredicateType = "https://kokumi.dev/revocation/v1"

// RevocationPredicate is what a revocation says.
type RevocationPredicate struct {
	// Order, Namespace, Environment and Preparation are those of the record revoked.
	Order       string `json:"order"`
	Namespace   string `json:"namespace"`
	Environment string `json:"environment"`
	Preparation string `json:"preparation"`
	// Revokes is the digest of the deployment record revoked (sha256:...).
	Revokes string `json:"revokes"`
	// Verified is always false: what the record said verified no longer holds.
	Verified bool `json:"verified"`
	// Check is the verification that failed, and what it measured.
	Check RevokingCheck `json:"check"`
	// Time is when the verification failed.
	Time time.Time `json:"time"`
}

// RevokingCheck is the verification whose failure revoked a record.
type RevokingCheck struct {
	// Name of the verification of the Environment's spec.verify; Kind is job or http.
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Runs counts the runs the guard made of it; Failures those that failed.
	Runs     int32 `json:"runs"`
	Failures int32 `json:"failures"`
	// Message is what its last run measured: the answer's status code and verdict (and its
	// first lines where the admin shows them), or the Job's result and last words.
	Message string `json:"message"`
}

// Revocation is one revocation read back from the registry.
type Revocation struct {
	// Digest is the digest of the DSSE envelope layer (sha256:...).
	Digest string
	// KeyID is which trusted key verified it ("" when none did).
	KeyID string
	// Predicate is what it says, whenever the statement could be read.
	Predicate RevocationPredicate
	// Verified says that a trusted key signed it and that it is about the artifact.
	Verified bool
	// Problem says why it did not verify.
	Problem string
}

// Revoke signs a revocation (verified always written false, the time in UTC) and appends it to
// the artifact's attestation image, beside the records; it returns its digest and whether it was
// added. The same revocation attached already is not added again. Compaction never drops a
// revocation.
func (s *Store) Revoke(ctx context.Context, repository, artifactDigest string, signer *Signer, p RevocationPredicate) (string, bool, error) {
	p.Verified = false
	p.Time = p.Time.UTC()
	return s.attachStatement(ctx, repository, artifactDigest, signer, RevocationPredicateType, "revocation", p)
}

// VerifyRevocation verifies one DSSE envelope for artifactDigest with keys as Verify does, as a
// revocation (RevocationPredicateType).
func VerifyRevocation(envelope []byte, artifactDigest string, keys TrustedKeys) Revocation {
	r := Revocation{}
	c := verifyStatement(envelope, artifactDigest, keys, RevocationPredicateType, "revocation", "revocation", &r.Predicate)
	r.Digest, r.KeyID, r.Verified, r.Problem = c.digest, c.keyID, c.verified, c.problem
	return r
}
