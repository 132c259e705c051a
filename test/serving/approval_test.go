package serving

import (
	"fmt"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// person returns a client of a person bound to the ClusterRole role in the namespace, and
// nothing else, and their name.
func (f *fixture) person(name, role string) (client.Client, string) {
	f.t.Helper()
	must(f.t, env.Client.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role, Namespace: f.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}}))
	cfg, err := env.AddUser(name)
	must(f.t, err)
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	must(f.t, err)
	return c, name
}

// write patches the Serving's spec as c (kokumi-approver may patch, not update), again on a
// conflict with the controller's writes.
func (f *fixture) write(c client.Client, change func(*v1.ServingSpec)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := f.serving()
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		change(&s.Spec)
		return c.Patch(f.ctx, s, patch)
	})
}

// refused fails the test unless err is the admission policy's refusal, Forbidden (or Invalid
// when invalid), whose message has each of want.
func refused(t *testing.T, what string, err error, invalid bool, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: admitted, want the policy kokumi-serving-approval to refuse it", what)
	}
	if invalid && !apierrors.IsInvalid(err) || !invalid && !apierrors.IsForbidden(err) {
		t.Fatalf("%s: %v, want the policy's refusal", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v, want it to say %q", what, err, w)
		}
	}
}

// The shipped admission policy kokumi-serving-approval (installed with config/rbac) holds the
// names a Serving carries to the people who write them, on the real API server: each of its
// rules is played by an attacker, and each refusal names the field and the fix.
func TestTheApprovalPolicyHoldsPromotersAndApproversToTheirOwnNames(t *testing.T) {
	f := newFixture(t)
	p := canaryThenRest(0, v1.RolloutHalt)
	p.Waves[0].Approval = &v1.ApprovalPolicy{Required: 2}
	f.setRollout(p)
	f.ringCluster("pa-canary-"+f.ns, "canary", true)
	f.preparation("podinfo-edge-1", "podinfo", false)
	f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", "")
	tenant, alice := f.tenant("alice-" + f.ns)
	approver, carol := f.person("carol-"+f.ns, "kokumi-approver")
	_, dave := f.person("dave-"+f.ns, "kokumi-approver")

	// (a) A promotion names its writer: another's name, or none, is refused.
	err := f.write(tenant, func(s *v1.ServingSpec) { s.PreparationName, s.PromotedBy = "podinfo-edge-1", "bob" })
	refused(t, "a tenant promoted in bob's name", err, false, "spec.promotedBy", "set promotedBy to "+alice, "kubectl kokumi promote")
	err = f.write(tenant, func(s *v1.ServingSpec) { s.PreparationName = "podinfo-edge-1" })
	refused(t, "a tenant promoted without a name", err, false, "set promotedBy to "+alice)
	must(t, f.write(tenant, func(s *v1.ServingSpec) { s.PreparationName, s.PromotedBy = "podinfo-edge-1", alice }))
	// Nor does anyone rewrite who promoted what runs.
	err = f.write(tenant, func(s *v1.ServingSpec) { s.PromotedBy = "bob" })
	refused(t, "a tenant rewrote promotedBy alone", err, false, "set promotedBy to "+alice)
	// A CREATE with a Preparation names its writer too, even a cluster admin's.
	err = env.Client.Create(f.ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: f.ns},
		Spec: v1.ServingSpec{OrderRef: v1.LocalObjectReference{Name: "other"}, PreparationName: "other-1", PromotedBy: alice}})
	refused(t, "an admin created a Serving promoted in alice's name", err, false, "set promotedBy to "+env.AdminName)

	// (b) A tenant with edit may patch the Serving but not approve: the policy asks the verb.
	attempt := f.attempt("podinfo-edge-1")
	mine := v1.Approval{Preparation: "podinfo-edge-1", Wave: "canary", By: alice, Attempt: attempt}
	err = f.write(tenant, func(s *v1.ServingSpec) { s.Approvals = append(s.Approvals, mine) })
	refused(t, "a tenant with edit approved", err, false, "spec.approvals", alice+" may not approve Servings in namespace "+f.ns, "kokumi-approver")
	// An approver approves in their own name only, and only what the Serving rolls out.
	err = f.write(approver, func(s *v1.ServingSpec) {
		s.Approvals = append(s.Approvals, v1.Approval{Preparation: "podinfo-edge-1", Wave: "canary", By: dave, Attempt: attempt})
	})
	refused(t, "an approver approved in dave's name", err, false, "spec.approvals", "set by to "+carol, "kubectl kokumi approve")
	err = f.write(approver, func(s *v1.ServingSpec) {
		s.Approvals = append(s.Approvals, v1.Approval{Preparation: "podinfo-edge-0", Wave: "canary", By: carol, Attempt: attempt})
	})
	refused(t, "an approver approved another Preparation", err, true, "spec.approvals", "set preparation to podinfo-edge-1")
	carols := v1.Approval{Preparation: "podinfo-edge-1", Wave: "canary", By: carol, Attempt: attempt}
	must(t, f.write(approver, func(s *v1.ServingSpec) { s.Approvals = append(s.Approvals, carols) }))
	// An entry already there is not added again: others' writes of the Serving keep it.
	must(t, f.write(tenant, func(s *v1.ServingSpec) { s.Rollout = &v1.RolloutControl{Paused: true, By: alice} }))

	// (c) Nobody withdraws another's approval of what runs.
	err = f.write(tenant, func(s *v1.ServingSpec) { s.Approvals = nil })
	refused(t, "a tenant withdrew carol's approval", err, false, "only its author withdraws an approval of the roll-out of Preparation podinfo-edge-1", carol)
	// A new promotion leaves the old Preparation's approvals behind, and may drop them.
	must(t, f.write(tenant, func(s *v1.ServingSpec) { s.PreparationName, s.PromotedBy, s.Approvals = "podinfo-edge-2", alice, nil }))
	// The author withdraws their own.
	second := f.attempt("podinfo-edge-2")
	must(t, f.write(approver, func(s *v1.ServingSpec) {
		s.Approvals = []v1.Approval{{Preparation: "podinfo-edge-2", Wave: "canary", By: carol, Attempt: second}}
	}))
	must(t, f.write(approver, func(s *v1.ServingSpec) { s.Approvals = nil }))
	if s := f.serving(); s.Spec.PromotedBy != alice || len(s.Spec.Approvals) != 0 {
		t.Errorf("spec after the writes: promotedBy %q, approvals %+v", s.Spec.PromotedBy, s.Spec.Approvals)
	}
}

// attempt waits for the roll-out of prep to start, and returns its attempt.
func (f *fixture) attempt(prep string) int64 {
	f.t.Helper()
	var attempt int64
	f.eventually("the roll-out of "+prep+" starts", func() error {
		r := f.serving().Status.Rollout
		if r == nil || r.Preparation != prep || r.Attempt == 0 {
			return fmt.Errorf("status.rollout %+v", r)
		}
		attempt = r.Attempt
		return nil
	})
	return attempt
}
