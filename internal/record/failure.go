package record

import (
	"context"
	"time"
)

// FailurePredicateType is the predicate type of a roll-out failure: Kokumi's signed statement
// that a roll-out of the artifact to an Environment stopped without being Deployed (it halted
// past its failure budget, rolled back, or a person aborted it). Stock cosign verifies it as it
// verifies a record:
//
//	cosign verify-attestation --key cosign.pub --insecure-ignore-tlog \
//	  --type https://kokumi.dev/rollout-failure/v1 <host>/<repo>@sha256:<hex>
const FailurePredicateType = "https://kokumi.dev/rollout-failure/v1"

// The outcomes a roll-out failure names: the roll-out's state (status.rollout.state).
const (
	OutcomeHalted     = "Halted"
	OutcomeRolledBack = "RolledBack"
	OutcomeAborted    = "Aborted"
)

// FailurePredicate is what a roll-out failure says.
type FailurePredicate struct {
	// Order, Namespace, Environment and Preparation name the roll-out that failed.
	Order       string `json:"order"`
	Namespace   string `json:"namespace"`
	Environment string `json:"environment"`
	Preparation string `json:"preparation"`
	// Attempt is the roll-out's attempt of the Preparation (status.rollout.attempt).
	Attempt int64 `json:"attempt,omitempty"`
	// Outcome is Halted, RolledBack or Aborted.
	Outcome string `json:"outcome"`
	// Wave is the last wave the roll-out reached; RollbackTo the Preparation the clusters went
	// back to (RolledBack, Aborted); By who aborted it.
	Wave       string `json:"wave,omitempty"`
	RollbackTo string `json:"rollbackTo,omitempty"`
	By         string `json:"by,omitempty"`
	// Time is when the roll-out stopped: the time of the Serving's Ready condition.
	Time time.Time `json:"time"`
}

// Failure is one roll-out failure read back from the registry.
type Failure struct {
	// Digest is the digest of the DSSE envelope layer (sha256:...).
	Digest string
	// KeyID is which trusted key verified it ("" when none did).
	KeyID string
	// Predicate is what it says, whenever the statement could be read.
	Predicate FailurePredicate
	// Verified says that a trusted key signed it and that it is about the artifact.
	Verified bool
	// Problem says why it did not verify.
	Problem string
}

// Fail signs a roll-out failure (the time in UTC) and appends it to the artifact's attestation
// image, beside the records; it returns its digest and whether it was added (false: the same
// failure was attached already: the same inputs and key always give the same envelope).
// Compaction never drops one.
func (s *Store) Fail(ctx context.Context, repository, artifactDigest string, signer *Signer, p FailurePredicate) (string, bool, error) {
	p.Time = p.Time.UTC()
	return s.attachStatement(ctx, repository, artifactDigest, signer, FailurePredicateType, "roll-out failure", p)
}

// VerifyFailure verifies one DSSE envelope for artifactDigest with keys as Verify does, as a
// roll-out failure (FailurePredicateType).
func VerifyFailure(envelope []byte, artifactDigest string, keys TrustedKeys) Failure {
	f := Failure{}
	c := verifyStatement(envelope, artifactDigest, keys, FailurePredicateType, "roll-out failure", "roll-out failure", &f.Predicate)
	f.Digest, f.KeyID, f.Verified, f.Problem = c.digest, c.keyID, c.verified, c.problem
	return f
}

// Change is when the change an artifact was rendered from was picked up, as its signed SLSA
// provenance says (runDetails.metadata.startedOn: when the render started).
type Change struct {
	// Digest is the digest of the provenance's envelope layer.
	Digest string
	// StartedOn is when the render started; zero when the provenance does not say.
	StartedOn time.Time
	// Verified says that a trusted key signed it and that it is about the artifact.
	Verified bool
	// Problem says why it did not verify.
	Problem string
}

// provenanceStart is the part of a SLSA Provenance v1 predicate a Change reads.
type provenanceStart struct {
	RunDetails struct {
		Metadata struct {
			StartedOn *time.Time `json:"startedOn"`
		} `json:"metadata"`
	} `json:"runDetails"`
}

// VerifyChange verifies one DSSE envelope of SLSA provenance (ProvenancePredicateType) for
// artifactDigest with keys as Verify does, and reads when its render started.
func VerifyChange(envelope []byte, artifactDigest string, keys TrustedKeys) Change {
	var p provenanceStart
	c := verifyStatement(envelope, artifactDigest, keys, ProvenancePredicateType, "provenance", "SLSA provenance", &p)
	out := Change{Digest: c.digest, Verified: c.verified, Problem: c.problem}
	if t := p.RunDetails.Metadata.StartedOn; t != nil {
		out.StartedOn = t.UTC()
	}
	return out
}
