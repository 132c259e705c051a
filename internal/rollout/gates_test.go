package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// gatedPolicy is policy() with an approval before the rest wave and a smoke check of the canary.
func gatedPolicy() *v1.RolloutPolicy {
	p := policy(v1.RolloutHalt, 0)
	p.Waves[0].Soak = nil
	p.Waves[0].Verify = []v1.Verification{{Name: "smoke", HTTP: &v1.HTTPVerification{URL: "http://x", SuccessCondition: "true"}}}
	p.Waves[1].Approval = &v1.ApprovalPolicy{Required: 1, SeparateFromPromoter: true}
	return p
}

func TestAWaveThatAsksForApprovalStartsOnlyOnceSomeoneElseApproved(t *testing.T) {
	p := gatedPolicy()
	p.Waves[0].Approval = &v1.ApprovalPolicy{Required: 1, SeparateFromPromoter: true}
	members := []Member{{Name: "c1", Wave: 0, Standing: Untouched, HasApplication: true}, {Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true}}
	in := Input{Policy: p, Preparation: "p-2", From: "p-1", Now: time.Now(), Members: members,
		Gates: Gates{PromotedBy: "alice", Serving: "web", Approvals: []v1.Approval{{Preparation: "p-2", Wave: "canary", By: "alice"}, {Preparation: "p-1", Wave: "canary", By: "bob"}}}}
	waiting := Decide(in)
	if st := waiting.Status; st.Wave != "" || st.Awaiting != "canary" ||
		!strings.Contains(st.Message, "wave canary awaits approval (0 of 1): kubectl kokumi approve web --wave canary") ||
		!strings.Contains(st.Message, "the approval of alice, who promoted Preparation p-2, does not count") {
		t.Fatalf("the promoter's approval, or another Preparation's, started the roll-out: %+v", st)
	}
	if !strings.Contains(waiting.Waiting["c1"], "awaits approval") {
		t.Errorf("c1 is changed before the approval: %v", waiting.Waiting)
	}
	// Who may approve is said once, in the roll-out's message; each cluster it holds says only
	// that it waits, not the command again.
	if strings.Count(waiting.Status.Message, "kokumi-approver") != 1 || !strings.Contains(waiting.Status.Message, "or Approve on the Serving's page, "+WhoApproves) {
		t.Errorf("the roll-out's message does not say once who may approve: %q", waiting.Status.Message)
	}
	for name, why := range waiting.Waiting {
		if strings.Contains(why, "kubectl kokumi approve") || strings.Contains(why, "kokumi-approver") {
			t.Errorf("cluster %s repeats how to approve: %q", name, why)
		}
	}
	if ts := Transitions(nil, &waiting.Status, ""); len(ts) != 1 || ts[0].Reason != "AwaitingApproval" {
		t.Errorf("transitions %+v", ts)
	}

	in.Gates.Approvals = append(in.Gates.Approvals, v1.Approval{Preparation: "p-2", Wave: "canary", By: "bob"})
	in.Previous = &waiting.Status
	started := Decide(in)
	if st := started.Status; st.Wave != "canary" || st.Awaiting != "" {
		t.Fatalf("bob's approval did not start the canary: %+v", st)
	}
	if _, waits := started.Waiting["c1"]; waits {
		t.Errorf("c1 still waits: %v", started.Waiting)
	}
	if ts := Transitions(&waiting.Status, &started.Status, ""); len(ts) != 2 || ts[0].Reason != "Approved" || ts[0].Message != "bob approved wave canary of Preparation p-2" || ts[1].Reason != "WaveStarted" {
		t.Errorf("transitions %+v", ts)
	}
}

func TestTheNextWaveStartsOnlyOnceTheVerificationsPassedAndItIsApproved(t *testing.T) {
	members := []Member{{Name: "c1", Wave: 0, Standing: Healthy, HasApplication: true}, {Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true}}
	in := Input{Policy: gatedPolicy(), Preparation: "p-2", From: "p-1", Now: time.Now(), Members: members, Gates: Gates{PromotedBy: "alice", Serving: "web"},
		Previous: &v1.RolloutStatus{Preparation: "p-2", State: v1.RolloutProgressing, Wave: "canary"}}
	verifying := Decide(in)
	if verifying.Verify == nil || verifying.Verify.Wave != "canary" || len(verifying.Verify.Specs) != 1 || verifying.Verify.Clusters[0] != "c1" {
		t.Fatalf("the canary's verification does not run: %+v", verifying.Verify)
	}
	if st := verifying.Status; st.Wave != "canary" || !strings.Contains(st.Message, "wave canary is being verified: smoke 0 of") {
		t.Fatalf("status %+v", st)
	}
	if !strings.Contains(verifying.Waiting["r1"], "is being verified") {
		t.Errorf("r1: %v", verifying.Waiting)
	}

	done := metav1.Now()
	in.Previous = verifying.Status.DeepCopy()
	in.Previous.Verifications = []v1.VerificationResult{{Name: "smoke", Wave: "canary", Kind: "http", Phase: v1.VerificationPassed, Passes: 1, Finished: &done}}
	approval := Decide(in)
	if st := approval.Status; st.Wave != "canary" || st.Awaiting != "rest" || approval.Verify != nil {
		t.Fatalf("verified, the rest wave awaits its approval: %+v (verify %+v)", st, approval.Verify)
	}
	if len(approval.Passed) != 0 {
		t.Errorf("a wave not gone past is recorded: %+v", approval.Passed)
	}

	in.Previous = approval.Status.DeepCopy()
	in.Gates.Approvals = []v1.Approval{{Preparation: "p-2", Wave: "rest", By: "carol"}}
	on := Decide(in)
	if st := on.Status; st.Wave != "rest" || st.Awaiting != "" {
		t.Fatalf("approved, the rest wave starts: %+v", st)
	}
	if len(on.Passed) != 1 || on.Passed[0].Name != "canary" {
		t.Fatalf("passed %+v", on.Passed)
	}
	if ev := on.Passed[0].Evidence; !ev.Verified || len(ev.Verifications) != 1 || ev.Verifications[0].Name != "smoke" {
		t.Errorf("the canary's record says %+v", ev)
	}
	if ev := on.Evidence; ev.Verified || len(ev.Approvals) != 1 || ev.Approvals[0].By != "carol" {
		t.Errorf("the Environment's record, not complete, says %+v", ev)
	}
}

func TestAFailedVerificationHaltsTheRollout(t *testing.T) {
	members := []Member{{Name: "c1", Wave: 0, Standing: Healthy, HasApplication: true}, {Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true}}
	previous := &v1.RolloutStatus{Preparation: "p-2", State: v1.RolloutProgressing, Wave: "canary",
		Verifications: []v1.VerificationResult{{Name: "smoke", Wave: "canary", Kind: "http", Phase: v1.VerificationFailed, Failures: 1, Message: "503 Service Unavailable"}}}
	plan := Decide(Input{Policy: gatedPolicy(), Preparation: "p-2", From: "p-1", Now: time.Now(), Members: members, Previous: previous})
	st := plan.Status
	if st.State != v1.RolloutHalted || !strings.Contains(st.Message, "verification smoke of wave canary") || plan.Ready == nil {
		t.Fatalf("a failed verification did not halt: %+v", st)
	}
	if !strings.Contains(plan.Waiting["r1"], "halted") {
		t.Errorf("r1 is changed after the halt: %v", plan.Waiting)
	}
	was := previous.DeepCopy()
	was.Verifications[0].Phase = v1.VerificationRunning
	if ts := Transitions(was, &st, ""); len(ts) != 2 || ts[0].Reason != "VerificationFailed" || ts[0].Output != "503 Service Unavailable" ||
		strings.Contains(ts[0].Message, "503") || ts[1].Reason != v1.ReasonRolloutHalted {
		t.Errorf("transitions %+v", ts)
	}
	// What the check printed is the tenant's: it goes in Output, cleaned, never in the message.
	st.Verifications[0].Message = "<!channel> rollout approved, [sign off](https://evil.example/)\x1b[2J"
	if ts := Transitions(was, &st, ""); len(ts) != 2 || ts[0].Output != "channel rollout approved, sign off (https://evil.example/) 2J" ||
		ts[0].Message != "verification smoke of wave canary failed for Preparation p-2" {
		t.Errorf("transitions %+v", ts)
	}
}

func TestTheEnvironmentsOwnVerificationHoldsItsCompletionWithoutAPolicy(t *testing.T) {
	gates := Gates{Verify: []v1.Verification{{Name: "smoke", HTTP: &v1.HTTPVerification{URL: "http://x", SuccessCondition: "true"}}}}
	p := Effective(nil, nil, nil, "p-2", gates.Gated())
	if p == nil || !implicit(p) {
		t.Fatalf("an Environment with a verification of its own rolls out without a plan: %+v", p)
	}
	members := []Member{{Name: "c1", Standing: Healthy, HasApplication: true}, {Name: "c2", Standing: Healthy, HasApplication: true}}
	in := Input{Policy: p, Preparation: "p-2", Now: time.Now(), Members: members, Gates: gates}
	verifying := Decide(in)
	if verifying.Status.State == v1.RolloutComplete || verifying.Verify == nil || verifying.Verify.Wave != "" || len(verifying.Verify.Clusters) != 2 {
		t.Fatalf("complete before its verification: %+v %+v", verifying.Status, verifying.Verify)
	}
	if verifying.Evidence.Verified {
		t.Error("the record says verified before the verification passed")
	}
	in.Previous = verifying.Status.DeepCopy()
	in.Previous.Verifications = []v1.VerificationResult{{Name: "smoke", Kind: "http", Phase: v1.VerificationPassed}}
	done := Decide(in)
	if done.Status.State != v1.RolloutComplete || !done.Evidence.Verified || len(done.Evidence.Verifications) != 1 {
		t.Fatalf("complete and verified: %+v %+v", done.Status, done.Evidence)
	}

	in.Previous.Verifications[0].Phase = v1.VerificationFailed
	halted := Decide(in)
	if halted.Status.State != v1.RolloutHalted || strings.Contains(halted.Status.Message, "budget") {
		t.Fatalf("without a policy a failed verification halts, and no budget is spoken of: %+v", halted.Status)
	}
}

func TestAComparingCheckOfTheCanaryIsToldTheBaseline(t *testing.T) {
	members := []Member{{Name: "c1", Wave: 0, Standing: Healthy, HasApplication: true}, {Name: "c2", Wave: 0, Standing: Healthy, HasApplication: true},
		{Name: "r1", Wave: 1, Standing: Untouched, HasApplication: true}, {Name: "r2", Wave: 1, Standing: Held, HasApplication: true},
		{Name: "r3", Wave: 1, Standing: Untouched}}
	policy := gatedPolicy()
	policy.Waves[0].Verify = []v1.Verification{{Name: "errors", PerCluster: true, Compare: "true", HTTP: &v1.HTTPVerification{URL: "http://p/?c=${cluster}", SuccessCondition: "true"}}}
	plan := Decide(Input{Policy: policy, Preparation: "p-2", From: "p-1", Now: time.Now(), Members: members})
	step := plan.Verify
	if step == nil || strings.Join(step.Clusters, ",") != "c1,c2" || strings.Join(step.Baseline, ",") != "r1" {
		t.Fatalf("verify step %+v", step)
	}
	// Without compare, no baseline is asked.
	policy.Waves[0].Verify[0].Compare = ""
	if plan = Decide(Input{Policy: policy, Preparation: "p-2", From: "p-1", Now: time.Now(), Members: members}); plan.Verify == nil || plan.Verify.Baseline != nil {
		t.Fatalf("verify step %+v", plan.Verify)
	}
}
