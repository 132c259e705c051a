package serving

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
	"github.com/kokumi-dev/kokumi/internal/sourcesig/sigtest"
	"github.com/kokumi-dev/kokumi/internal/stages"
)

// This file plays an Environment's guard (spec.guard): a check that fails after the release
// was Deployed revokes its record, holds the stages after it, and halts or rolls back.

// setGuard gives the Environment edge the verification check and a guard that runs it again
// every second for an hour, doing onFailure when it fails.
func (f *fixture) setGuard(check v1.Verification, onFailure v1.RolloutFailureAction) {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e v1.Environment
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e); err != nil {
			return err
		}
		e.Spec.Verify = []v1.Verification{check}
		e.Spec.Guard = &v1.GuardPolicy{Verifications: []string{check.Name}, Interval: &metav1.Duration{Duration: time.Second},
			Duration: metav1.Duration{Duration: time.Hour}, OnFailure: onFailure}
		return env.Client.Update(f.ctx, &e)
	}))
}

// stageAfterEdge makes the Environment prod of the namespace, which requires edge.
func (f *fixture) stageAfterEdge() *stages.Pipeline {
	f.t.Helper()
	prod := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: f.ns}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "none"}}, Project: f.project,
		Requires: []v1.StageRequirement{{Environment: "edge"}},
	}}
	must(f.t, env.Client.Create(f.ctx, prod))
	return stages.NewPipeline(env.Client, env.Client, cfg)
}

// promotion waits until the pipeline's verdict on prep for prod is allowed, or held with want.
func (f *fixture) promotion(p *stages.Pipeline, prep *v1.Preparation, allowed bool, want ...string) string {
	f.t.Helper()
	msg := ""
	f.eventually(fmt.Sprintf("prod allowed %v with %q", allowed, want), func() error {
		v, err := p.Check(f.ctx, f.ns, "prod", prep)
		if err != nil {
			return err
		}
		msg = v.Message
		if v.Allowed != allowed {
			return fmt.Errorf("allowed %v: %s", v.Allowed, v.Message)
		}
		for _, w := range want {
			if !strings.Contains(v.Message, w) {
				return fmt.Errorf("%q lacks %q", v.Message, w)
			}
		}
		return nil
	})
	return msg
}

// revoked waits for the Preparation's status to list a revocation of Environment edge, and
// returns it.
func (f *fixture) revoked(prep string) v1.Revocation {
	f.t.Helper()
	var out v1.Revocation
	f.eventually("a revocation of "+prep, func() error {
		var p v1.Preparation
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: prep}, &p); err != nil {
			return err
		}
		if len(p.Status.Revocations) != 1 || p.Status.Revocations[0].Environment != "edge" {
			return fmt.Errorf("revocations %+v", p.Status.Revocations)
		}
		out = p.Status.Revocations[0]
		return nil
	})
	return out
}

// guardedFixture is a fixture whose Environment edge has one cluster and a guard of an error
// rate the returned value sets (low at first), doing onFailure when it fails.
func guardedFixture(t *testing.T, onFailure v1.RolloutFailureAction, cluster string) (*fixture, *atomic.Value) {
	f := newFixture(t)
	rate := &atomic.Value{}
	rate.Store("0.002")
	srv := prometheus(t, rate)
	f.setGuard(guardCheck(srv.URL), onFailure)
	f.cluster(cluster, true)
	return f, rate
}

// guardCheck is an http verification of the error rate that passes at once and fails at the
// first run that fails.
func guardCheck(url string) v1.Verification {
	check := errorRateBelow1Percent(url)
	check.Count, check.FailureLimit = 1, 1
	return check
}

func TestAGuardThatFailsAfterDeployedRevokesTheRecordAndHoldsTheNextStage(t *testing.T) {
	f, rate := guardedFixture(t, v1.RolloutHalt, "gd-a")
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.healthy(one.Spec.Artifact.Digest, "gd-a")
	f.ready(v1.ReasonDeployed, "Deployed Preparation podinfo-edge-1")

	// Deployed and verified: the guard watches over the verified record; prod may promote.
	var guarded string
	f.eventually("the guard runs", func() error {
		r := f.serving().Status.Rollout
		if r == nil || r.Guard == nil || r.Guard.Phase != v1.GuardRunning || r.Guard.Record == "" || len(r.Guard.Verifications) != 1 || r.Guard.Verifications[0].Passes < 2 {
			return fmt.Errorf("status.rollout %+v", r)
		}
		guarded = r.Guard.Record
		return nil
	})
	var prep v1.Preparation
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(one), &prep))
	if recs := prep.Status.DeploymentRecords; len(recs) == 0 || recs[0].Digest != guarded || !recs[0].Verified {
		t.Errorf("the guard watches %s, the records are %+v", guarded, recs)
	}
	pipeline := f.stageAfterEdge()
	f.promotion(pipeline, one, true)

	// The error rate rises: the guard fails, Kokumi revokes the record, the Serving halts and
	// leaves the cluster as it is, and prod refuses the release, naming the revocation.
	rate.Store("0.5")
	s := f.ready(v1.ReasonRolloutHalted, "the guard of the Environment failed after Preparation podinfo-edge-1 was Deployed: verification error-rate")
	rev := f.revoked(one.Name)
	if rev.Record != guarded || rev.Verification != "error-rate" || !strings.HasPrefix(rev.Digest, "sha256:") || !strings.Contains(rev.Message, "successCondition does not hold") {
		t.Errorf("revocation %+v", rev)
	}
	f.eventually("status.rollout.guard names the revocation", func() error {
		if g := f.serving().Status.Rollout.Guard; g.Phase != v1.GuardFailed || g.Revocation != rev.Digest {
			return fmt.Errorf("guard %+v", g)
		}
		return nil
	})
	if s.Status.Rollout.State != v1.RolloutHalted || s.Status.Rollout.RollbackTo != "" {
		t.Errorf("status.rollout %+v", s.Status.Rollout)
	}
	f.stillTargets(one.Spec.Artifact.Digest, "gd-a")
	msg := f.promotion(pipeline, one, false, "edge revoked this release", rev.Digest, "verification error-rate", "of record "+guarded)

	// The revocation is attached beside the record, signed with the record key, verified false.
	repository, _, _ := strings.Cut(oci.TrimScheme(one.Spec.Artifact.Ref), "@")
	keys, err := (&record.Keys{Client: env.Client, Namespace: cfg.Namespace}).Trusted(f.ctx)
	must(t, err)
	attested, err := (&record.Store{Client: &oci.Client{}}).Attestations(f.ctx, repository, one.Spec.Artifact.Digest, keys)
	must(t, err)
	if len(attested.Revocations) != 1 || !attested.Revocations[0].Verified || attested.Revocations[0].Digest != rev.Digest {
		t.Fatalf("revocations attached %+v", attested.Revocations)
	}
	if p := attested.Revocations[0].Predicate; p.Revokes != guarded || p.Verified || p.Order != "podinfo-edge" || p.Namespace != f.ns ||
		p.Environment != "edge" || p.Check.Name != "error-rate" || p.Check.Kind != "http" || p.Check.Failures != 1 || p.Time.IsZero() {
		t.Errorf("revocation says %+v", p)
	}

	// Stock cosign v2 and v3 verify it, run as docs/deployment-records.md says, with the
	// published public key.
	var cm corev1.ConfigMap
	must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: record.ConfigMapName}, &cm))
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "kokumi.pub"), []byte(cm.Data[record.CurrentKeyEntry]), 0o600))
	for _, cosign := range sigtest.Cosigns {
		out, err := sigtest.Run(t, cosign, dir, "verify-attestation", "--key", "kokumi.pub", "--insecure-ignore-tlog",
			"--type", record.RevocationPredicateType, "--allow-http-registry", repository+"@"+one.Spec.Artifact.Digest)
		st := strings.Join(recordtest.CosignStatements(out), "\n")
		if err != nil || !strings.Contains(st, `"predicateType":"https://kokumi.dev/revocation/v1"`) || !strings.Contains(st, `"revokes":"`+guarded+`"`) ||
			!strings.Contains(st, `"verified":false`) {
			t.Errorf("%s verify-attestation of the revocation (%v): %s\n%s", cosign, err, st, out)
		}
	}

	// A tenant with edit in the namespace cannot clear it: they may not write the Preparation's
	// status; they pause and resume the roll-out and, with write access to the registry, remove the
	// revocation there. prod still refuses, naming the revocation Kokumi listed.
	tenant, mallory := f.tenant("mallory-" + f.ns)
	var p v1.Preparation
	must(t, tenant.Get(f.ctx, client.ObjectKeyFromObject(one), &p))
	p.Status.Revocations = nil
	if err := tenant.Status().Update(f.ctx, &p); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant wrote the Preparation's status: %v", err)
	}
	if err := tenant.Delete(f.ctx, &p); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant deleted the Preparation: %v", err)
	}
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = true, mallory }))
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = false, mallory }))
	recordtest.Drop(t, repository, one.Spec.Artifact.Digest, record.RevocationPredicateType)
	if attested, err := (&record.Store{Client: &oci.Client{}}).Attestations(f.ctx, repository, one.Spec.Artifact.Digest, keys); err != nil || len(attested.Revocations) != 0 {
		t.Fatalf("the revocation is still in the registry: %+v %v", attested.Revocations, err)
	}
	if again := f.promotion(pipeline, one, false, "edge revoked this release", rev.Digest); again != msg {
		t.Errorf("prod's refusal changed from %q to %q", msg, again)
	}
	if got := f.revoked(one.Name); got != rev {
		t.Errorf("the revocation listed changed to %+v", got)
	}
}

func TestAGuardThatFailsRollsBackToTheLastRecordNotRevoked(t *testing.T) {
	f, rate := guardedFixture(t, v1.RolloutRollback, "gr-a")
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	time.Sleep(time.Second) // older by its creation time, which counts in seconds
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", one.Name)
	f.healthy(one.Spec.Artifact.Digest, "gr-a")
	f.ready(v1.ReasonDeployed, "Deployed Preparation podinfo-edge-1")
	// Its record of the whole Environment, verified. Under API faults a record may first be
	// signed before the verifications' results are read back, and then again once they pass
	// (needsRecord): what counts for the rollback is the verified one.
	f.eventually("a verified record of podinfo-edge-1", func() error {
		var p v1.Preparation
		must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(one), &p))
		for _, r := range p.Status.DeploymentRecords {
			if r.Wave == "" && r.Verified {
				return nil
			}
		}
		return fmt.Errorf("records %+v", p.Status.DeploymentRecords)
	})

	// The second release is Deployed, recorded, guarded; then the error rate rises.
	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "gr-a")
	f.healthy(two.Spec.Artifact.Digest, "gr-a")
	f.ready(v1.ReasonDeployed, "Deployed Preparation podinfo-edge-2")
	f.eventually("the guard of the second release runs", func() error {
		if r := f.serving().Status.Rollout; r == nil || r.Preparation != two.Name || r.Guard == nil || r.Guard.Phase != v1.GuardRunning {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})
	rate.Store("0.5")
	f.ready(v1.ReasonRolledBack, "every cluster goes back to Preparation podinfo-edge-1, the last with a deployment record in the Environment that is not revoked")
	f.targets(one.Spec.Artifact.Digest, "gr-a")
	rev := f.revoked(two.Name)
	if rev.Verification != "error-rate" || rev.Digest == "" {
		t.Errorf("revocation %+v", rev)
	}
	if r := f.serving().Status.Rollout; r.State != v1.RolloutRolledBack || r.RollbackTo != one.Name || r.Guard.Revocation != rev.Digest {
		t.Errorf("status.rollout %+v", r)
	}
}

func TestAGuardNamingAVerificationTheEnvironmentLacksIsRefused(t *testing.T) {
	f := newFixture(t)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e v1.Environment
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e); err != nil {
			return err
		}
		e.Spec.Guard = &v1.GuardPolicy{Verifications: []string{"error-rate"}, Duration: metav1.Duration{Duration: time.Hour}}
		return env.Client.Update(f.ctx, &e)
	})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.guard.verifications names only verifications of spec.verify") {
		t.Fatalf("a guard of an unknown verification: %v", err)
	}
}
