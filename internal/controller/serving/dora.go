package serving

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/dora"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// failed says whether a roll-out stopped as a failure Kokumi signs: it halted, rolled back or
// was aborted, and not because its guard failed (that failure is signed as a revocation).
func failed(st *v1.RolloutStatus) bool {
	return rollout.Stopped(st.State) && (st.Guard == nil || st.Guard.Phase != v1.GuardFailed)
}

// stoppedReasons are the Serving's Ready reasons of a stopped roll-out, by its state.
var stoppedReasons = map[v1.RolloutState]string{
	v1.RolloutHalted: v1.ReasonRolloutHalted, v1.RolloutRolledBack: v1.ReasonRolledBack, v1.RolloutAborted: v1.ReasonRolloutAborted,
}

// maxFailureMemo bounds the failures remembered; the memo starts afresh when full.
const maxFailureMemo = 10000

// failureMemo remembers the roll-outs (a Serving, a Preparation, an attempt) whose failure is
// attached: a halted roll-out reconciled again asks the registry nothing. After a restart each
// is looked up once, and found.
type failureMemo struct {
	mu   sync.Mutex
	done map[string]bool
}

func (m *failureMemo) has(k string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done[k]
}

func (m *failureMemo) add(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil || len(m.done) >= maxFailureMemo {
		m.done = map[string]bool{}
	}
	m.done[k] = true
}

// recordFailure signs the failure of the Serving's roll-out of d.prep, which halted, rolled
// back or was aborted (record.FailurePredicate), and attaches it to the artifact beside its
// records, once per roll-out: a roll-out that halts and is then aborted keeps the first. Its time
// is the Serving's Ready condition's, so the same failure signed again is the same envelope. It
// is counted in the delivery measures (kokumi_dora_change_failures_total) when attached.
func (r *Reconciler) recordFailure(ctx context.Context, s *v1.Serving, d *deployment) error {
	st := s.Status.Rollout
	if !r.recording() || st == nil || !failed(st) || st.Preparation != d.prep.Name {
		return nil
	}
	key := fmt.Sprintf("%s/%s/%d", s.UID, st.Preparation, st.Attempt)
	if r.failures.has(key) {
		return nil
	}
	ready := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
	if ready == nil || ready.Reason != stoppedReasons[st.State] {
		return nil // the Ready condition says something else first: signed once it says this
	}
	want := record.FailurePredicate{Order: s.Spec.OrderRef.Name, Namespace: s.Namespace, Environment: d.environment, Preparation: d.prep.Name,
		Attempt: st.Attempt, Outcome: string(st.State), Wave: st.Wave, RollbackTo: st.RollbackTo, By: st.By, Time: ready.LastTransitionTime.UTC()}
	trusted, err := r.Keys.Trusted(ctx)
	if err != nil {
		return fmt.Errorf("read the trusted keys: %w", err)
	}
	repository, _ := preparation.ArtifactLocation(r.Config.BundledRegistry, d.prep)
	ctx, cancel := context.WithTimeout(ctx, bundled.Timeout)
	defer cancel()
	attested, err := r.Records.Attestations(ctx, repository, d.prep.Spec.Artifact.Digest, trusted)
	if err != nil {
		return fmt.Errorf("read the attestations of %s@%s: %w", repository, d.prep.Spec.Artifact.Digest, err)
	}
	for _, f := range attested.Failures {
		p := f.Predicate
		if f.Verified && p.Namespace == want.Namespace && p.Order == want.Order && p.Environment == want.Environment &&
			p.Preparation == want.Preparation && p.Attempt == want.Attempt {
			// Signed before (by this process before a restart, or another replica).
			kmetrics.FailureFound(want.Environment, want.Namespace, want.Order, p.Time)
			r.failures.add(key)
			return nil
		}
	}
	signer, err := r.Keys.Ensure(ctx)
	if err != nil {
		return fmt.Errorf("roll-out failure of Preparation %s: %w", d.prep.Name, err)
	}
	digest, added, err := r.Records.Fail(ctx, repository, d.prep.Spec.Artifact.Digest, signer, want)
	if err != nil {
		r.Recorder.Eventf(s, d.prep, corev1.EventTypeWarning, "FailureRecordFailed", "RecordFailure",
			"The failure of the roll-out of Preparation %s could not be attached to %s: %s", d.prep.Name, repository, text.Truncate(err.Error(), 512))
		return fmt.Errorf("attach the roll-out failure of Preparation %s: %w", d.prep.Name, err)
	}
	r.failures.add(key)
	if !added {
		kmetrics.FailureFound(want.Environment, want.Namespace, want.Order, want.Time)
		return nil
	}
	kmetrics.ChangeFailed(want.Environment, want.Namespace, want.Order, string(dora.OutcomeKind(want.Outcome)), want.Time)
	r.Recorder.Eventf(s, d.prep, corev1.EventTypeNormal, "FailureRecorded", "RecordFailure",
		"Signed roll-out failure %s of Preparation %s in Environment %s: %s (attempt %d)", digest, d.prep.Name, d.environment, want.Outcome, want.Attempt)
	return nil
}
