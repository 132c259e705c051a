package serving

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/preparation"
	"github.com/kokumi-dev/kokumi/internal/verify"
)

// This file plays a tenant with edit in its namespace and a valid token against each gate of a
// roll-out: none of them may be forged by the tenant it gates.

// bind binds the person name to the ClusterRole role in the fixture's namespace as well.
func (f *fixture) bind(name, role string) {
	f.t.Helper()
	must(f.t, env.Client.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role, Namespace: f.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}}))
}

// gateJob waits for the one Job of verification name of the fixture's Serving, in Kokumi's
// namespace.
func (f *fixture) gateJob(name string) batchv1.Job {
	f.t.Helper()
	var job batchv1.Job
	f.eventually("the "+name+" Job", func() error {
		var jobs batchv1.JobList
		must(f.t, env.Client.List(f.ctx, &jobs, client.MatchingLabels{verify.LabelVerification: name, verify.LabelServingNamespace: f.ns}))
		if len(jobs.Items) != 1 {
			return fmt.Errorf("%d Jobs", len(jobs.Items))
		}
		job = jobs.Items[0]
		return nil
	})
	return job
}

// succeedJob plays the Job controller: the Job completes.
func (f *fixture) succeedJob(job *batchv1.Job) {
	f.t.Helper()
	f.jobStatus(job, func(j *batchv1.Job, now metav1.Time) {
		j.Status.CompletionTime, j.Status.Succeeded = &now, 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
		}
	})
}

func TestATenantCannotDecideItsJobGate(t *testing.T) {
	f := newFixture(t)
	_, rest, _ := f.gatedCanary("fj", v1.Verification{Name: "smoke", Job: &v1.JobVerification{Image: "registry.example/smoke:1"}})
	tenant, _ := f.tenant("mallory-" + f.ns)

	// The gate's Job runs in Kokumi's namespace, never the tenant's, and its run records its UID.
	job := f.gateJob("smoke")
	if job.Namespace != cfg.Namespace || len(job.OwnerReferences) != 0 {
		t.Fatalf("the gate's Job is %s/%s, owned by %+v", job.Namespace, job.Name, job.OwnerReferences)
	}
	f.eventually("the run records its Job", func() error {
		if r := f.serving().Status.Rollout; r == nil || len(r.Verifications) != 1 || r.Verifications[0].JobUID != string(job.UID) {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})

	// The tenant makes the Job of the next runs in its own namespace, passing: nobody reads it.
	for run := 1; run <= 2; run++ {
		forged := job.DeepCopy()
		forged.ObjectMeta = metav1.ObjectMeta{Name: strings.TrimSuffix(job.Name, "-1") + fmt.Sprint("-", run), Namespace: f.ns, Labels: job.Labels}
		forged.Spec.Selector, forged.Spec.Template.Labels = nil, map[string]string{"app": "forged"}
		forged.Spec.Template.Spec.Containers[0].Command = []string{"true"}
		must(t, tenant.Create(f.ctx, forged))
	}
	// Nor can it make, delete or read a Job where the gate's run.
	forged := job.DeepCopy()
	forged.ObjectMeta = metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace}
	if err := tenant.Create(f.ctx, forged); !apierrors.IsForbidden(err) && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("the tenant made a Job in %s: %v", cfg.Namespace, err)
	}
	if err := tenant.Delete(f.ctx, &job); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant deleted the gate's Job: %v", err)
	}
	if err := tenant.Get(f.ctx, client.ObjectKeyFromObject(&job), &batchv1.Job{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant read the gate's Job: %v", err)
	}
	f.waiting(rest, "wave canary is being verified: smoke 0 of 1 passes")
	f.stillTargets("", rest)

	// Whoever may write Kokumi's namespace deletes the Job mid-run and makes another of its name,
	// which succeeds: it is not the Job Kokumi created, and the run fails, saying so.
	must(t, env.Client.Delete(f.ctx, &job, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	f.eventually("the Job is gone", func() error {
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(&job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	again := job.DeepCopy()
	again.ObjectMeta = metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace, Labels: job.Labels}
	again.Spec.Selector, again.Spec.Template.Labels = nil, map[string]string{"app": "again"}
	for k, v := range job.Labels {
		again.Spec.Template.Labels[k] = v
	}
	again.Spec.ManualSelector = nil
	if err := env.Client.Create(f.ctx, again); err != nil {
		t.Fatal(err)
	}
	f.succeedJob(again)
	s := f.ready(v1.ReasonRolloutHalted, "it failed on verification smoke of wave canary")
	if v := s.Status.Rollout.Verifications; len(v) != 1 || v[0].Phase != v1.VerificationFailed || !strings.Contains(v[0].Message, "was replaced: Kokumi created it with UID "+string(job.UID)) {
		t.Fatalf("verifications %+v", v)
	}
	f.stillTargets("", rest)
}

func TestAnEditorDoesNotUndoAnotherPersonsPauseOrAbort(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(time.Hour, v1.RolloutHalt))
	f.ringCluster("fp-canary", "canary", true)
	f.ringCluster("fp-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.targets(one.Spec.Artifact.Digest, "fp-canary")
	tenant, mallory := f.tenant("mallory-" + f.ns)
	sre, carol := f.tenant("carol-" + f.ns)
	f.bind(carol, "kokumi-approver")
	dave, daveName := f.tenant("dave-" + f.ns)
	f.bind(daveName, "kokumi-approver")

	// Carol, an SRE, pauses: the tenant may neither resume it nor write its own name over hers.
	must(t, f.control(sre, func(c *v1.RolloutControl) { c.Paused, c.By = true, carol }))
	f.rolloutIs(v1.RolloutPaused, "canary")
	err := f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = false, mallory })
	refused(t, "an editor resumed carol's pause", err, false, "spec.rollout: the roll-out was paused or aborted by "+carol, "verb approve", "kokumi-approver")
	err = f.control(tenant, func(c *v1.RolloutControl) { c.Abort, c.By = one.Name, mallory })
	refused(t, "an editor wrote over carol's pause", err, false, "paused or aborted by "+carol)

	// Dave, an approver too, may resume it; the Event names both.
	must(t, f.control(dave, func(c *v1.RolloutControl) { c.Paused, c.By = false, daveName }))
	f.rolloutIs(v1.RolloutProgressing, "canary")
	f.controlEvent("RolloutResumed", daveName+" resumed the roll-out of Preparation podinfo-edge-1, which "+carol+" paused")

	// Carol aborts: the tenant does not clear it.
	must(t, f.control(sre, func(c *v1.RolloutControl) { c.Abort, c.By = one.Name, carol }))
	f.ready(v1.ReasonRolloutAborted, carol+" aborted the roll-out")
	err = f.control(tenant, func(c *v1.RolloutControl) { c.Abort, c.By = "", mallory })
	refused(t, "an editor cleared carol's abort", err, false, "paused or aborted by "+carol)
	if r := f.serving().Spec.Rollout; r.Abort != one.Name || r.By != carol {
		t.Fatalf("spec.rollout %+v", r)
	}
	// Their own pause and abort, they undo as before.
	must(t, f.control(sre, func(c *v1.RolloutControl) { c.Abort, c.By = "", carol }))
	f.rolloutIs(v1.RolloutProgressing, "canary")
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = true, mallory }))
	f.rolloutIs(v1.RolloutPaused, "canary")
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = false, mallory }))
	f.rolloutIs(v1.RolloutProgressing, "canary")
}

func TestApprovalsCountForTheAttemptTheyWereGivenIn(t *testing.T) {
	f := newFixture(t)
	p := canaryThenRest(0, v1.RolloutHalt)
	p.Waves[1].Approval = &v1.ApprovalPolicy{Required: 1}
	f.setRollout(p)
	f.ringCluster("fa-canary", "canary", true)
	f.ringCluster("fa-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.targets(one.Spec.Artifact.Digest, "fa-canary")
	f.healthy(one.Spec.Artifact.Digest, "fa-canary")
	f.waiting("fa-a", "wave rest awaits approval (0 of 1)")
	approver, carol := f.person("carol-"+f.ns, "kokumi-approver")
	tenant, mallory := f.tenant("mallory-" + f.ns)
	f.bind(carol, "edit")

	// An approval names the attempt under way: another (a guess at the next) is refused.
	first := f.serving().Status.Rollout.Attempt
	if first == 0 {
		t.Fatalf("no attempt: %+v", f.serving().Status.Rollout)
	}
	err := f.write(approver, func(s *v1.ServingSpec) {
		s.Approvals = append(s.Approvals, v1.Approval{Preparation: one.Name, Wave: "rest", By: carol, Attempt: first + 100})
	})
	refused(t, "an approval of another attempt", err, true, "spec.approvals: an approval names the roll-out attempt under way: set attempt to "+fmt.Sprint(first))

	// Carol aborts the release; the tenant cannot clear it. She clears it herself: it starts
	// again as another attempt, and her approval of the last one does not count for it.
	must(t, f.write(approver, func(s *v1.ServingSpec) {
		s.Approvals = append(s.Approvals, v1.Approval{Preparation: one.Name, Wave: "rest", By: carol, Attempt: first})
	}))
	f.targets(one.Spec.Artifact.Digest, "fa-a")
	must(t, f.control(approver, func(c *v1.RolloutControl) { c.Abort, c.By = one.Name, carol }))
	f.ready(v1.ReasonRolloutAborted, carol+" aborted")
	refused(t, "the tenant cleared carol's abort", f.control(tenant, func(c *v1.RolloutControl) { c.Abort, c.By = "", mallory }), false, "paused or aborted by "+carol)
	must(t, f.control(approver, func(c *v1.RolloutControl) { c.Abort, c.By = "", carol }))
	f.eventually("a new attempt, the old approval pruned", func() error {
		s := f.serving()
		if r := s.Status.Rollout; r == nil || r.State != v1.RolloutProgressing || r.Attempt <= first || len(s.Spec.Approvals) != 0 || len(r.Approvals) != 0 {
			return fmt.Errorf("status.rollout %+v, approvals %+v", r, s.Spec.Approvals)
		}
		return nil
	})
	f.controlEvent("RolloutResumed", carol+" cleared the abort of the roll-out of Preparation podinfo-edge-1")
	if r := f.serving().Status.Rollout; r.Awaiting != "" && r.Awaiting != "rest" {
		t.Fatalf("status.rollout %+v", r)
	}
}

func TestSeparationFromThePromoterIsNotBypassedByRenamingThePromoter(t *testing.T) {
	f := newFixture(t)
	p := canaryThenRest(0, v1.RolloutHalt)
	p.Waves[1].Approval = &v1.ApprovalPolicy{Required: 1, SeparateFromPromoter: true}
	f.setRollout(p)
	f.ringCluster("fs-canary", "canary", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	alice, aliceName := f.tenant("alice-" + f.ns)
	f.bind(aliceName, "kokumi-approver")
	f.order("edge", "")
	must(t, f.write(alice, func(s *v1.ServingSpec) { s.PreparationName, s.PromotedBy = one.Name, aliceName }))

	// edit lets alice impersonate the namespace's ServiceAccounts: as one, she renames the
	// promoter of what rolls out, to approve it herself. Refused: the promoter changes only
	// with a promotion.
	must(t, env.Client.Create(f.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.ns}}))
	must(t, env.Client.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "deployer-edit", Namespace: f.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "deployer", Namespace: f.ns}}}))
	cfg, err := env.AddUser(aliceName)
	must(t, err)
	cfg = rest.CopyConfig(cfg)
	sa := "system:serviceaccount:" + f.ns + ":deployer"
	cfg.Impersonate = rest.ImpersonationConfig{UserName: sa}
	as, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	must(t, err)
	err = f.write(as, func(s *v1.ServingSpec) { s.PromotedBy = sa })
	refused(t, "a promoter renamed through an impersonated ServiceAccount", err, false, "spec.promotedBy: the promoter of Preparation podinfo-edge-1 is "+aliceName,
		"changes only with spec.preparationName")
	if s := f.serving(); s.Spec.PromotedBy != aliceName {
		t.Fatalf("promotedBy %q", s.Spec.PromotedBy)
	}
}

func TestAHaltedRolloutStaysHaltedAcrossAStop(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(0, v1.RolloutHalt))
	f.ringCluster("fh-canary", "canary", true)
	f.ringCluster("fh-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.targets(one.Spec.Artifact.Digest, "fh-canary")
	f.playArgoCD("fh-canary", "Synced", "Degraded", one.Spec.Artifact.Digest)
	halted := f.ready(v1.ReasonRolloutHalted, "halted in wave canary")

	// An admin relabels the fleet: for a while the Environment selects no Cluster (a Stop: the
	// Applications go, what runs keeps running), then the same Clusters again.
	setSelector := func(tier string) {
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var e v1.Environment
			if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e); err != nil {
				return err
			}
			e.Spec.ClusterSelector.MatchLabels["tier"] = tier
			return env.Client.Update(f.ctx, &e)
		}))
	}
	setSelector("nowhere")
	s := f.ready(v1.ReasonNoClusters, "")
	if r := s.Status.Rollout; r == nil || r.State != v1.RolloutHalted || r.Attempt != halted.Status.Rollout.Attempt {
		t.Fatalf("across the Stop status.rollout is %+v", r)
	}
	if len(s.Status.Running) == 0 {
		t.Errorf("status.running was cleared while the clusters still run the release")
	}
	setSelector(f.tier)

	// The halted release does not roll out again: no cluster gets it.
	f.ready(v1.ReasonRolloutHalted, "halted in wave canary")
	f.stillTargets("", "fh-canary", "fh-a")
	if r := f.serving().Status.Rollout; r.State != v1.RolloutHalted || r.Attempt != halted.Status.Rollout.Attempt {
		t.Fatalf("after the Stop status.rollout is %+v", r)
	}
}

func TestARollbackGoesPastATargetWhoseRecordDoesNotVerify(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(0, v1.RolloutRollback))
	f.ringCluster("fr-canary", "canary", true)
	f.ringCluster("fr-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.deployAll(one, []string{"fr-canary"}, []string{"fr-a"})
	f.records(one.Name, 1)

	// A newer Preparation that never ran, whose status lists a record anyway (status is what a
	// rollback read; nothing is attached to its artifact).
	time.Sleep(time.Second)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	two.Status.DeploymentRecords = []v1.DeploymentRecord{{Environment: "edge", Clusters: 2, Time: metav1.Now(), Digest: digestOf("forged")}}
	must(t, env.Client.Status().Update(f.ctx, two))

	time.Sleep(time.Second)
	three := f.preparation("podinfo-edge-3", "podinfo", false)
	f.promote(three.Name)
	f.targets(three.Spec.Artifact.Digest, "fr-canary")
	f.playArgoCD("fr-canary", "Synced", "Degraded", three.Spec.Artifact.Digest)
	s := f.ready(v1.ReasonRolledBack, "goes back to Preparation podinfo-edge-1")
	if r := s.Status.Rollout; r.RollbackTo != one.Name || !strings.Contains(r.Message, "passed over podinfo-edge-2 (no record of Environment edge is attached to its artifact)") {
		t.Fatalf("status.rollout %+v", r)
	}
	f.targets(one.Spec.Artifact.Digest, "fr-canary")
}

func TestSeparationRefusesWhoWroteTheSpecOfAnAutomaticPromotion(t *testing.T) {
	f := newFixture(t)
	p := canaryThenRest(0, v1.RolloutHalt)
	p.Waves[1].Approval = &v1.ApprovalPolicy{Required: 1, SeparateFromPromoter: true}
	f.setRollout(p)
	f.ringCluster("fw-canary", "canary", true)
	f.ringCluster("fw-a", "", true)
	f.order("edge", "")
	alice, aliceName := f.tenant("alice-" + f.ns)
	f.bind(aliceName, "kokumi-approver")

	// Alice changes the Order's spec: the API server stamps her name on it, and nobody writes
	// another's name there.
	var order v1.Order
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		must(t, alice.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "podinfo-edge"}, &order))
		order.Spec.TargetNamespace = "podinfo"
		return alice.Update(f.ctx, &order)
	}))
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(&order), &order))
	if w := order.Annotations[preparation.AnnotationSpecWrittenBy]; w != aliceName {
		t.Fatalf("the Order's writer is %q, want %s", w, aliceName)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		must(t, alice.Get(f.ctx, client.ObjectKeyFromObject(&order), &order))
		order.Annotations[preparation.AnnotationSpecWrittenBy] = "bob"
		return alice.Update(f.ctx, &order)
	})
	refused(t, "a tenant named another as the Order's writer", err, false, "delivery.kokumi.dev/spec-written-by", "only the API server writes it")

	// The Order controller renders a Preparation naming its authors, and promotes it on its
	// own (the Serving's promoter is Kokumi, here the admin): alice's approval does not count.
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(&order), &order))
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	one.Annotations = map[string]string{preparation.AnnotationAuthors: preparation.AuthorsAnnotation(&order)}
	must(t, env.Client.Update(f.ctx, one))
	f.promote(one.Name)
	f.targets(one.Spec.Artifact.Digest, "fw-canary")
	f.healthy(one.Spec.Artifact.Digest, "fw-canary")
	must(t, f.write(alice, func(s *v1.ServingSpec) {
		s.Approvals = append(s.Approvals, v1.Approval{Preparation: one.Name, Wave: "rest", By: aliceName, Attempt: f.attempt(one.Name)})
	}))
	f.waiting("fw-a", "the approval of "+aliceName+", who wrote the spec Preparation podinfo-edge-1 was rendered from, does not count")
	if r := f.serving().Status.Rollout; len(r.Authors) != 1 || r.Authors[0] != aliceName || len(r.Approvals) != 0 {
		t.Fatalf("status.rollout %+v", r)
	}
	f.stillTargets("", "fw-a")
}

func TestApprovalsOfAPreparationPromotedAwayAndBackDoNotCount(t *testing.T) {
	f := newFixture(t)
	p := canaryThenRest(time.Hour, v1.RolloutHalt)
	p.Waves[1].Approval = &v1.ApprovalPolicy{Required: 1}
	f.setRollout(p)
	f.ringCluster("fb-canary", "canary", true)
	f.ringCluster("fb-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", one.Name)
	f.targets(one.Spec.Artifact.Digest, "fb-canary")
	f.healthy(one.Spec.Artifact.Digest, "fb-canary")
	f.soaking(one.Name)
	approver, carol := f.person("carol-"+f.ns, "kokumi-approver")

	// Carol approves the rest of P ahead of time, while the canary soaks.
	first := f.attempt(one.Name)
	must(t, f.write(approver, func(s *v1.ServingSpec) {
		s.Approvals = append(s.Approvals, v1.Approval{Preparation: one.Name, Wave: "rest", By: carol, Attempt: first})
	}))
	// Q, then P again: another attempt of P, from its first wave, which her approval of the
	// first attempt does not pass.
	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "fb-canary")
	// Q's roll-out is recorded (its status written, which a faulted write may delay) before P
	// comes back: see docs/rollouts.md on attempts.
	f.attempt(two.Name)
	f.promote(one.Name)
	f.targets(one.Spec.Artifact.Digest, "fb-canary")
	if again := f.attempt(one.Name); again <= first {
		t.Fatalf("P promoted again is attempt %d, the first was %d", again, first)
	}
	f.healthy(one.Spec.Artifact.Digest, "fb-canary")
	f.afterSoak("wave rest awaits a new approval", func() error {
		s := f.serving()
		if tg := f.target(s, "fb-a"); tg == nil || !strings.Contains(tg.Conditions[0].Message, "wave rest awaits approval (0 of 1)") {
			return fmt.Errorf("target %+v", tg)
		}
		if len(s.Spec.Approvals) != 0 {
			return fmt.Errorf("approvals of an earlier attempt are kept: %+v", s.Spec.Approvals)
		}
		return nil
	})
	f.stillTargets("", "fb-a")
}
