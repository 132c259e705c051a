package quickstart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/internal/server"
	"github.com/kokumi-dev/kokumi/internal/view"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// The demo's identities, as `kokumi dev` sets them up on its hub (the roles people are given,
// then sandbox.InstallIdentities): the server runs as its own ServiceAccount with the shipped
// role, and the token the demo prints (the server's admin token) may not approve: the page says
// so and the API refuses it. The command the demo prints makes a second person, approver,
// whose approval is accepted, under their own name, through the shipped admission policy.
func TestTheDemosPrintedTokenMayNotApproveAndItsApproverMay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := demoHub(ctx, t)
	const ns = "platform" // the demo's tenant namespace, which sandbox.DemoApproverFile names
	must(t, env.AggregateTenantRoles(ctx))
	env.ApprovalPolicyEnforced(t, ns)
	ids, err := sandbox.InstallIdentities(ctx, env.Config, env.Assets.Root)
	must(t, err)

	// The server as `kokumi dev` runs it: its own manager, as its ServiceAccount, with the
	// demo's admin token.
	const demoToken = "demo-ui-token-0123456789"
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	base := "http://" + lis.Addr().String()
	cfg := config.Config{ArgoCDNamespace: sandbox.ArgoCDNamespace, Namespace: sandbox.KokumiNamespace}
	mgr, err := controller.NewManager(ids.Server, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg},
		func(mgr ctrl.Manager, shared controller.Shared) error {
			return server.AddToManager(mgr, shared.ArgoCD, server.Options{AdminToken: demoToken, ArgoCDNamespace: cfg.ArgoCDNamespace, Namespace: cfg.Namespace}, lis)
		})
	must(t, err)
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(runCtx) }()
	defer func() {
		stop()
		if err := <-stopped; err != nil {
			t.Errorf("the demo's server: %v", err)
		}
	}()

	// The example's Order to an Environment that asks one approval; its Preparation promoted
	// and its roll-out awaiting the gate, as the controller writes it (no controller runs here).
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"environment": "edge"}}, Project: "edge",
		Approval: &v1.ApprovalPolicy{Required: 1},
	}}))
	must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo-edge"}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo-fleet"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"},
		Promotion: v1.Promotion{Mode: v1.PromotionManual},
	}}))
	d := "sha256:" + strings.Repeat("1", 64)
	prep := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo-edge-1"}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo-edge"}, ProductRef: v1.LocalObjectReference{Name: "podinfo-fleet"},
		Source:          v1.PreparationSource{URL: "oci://registry.example/charts/podinfo", Version: "6.14.1", Digest: d},
		TargetNamespace: "podinfo", Artifact: v1.Artifact{Ref: "oci://registry.example/platform/podinfo-edge@" + d, Digest: d}, ConfigHash: "1",
	}}
	must(t, env.Client.Create(ctx, prep))
	apimeta.SetStatusCondition(&prep.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonRendered, Message: "pushed"})
	must(t, env.Client.Status().Update(ctx, prep))
	sv := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo-edge"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo-edge"}, PreparationName: prep.Name, PromotedBy: env.AdminName,
	}}
	must(t, env.Client.Create(ctx, sv))
	sv.Status.Rollout = &v1.RolloutStatus{Preparation: prep.Name, Attempt: sv.Generation, State: v1.RolloutProgressing, Awaiting: v1.EnvironmentGate}
	must(t, env.Client.Status().Update(ctx, sv))
	path := "/api/v1/namespaces/" + ns + "/servings/podinfo-edge"

	// The printed token: the page disables Approve, naming who may; the API refuses it.
	var detail view.ServingDetail
	harness.Eventually(t, "the Serving page shows the approval", 30*time.Second, func() error {
		detail = view.ServingDetail{}
		if code := call(t, base, http.MethodGet, path, demoToken, nil, &detail); code != http.StatusOK || detail.Approval == nil {
			return fmt.Errorf("status %d, approval %v", code, detail.Approval)
		}
		return nil
	})
	if c := detail.Can["approve"]; c.Allowed || !strings.Contains(c.Reason, "may not approve") || !strings.Contains(c.Reason, "kokumi-approver") {
		t.Errorf("the demo token's can.approve %+v, want refused, naming kokumi-approver", c)
	}
	var refused map[string]any
	if code := call(t, base, http.MethodPost, path+"/approve", demoToken, server.ApproveRequest{}, &refused); code != http.StatusForbidden ||
		!strings.Contains(fmt.Sprint(refused["error"]), "approvals come from people") {
		t.Errorf("approve with the demo's token: %d %v, want 403", code, refused)
	}

	// The command the demo prints, run as printed from the checkout, makes the approver.
	var approverToken string
	for _, step := range sandbox.ApproverSteps(ns) {
		for i, arg := range step {
			if arg == sandbox.DemoApproverFile {
				step[i] = filepath.Join(env.Assets.Root, arg)
			}
		}
		out, err := env.Kubectl(ctx, step...)
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(step, " "), err, out)
		}
		approverToken = strings.TrimSpace(out)
	}
	var approved server.ApproveAnswer
	if code := call(t, base, http.MethodPost, path+"/approve", approverToken, server.ApproveRequest{}, &approved); code != http.StatusOK ||
		approved.Next != "the roll-out goes past it" {
		t.Fatalf("approve as the demo's approver: %d %+v", code, approved)
	}
	const approverName = "system:serviceaccount:" + ns + ":" + sandbox.DemoApprover
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(sv), sv))
	if len(sv.Spec.Approvals) != 1 || sv.Spec.Approvals[0].By != approverName {
		t.Errorf("spec.approvals %+v, want one by %s", sv.Spec.Approvals, approverName)
	}
}

// call sends a request to the server at base with a bearer token and decodes its JSON answer
// into out; it returns the status.
func call(t *testing.T, base, method, path, token string, body, out any) int {
	t.Helper()
	var r bytes.Buffer
	if body != nil {
		must(t, json.NewEncoder(&r).Encode(body))
	}
	req, err := http.NewRequest(method, base+path, &r)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	defer res.Body.Close()
	_ = json.NewDecoder(res.Body).Decode(out)
	return res.StatusCode
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
