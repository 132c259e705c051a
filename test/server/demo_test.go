package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/internal/server"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// The demo's identities, as `kokumi dev` sets them up (sandbox.InstallIdentities): the server
// runs as its own ServiceAccount with the shipped role, and the token the demo prints (the
// server's admin token) may not approve: the page says so and the API refuses it. The command
// the demo prints makes a second person, approver, whose approval counts, under their name.
func TestTheDemosPrintedTokenMayNotApproveAndItsApproverMay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "platform" // the demo's tenant namespace, which sandbox.DemoApproverFile names
	approvalPolicy(t, ns)
	ids, err := sandbox.InstallIdentities(ctx, env.Config, env.Assets.Root)
	must(t, err)
	const demoToken = "demo-ui-token-0123456789"
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	demoBase := "http://" + lis.Addr().String()
	cfg := config.Config{ArgoCDNamespace: argoNS, Namespace: kokumiNS}
	mgr, err := controller.NewManager(ids.Server, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg},
		func(mgr ctrl.Manager, shared controller.Shared) error {
			return server.AddToManager(mgr, shared.ArgoCD, server.Options{AdminToken: demoToken, ArgoCDNamespace: argoNS, Namespace: kokumiNS}, lis)
		})
	must(t, err)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("the demo's server: %v", err)
		}
	}()

	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"environment": "edge"}}, Project: "edge",
		Approval: &v1.ApprovalPolicy{Required: 1},
	}}))
	orderAndServing(t, ns, "podinfo-edge", "edge", "")
	preparationOf(t, ns, "podinfo-edge-1", "podinfo-edge", true)
	sv := servingNamed(t, ns, "podinfo-edge")
	sv.Spec.PreparationName = "podinfo-edge-1"
	must(t, env.Client.Update(ctx, sv))
	awaiting(t, ns, "podinfo-edge", v1.EnvironmentGate)
	path := servingPath(ns, "podinfo-edge")

	asAdmin := call{server: demoBase, cookie: login(t, demoBase, demoToken)}
	d := getAs(t, asAdmin.at("", path, nil), func(d view.ServingDetail) error {
		if d.Approval == nil {
			return fmt.Errorf("no approval on the page yet")
		}
		return nil
	})
	if c := d.Can["approve"]; c.Allowed || !strings.Contains(c.Reason, "may not approve") || !strings.Contains(c.Reason, "kokumi-approver") {
		t.Errorf("the demo token's can.approve %+v, want refused, naming kokumi-approver", c)
	}
	var out map[string]any
	if code := status(t, asAdmin.at(http.MethodPost, path+"/approve", server.ApproveRequest{}), &out); code != http.StatusForbidden ||
		!strings.Contains(fmt.Sprint(out["error"]), "approvals come from people") {
		t.Errorf("approve with the demo's token: %d %v, want 403", code, out)
	}
	if sv := servingNamed(t, ns, "podinfo-edge"); len(sv.Spec.Approvals) != 0 {
		t.Fatalf("the demo token's refused approval changed spec.approvals: %+v", sv.Spec.Approvals)
	}

	// The command the demo prints, run as printed (from the checkout), makes the approver.
	var approverToken string
	for _, step := range sandbox.ApproverSteps(ns) {
		for i, arg := range step {
			if arg == sandbox.DemoApproverFile { // relative to the checkout, where the demo runs
				step[i] = filepath.Join(env.Assets.Root, arg)
			}
		}
		out, err := env.Kubectl(ctx, step...)
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(step, " "), err, out)
		}
		approverToken = strings.TrimSpace(out)
	}
	asApprover := call{server: demoBase, cookie: login(t, demoBase, approverToken)}
	var approved server.ApproveAnswer
	if code := status(t, asApprover.at(http.MethodPost, path+"/approve", server.ApproveRequest{}), &approved); code != http.StatusOK {
		t.Fatalf("approve as the demo's approver: %d %+v", code, approved)
	}
	const approverName = "system:serviceaccount:" + ns + ":" + sandbox.DemoApprover
	if sv := servingNamed(t, ns, "podinfo-edge"); len(sv.Spec.Approvals) != 1 || sv.Spec.Approvals[0].By != approverName {
		t.Errorf("spec.approvals %+v, want one by %s", sv.Spec.Approvals, approverName)
	}
}
