package server

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/server"
	"github.com/kokumi-dev/kokumi/internal/view"
)

// rolloutPolicy applies the shipped admission policy kokumi-serving-rollout
// (config/rbac/serving_rollout_policy.yaml), which this suite does not install otherwise.
func rolloutPolicy(t *testing.T) { applyRBAC(t, "serving_rollout_policy.yaml") }

// applyRBAC applies files of the shipped config/rbac.
func applyRBAC(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		if out, err := env.Kubectl(context.Background(), "apply", "-f", filepath.Join(env.Assets.Root, "config", "rbac", f)); err != nil {
			t.Fatalf("apply %s: %v: %s", f, err, out)
		}
	}
}

func TestATenantPausesResumesAndAbortsAsThemselves(t *testing.T) {
	ctx := context.Background()
	const ns = "team-rollout"
	rolloutPolicy(t)
	tenant := serviceAccountToken(t, ns, "tenant")
	bindClusterRole(t, ns, "edit", ns, "tenant")
	viewer := serviceAccountToken(t, ns, "viewer")
	bindClusterRole(t, ns, "view", ns, "viewer")
	const tenantName = "system:serviceaccount:" + ns + ":tenant"
	delivering(t, ns)
	path := servingPath(ns, "podinfo-edge")

	// A viewer sees Pause, Resume and Abort disabled, and is refused them.
	as := call{server: k8sBase, cookie: login(t, k8sBase, viewer)}
	d := getAs(t, as.at("", path, nil), func(view.ServingDetail) error { return nil })
	if c := d.Can["rollout"]; c.Allowed || !strings.Contains(c.Reason, "may not patch servings") {
		t.Errorf("a viewer's can.rollout %+v, want it refused with the reason", c)
	}
	for _, act := range []string{"pause", "resume", "abort"} {
		var out map[string]any
		if code := status(t, as.at(http.MethodPost, path+"/"+act, map[string]string{}), &out); code != http.StatusForbidden || !strings.Contains(fmt.Sprint(out["error"]), "may not patch servings") {
			t.Errorf("%s as a viewer: %d %v, want 403", act, code, out)
		}
	}
	if sv := servingNamed(t, ns, "podinfo-edge"); sv.Spec.Rollout != nil {
		t.Fatalf("a viewer's requests wrote spec.rollout: %+v", sv.Spec.Rollout)
	}

	// The tenant pauses, as themselves: by is the name the API server gives them.
	as = call{server: k8sBase, cookie: login(t, k8sBase, tenant)}
	if d := getAs(t, as.at("", path, nil), func(view.ServingDetail) error { return nil }); !d.Can["rollout"].Allowed {
		t.Errorf("the tenant's can.rollout %+v, want allowed", d.Can["rollout"])
	}
	// A write signed in by cookie is JSON, even an empty one (a bearer token may send none).
	empty := map[string]string{}
	var answer server.RolloutAnswer
	if code := status(t, as.at(http.MethodPost, path+"/pause", map[string]string{}), &answer); code != http.StatusOK || !answer.Changed || answer.Preparation != "podinfo-edge-abc" {
		t.Fatalf("pause as the tenant: %d %+v", code, answer)
	}
	sv := servingNamed(t, ns, "podinfo-edge")
	if c := sv.Spec.Rollout; c == nil || !c.Paused || c.Abort != "" || c.By != tenantName {
		t.Fatalf("spec.rollout after the tenant paused: %+v, want paused by %s", c, tenantName)
	}
	// The Serving page carries it.
	getAs(t, as.at("", path, nil), func(d view.ServingDetail) error {
		if d.Control == nil || !d.Control.Paused || d.Control.By != tenantName {
			return fmt.Errorf("control %+v, want paused by %s", d.Control, tenantName)
		}
		return nil
	})

	// Abort: a Preparation other than the one rolled out is refused, naming the field.
	var refused map[string]any
	if code := status(t, as.at(http.MethodPost, path+"/abort", server.AbortRequest{Preparation: "podinfo-edge-v2"}), &refused); code != http.StatusUnprocessableEntity ||
		!strings.HasPrefix(fmt.Sprint(refused["error"]), "preparation: ") || !strings.Contains(fmt.Sprint(refused["error"]), "not podinfo-edge-v2") {
		t.Errorf("abort of another Preparation: %d %v, want 422 on preparation", code, refused)
	}
	if code := status(t, as.at(http.MethodPost, path+"/abort", server.AbortRequest{}), &answer); code != http.StatusOK || answer.Rollout == nil || answer.Rollout.Abort != "podinfo-edge-abc" {
		t.Fatalf("abort as the tenant: %d %+v", code, answer)
	}
	if c := servingNamed(t, ns, "podinfo-edge").Spec.Rollout; c == nil || c.Abort != "podinfo-edge-abc" || !c.Paused || c.By != tenantName {
		t.Errorf("spec.rollout after the tenant aborted: %+v", c)
	}
	// An abort of an aborted roll-out is refused: 409, saying how to go on.
	refused = nil
	if code := status(t, as.at(http.MethodPost, path+"/abort", server.AbortRequest{}), &refused); code != http.StatusConflict || !strings.Contains(fmt.Sprint(refused["error"]), "already aborted") {
		t.Errorf("abort again: %d %v, want 409", code, refused)
	}

	// Resume, then resume again: the second changes nothing and says so.
	if code := status(t, as.at(http.MethodPost, path+"/resume", empty), &answer); code != http.StatusOK || !answer.Changed {
		t.Errorf("resume: %d %+v", code, answer)
	}
	if c := servingNamed(t, ns, "podinfo-edge").Spec.Rollout; c == nil || c.Paused || c.By != tenantName {
		t.Errorf("spec.rollout after the tenant resumed: %+v", c)
	}
	answer = server.RolloutAnswer{}
	if code := status(t, as.at(http.MethodPost, path+"/resume", empty), &answer); code != http.StatusOK || answer.Changed {
		t.Errorf("resume of a roll-out not paused: %d %+v, want 200 and no change", code, answer)
	}

	// A Serving that deploys nothing has no roll-out to pause.
	orderAndServing(t, ns, "empty", "edge", "")
	refused = nil
	if code := status(t, as.at(http.MethodPost, servingPath(ns, "empty")+"/pause", empty), &refused); code != http.StatusConflict || !strings.Contains(fmt.Sprint(refused["error"]), "promote one first") {
		t.Errorf("pause of a Serving without a Preparation: %d %v, want 409", code, refused)
	}

	// Directly, the tenant cannot write another's name into by: the admission policy refuses. The
	// write is a dry run, so that one the API server takes before it loads the policy changes nothing.
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tenant
	direct, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	must(t, err)
	deadline := time.Now().Add(waitFor)
	for {
		var current v1.Serving
		must(t, direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "podinfo-edge"}, &current))
		patch := client.MergeFrom(current.DeepCopy())
		current.Spec.Rollout = &v1.RolloutControl{Paused: !current.Spec.Rollout.Paused, By: "system:serviceaccount:" + ns + ":viewer"}
		err := direct.Patch(ctx, &current, patch, client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "spec.rollout.by") && strings.Contains(err.Error(), tenantName) {
			break
		}
		if err == nil {
			// The API server may not have loaded the policy yet: try again.
			if time.Now().After(deadline) {
				t.Fatalf("the tenant wrote someone else's name into spec.rollout.by: the policy kokumi-serving-rollout did not refuse it")
			}
			time.Sleep(pollStep)
			continue
		}
		t.Fatalf("the tenant's direct write with someone else's name: %v, want the policy's refusal naming spec.rollout.by and %s", err, tenantName)
	}
	// And with their own name, it passes.
	var current v1.Serving
	must(t, direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "podinfo-edge"}, &current))
	patch := client.MergeFrom(current.DeepCopy())
	current.Spec.Rollout = &v1.RolloutControl{By: tenantName}
	if err := direct.Patch(ctx, &current, patch); err != nil {
		t.Errorf("the tenant's direct write with their own name: %v", err)
	}

	// The admin token writes as the server itself, and names it. (The policy serves by now: the
	// loop above saw it refuse.) The server holds no approve, so while someone else's abort
	// stands it may not pause; it may once nothing of another person is held.
	current = v1.Serving{}
	must(t, direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "podinfo-edge"}, &current))
	patch = client.MergeFrom(current.DeepCopy())
	current.Spec.Rollout = &v1.RolloutControl{Abort: current.Spec.PreparationName, By: tenantName}
	must(t, direct.Patch(ctx, &current, patch))
	refused = nil
	if code := status(t, call{bearer: token}.at(http.MethodPost, path+"/pause", nil), &refused); code != http.StatusForbidden || !strings.Contains(fmt.Sprint(refused["error"]), "approve") {
		t.Errorf("pause with the admin token over the tenant's abort: %d %v, want 403 naming approve", code, refused)
	}
	current = v1.Serving{}
	must(t, direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: "podinfo-edge"}, &current))
	patch = client.MergeFrom(current.DeepCopy())
	current.Spec.Rollout = &v1.RolloutControl{By: tenantName}
	must(t, direct.Patch(ctx, &current, patch))
	var admin server.RolloutAnswer
	if code := status(t, call{bearer: token}.at(http.MethodPost, path+"/pause", nil), &admin); code != http.StatusOK || admin.Rollout == nil || admin.Rollout.By != serverUser {
		t.Errorf("pause with the admin token: %d %+v, want by %s", code, admin, serverUser)
	}
}
