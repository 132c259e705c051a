package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/server"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// approvalPolicy applies the shipped admission policy kokumi-serving-approval and the role
// kokumi-approver (config/rbac), which this suite does not install otherwise.
func approvalPolicy(t *testing.T, ns string) {
	applyRBAC(t, "serving_approval_policy.yaml", "kokumi_approver_role.yaml")
	must(t, env.CreateNamespace(context.Background(), ns))
	env.ApprovalPolicyEnforced(t, ns)
}

// awaiting sets the Serving's status.rollout.awaiting, as the controller does when a gate
// waits for approvals (this suite runs no controller).
func awaiting(t *testing.T, ns, name, gate string) {
	t.Helper()
	sv := servingNamed(t, ns, name)
	sv.Status.Rollout = &v1.RolloutStatus{Preparation: sv.Spec.PreparationName, State: v1.RolloutProgressing, Awaiting: gate}
	must(t, env.Client.Status().Update(context.Background(), sv))
}

// An Environment asks one approval by someone other than the promoter. Through the API: the
// promoter (who may approve otherwise) is refused, a tenant with only edit is refused, an
// approver with kokumi-approver approves as themselves, once; the page says who may.
func TestTheApproverIsNotThePromoter(t *testing.T) {
	ctx := context.Background()
	const ns = "team-approve"
	approvalPolicy(t, ns)
	promoter := serviceAccountToken(t, ns, "promoter")
	bindClusterRole(t, ns, "edit", ns, "promoter")
	bindClusterRole(t, ns, "kokumi-approver", ns, "promoter")
	tenant := serviceAccountToken(t, ns, "tenant")
	bindClusterRole(t, ns, "edit", ns, "tenant")
	approver := serviceAccountToken(t, ns, "approver")
	bindClusterRole(t, ns, "kokumi-approver", ns, "approver")
	const promoterName, tenantName, approverName = "system:serviceaccount:" + ns + ":promoter",
		"system:serviceaccount:" + ns + ":tenant", "system:serviceaccount:" + ns + ":approver"
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, Project: "prod",
		Approval: &v1.ApprovalPolicy{Required: 1, SeparateFromPromoter: true},
	}}))
	orderAndServing(t, ns, "web", "prod", "")
	preparationOf(t, ns, "web-1", "web", true)
	path := servingPath(ns, "web")

	// The promoter promotes through the API: spec.promotedBy names them.
	asPromoter := call{server: k8sBase, cookie: login(t, k8sBase, promoter)}
	var promoted map[string]string
	if code := status(t, asPromoter.at(http.MethodPost, path+"/promotion", server.PromoteRequest{Preparation: "web-1"}), &promoted); code != http.StatusOK {
		t.Fatalf("promote as the promoter: %d %v", code, promoted)
	}
	if sv := servingNamed(t, ns, "web"); sv.Spec.PreparationName != "web-1" || sv.Spec.PromotedBy != promoterName {
		t.Fatalf("after the promotion: preparationName %q promotedBy %q, want web-1 by %s", sv.Spec.PreparationName, sv.Spec.PromotedBy, promoterName)
	}
	awaiting(t, ns, "web", v1.EnvironmentGate)

	// The page shows the gate to each, and why the promoter and the tenant may not approve.
	d := getAs(t, asPromoter.at("", path, nil), func(d view.ServingDetail) error {
		if d.Approval == nil {
			return fmt.Errorf("no approval on the page yet")
		}
		return nil
	})
	if a := d.Approval; a.Gate != v1.EnvironmentGate || a.Wave != "" || a.Required != 1 || len(a.Approvers) != 0 || !a.SeparateFromPromoter || a.PromotedBy != promoterName {
		t.Errorf("the page's approval %+v", a)
	}
	if c := d.Can["approve"]; c.Allowed || !strings.Contains(c.Reason, "asks that someone else approve") {
		t.Errorf("the promoter's can.approve %+v, want refused for separation", c)
	}
	asTenant := call{server: k8sBase, cookie: login(t, k8sBase, tenant)}
	d = getAs(t, asTenant.at("", path, nil), func(view.ServingDetail) error { return nil })
	if c := d.Can["approve"]; c.Allowed || !strings.Contains(c.Reason, "may not approve servings") {
		t.Errorf("the tenant's can.approve %+v, want refused for RBAC", c)
	}

	// The promoter's approval is refused (409), saying why; the tenant's (403), saying what it lacks.
	var out map[string]any
	if code := status(t, asPromoter.at(http.MethodPost, path+"/approve", server.ApproveRequest{}), &out); code != http.StatusConflict ||
		!strings.Contains(fmt.Sprint(out["error"]), promoterName+" promoted Preparation web-1") {
		t.Errorf("approve as the promoter: %d %v, want 409", code, out)
	}
	out = nil
	if code := status(t, asTenant.at(http.MethodPost, path+"/approve", server.ApproveRequest{}), &out); code != http.StatusForbidden ||
		!strings.Contains(fmt.Sprint(out["error"]), "may not approve servings") {
		t.Errorf("approve as the tenant: %d %v, want 403", code, out)
	}
	if sv := servingNamed(t, ns, "web"); len(sv.Spec.Approvals) != 0 {
		t.Fatalf("refused approvals were written: %+v", sv.Spec.Approvals)
	}

	// The approver: another Preparation is refused naming the field; the gate approved once.
	asApprover := call{server: k8sBase, cookie: login(t, k8sBase, approver)}
	if d := getAs(t, asApprover.at("", path, nil), func(view.ServingDetail) error { return nil }); !d.Can["approve"].Allowed {
		t.Errorf("the approver's can.approve %+v, want allowed", d.Can["approve"])
	}
	out = nil
	if code := status(t, asApprover.at(http.MethodPost, path+"/approve", server.ApproveRequest{Preparation: "web-0"}), &out); code != http.StatusUnprocessableEntity ||
		!strings.HasPrefix(fmt.Sprint(out["error"]), "preparation: ") {
		t.Errorf("approve another Preparation: %d %v, want 422 on preparation", code, out)
	}
	out = nil
	if code := status(t, asApprover.at(http.MethodPost, path+"/approve", server.ApproveRequest{Wave: "canary"}), &out); code != http.StatusUnprocessableEntity ||
		!strings.HasPrefix(fmt.Sprint(out["error"]), "wave: Environment prod asks for no approval of wave canary") {
		t.Errorf("approve a wave that asks none: %d %v, want 422 on wave", code, out)
	}
	var answer server.ApproveAnswer
	if code := status(t, asApprover.at(http.MethodPost, path+"/approve", server.ApproveRequest{Wave: v1.EnvironmentGate, Preparation: "web-1"}), &answer); code != http.StatusOK ||
		answer.Preparation != "web-1" || answer.Required != 1 || len(answer.Approvers) != 1 || answer.Approvers[0] != approverName {
		t.Fatalf("approve as the approver: %d %+v", code, answer)
	}
	if sv := servingNamed(t, ns, "web"); len(sv.Spec.Approvals) != 1 || sv.Spec.Approvals[0] != (v1.Approval{Preparation: "web-1", By: approverName}) {
		t.Errorf("spec.approvals %+v, want the approver's of web-1", sv.Spec.Approvals)
	}
	d = getAs(t, asApprover.at("", path, nil), func(d view.ServingDetail) error {
		if d.Approval == nil || len(d.Approval.Approvers) != 1 {
			return fmt.Errorf("approval %+v, want the approver counted", d.Approval)
		}
		return nil
	})
	if c := d.Can["approve"]; c.Allowed || !strings.Contains(c.Reason, "already approved") {
		t.Errorf("the approver's can.approve after approving %+v", c)
	}
	out = nil
	if code := status(t, asApprover.at(http.MethodPost, path+"/approve", server.ApproveRequest{}), &out); code != http.StatusConflict ||
		!strings.Contains(fmt.Sprint(out["error"]), "already approved") {
		t.Errorf("approve again: %d %v, want 409", code, out)
	}

	// The admin token writes as the server, which may not approve: the server asks RBAC of its
	// own identity first, and refuses (403) saying so.
	sv := servingNamed(t, ns, "web")
	sv.Spec.PreparationName, sv.Spec.PromotedBy = "web-2", env.AdminName
	must(t, env.Client.Update(ctx, sv))
	awaiting(t, ns, "web", v1.EnvironmentGate)
	out = nil
	if code := status(t, call{bearer: token}.at(http.MethodPost, path+"/approve", server.ApproveRequest{}), &out); code != http.StatusForbidden ||
		!strings.Contains(fmt.Sprint(out["error"]), "the admin token writes as the server's ServiceAccount, which may not approve") {
		t.Errorf("approve with the admin token: %d %v, want 403", code, out)
	}
	if sv := servingNamed(t, ns, "web"); len(sv.Spec.Approvals) != 1 {
		t.Errorf("the admin token's refused approval changed spec.approvals: %+v", sv.Spec.Approvals)
	}
}
