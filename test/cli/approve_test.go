package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// approvalPolicy applies the shipped admission policy kokumi-serving-approval and the role
// kokumi-approver, and waits until the policy is enforced in ns.
func approvalPolicy(t *testing.T, ns string) {
	t.Helper()
	for _, f := range []string{"serving_approval_policy.yaml", "kokumi_approver_role.yaml"} {
		if out, err := env.Kubectl(context.Background(), "apply", "-f", filepath.Join(env.Assets.Root, "config", "rbac", f)); err != nil {
			t.Fatalf("apply %s: %v: %s", f, err, out)
		}
	}
	env.ApprovalPolicyEnforced(t, ns)
}

// Alice (edit) promotes with the plugin, which names her in spec.promotedBy; the Environment
// asks someone else's approval and the wave canary two approvals. Alice is refused, a tenant
// without approve is told what role they lack, and two approvers approve the gate the
// roll-out waits at, as themselves, under the shipped admission policy.
func TestApproveWritesTheApproversOwnApproval(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "approve")
	approvalPolicy(t, ns)
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"}, Spec: v1.EnvironmentSpec{
		Project: "prod", Approval: &v1.ApprovalPolicy{Required: 1, SeparateFromPromoter: true},
		Rollout: &v1.RolloutPolicy{Waves: []v1.RolloutWave{
			{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}, Approval: &v1.ApprovalPolicy{Required: 2}},
			{Name: "rest"},
		}},
	}}))
	order(t, ns, "web", "prod", v1.PromotionManual)
	serving(t, ns, "web", "")
	preparation(t, ns, "web-1", prepSpec{order: "web", ready: metav1.ConditionTrue})
	alice := personIn(t, ns, "alice-approve", "edit")
	personIn(t, ns, "alice-approve", "kokumi-approver")
	bob := personIn(t, ns, "bob-approve", "kokumi-approver")
	carol := personIn(t, ns, "carol-approve", "kokumi-approver")
	erin := personIn(t, ns, "erin-approve", "edit")

	// The plugin's promotion names its writer.
	if r := kubectlKokumi(t, "promote", "web", "web-1", "--kubeconfig", alice); r.code != 0 {
		t.Fatalf("promote as alice: exit %d %q", r.code, r.stderr)
	}
	if sv := servingOf(t, ns, "web"); sv.Spec.PromotedBy != "alice-approve" {
		t.Fatalf("spec.promotedBy %q after alice promoted, want alice-approve", sv.Spec.PromotedBy)
	}
	sv := servingOf(t, ns, "web")
	sv.Status.Rollout = &v1.RolloutStatus{Preparation: "web-1", State: v1.RolloutProgressing, Awaiting: v1.EnvironmentGate}
	must(t, env.Client.Status().Update(ctx, sv))
	if r := kubectlKokumi(t, "status", "web", "--kubeconfig", alice); !strings.Contains(r.stdout, "awaiting approval of the Environment's gate (kubectl kokumi approve web -n approve)") {
		t.Errorf("status does not say the roll-out awaits approval:\n%s%s", r.stdout, r.stderr)
	}

	// Alice promoted it, and the gate asks someone else.
	r := kubectlKokumi(t, "approve", "web", "--kubeconfig", alice)
	if r.code != 1 || !strings.Contains(r.stderr, "alice-approve promoted Preparation web-1, and Environment prod asks that someone else approve the Environment's gate") {
		t.Errorf("approve as the promoter: exit %d %q", r.code, r.stderr)
	}
	// Erin may edit, not approve: the API server's policy refuses, saying which role she lacks.
	r = kubectlKokumi(t, "approve", "web", "--kubeconfig", erin)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: an admission policy refused to let you patch Serving approve/web: ") ||
		!strings.Contains(r.stderr, "erin-approve may not approve Servings in namespace approve") || !strings.Contains(r.stderr, "kokumi-approver") {
		t.Errorf("approve as a tenant with edit: exit %d %q", r.code, r.stderr)
	}
	// The wrong Preparation, or a wave that asks none, names the flag.
	r = kubectlKokumi(t, "approve", "web", "--preparation", "web-0", "--kubeconfig", bob)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: --preparation: Serving approve/web rolls out Preparation web-1, not web-0") {
		t.Errorf("approve another Preparation: exit %d %q", r.code, r.stderr)
	}
	r = kubectlKokumi(t, "approve", "web", "--wave", "rest", "--kubeconfig", bob)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: --wave: Environment prod asks for no approval of wave rest") {
		t.Errorf("approve a wave that asks none: exit %d %q", r.code, r.stderr)
	}
	if sv := servingOf(t, ns, "web"); len(sv.Spec.Approvals) != 0 {
		t.Fatalf("refused approvals were written: %+v", sv.Spec.Approvals)
	}

	// Bob approves the gate that waits, then the canary ahead of time; Carol the canary too.
	r = kubectlKokumi(t, "approve", "web", "--kubeconfig", bob)
	if r.code != 0 || r.stdout != "Approved the Environment's gate of Preparation web-1 of Serving approve/web as bob-approve: 1 of 1 approvals (bob-approve); the roll-out goes past it\n" {
		t.Errorf("approve as bob: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = kubectlKokumi(t, "approve", "web", "--wave", "canary", "--preparation", "web-1", "--kubeconfig", bob)
	if r.code != 0 || r.stdout != "Approved wave canary of Preparation web-1 of Serving approve/web as bob-approve: 1 of 2 approvals (bob-approve); it waits for 1 more\n" {
		t.Errorf("approve the canary as bob: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = kubectlKokumi(t, "approve", "web", "--wave", "canary", "--kubeconfig", bob)
	if r.code != 1 || !strings.Contains(r.stderr, "bob-approve already approved wave canary of Preparation web-1") {
		t.Errorf("approve twice: exit %d %q", r.code, r.stderr)
	}
	r = kubectlKokumi(t, "approve", "web", "--wave", "canary", "--kubeconfig", carol)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "2 of 2 approvals (bob-approve, carol-approve); the roll-out goes past it\n") {
		t.Errorf("approve the canary as carol: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	want := []v1.Approval{{Preparation: "web-1", By: "bob-approve"}, {Preparation: "web-1", Wave: "canary", By: "bob-approve"}, {Preparation: "web-1", Wave: "canary", By: "carol-approve"}}
	if got := servingOf(t, ns, "web").Spec.Approvals; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("spec.approvals %+v, want %+v", got, want)
	}
}

func TestTheHelpOfApproveExplainsWhoMayApprove(t *testing.T) {
	r := kubectlKokumi(t, "approve", "--help")
	for _, w := range []string{"kubectl kokumi approve SERVING", "--wave", "--preparation", "approval.required", "kokumi-approver",
		"separateFromPromoter", "kubectl auth whoami", "kubectl kokumi approve web -n shop --wave canary --preparation web-7c9f"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("approve --help lacks %q:\n%s", w, r.stdout)
		}
	}
}

// An approval of a roll-out that was aborted does not move it: approve says that it stays
// aborted, not that the roll-out goes past the gate.
func TestApproveOfAnAbortedRolloutSaysItStaysAborted(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "approve-aborted")
	approvalPolicy(t, ns)
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"}, Spec: v1.EnvironmentSpec{
		Project: "prod", Approval: &v1.ApprovalPolicy{Required: 1},
	}}))
	order(t, ns, "web", "prod", v1.PromotionManual)
	preparation(t, ns, "web-1", prepSpec{order: "web", ready: metav1.ConditionTrue})
	sv := serving(t, ns, "web", "web-1")
	sv.Status.Rollout = &v1.RolloutStatus{Preparation: "web-1", State: v1.RolloutAborted, Attempt: sv.Generation, By: "alice"}
	must(t, env.Client.Status().Update(ctx, sv))
	bob := personIn(t, ns, "bob-aborted", "kokumi-approver")

	r := kubectlKokumi(t, "approve", "web", "--kubeconfig", bob)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "1 of 1 approvals (bob-aborted); the roll-out stays aborted: an approval does not resume it (clearing the abort starts another attempt, which asks again)\n") {
		t.Errorf("approve an aborted roll-out: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}
