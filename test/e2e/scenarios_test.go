//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/view"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// The spec's scenarios, in order, on one fleet: each starts from where the one before left the
// fleet, as a user of `make demo` would go through them.

const (
	tenant  = "platform"
	serving = "podinfo-edge"
	// movedNamespace is the target namespace the Order moves to; the AppProject permits it.
	movedNamespace = "podinfo-moved"
)

// settle is how long a scenario may take on the fleet: Argo CD syncs in about a second, a
// rollout on KWOK in a few, a Cluster probe fails after a few seconds.
const settle = 2 * time.Minute

func TestScenarios(t *testing.T) {
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"the example deploys to the three clusters of the Environment", deployToThree},
		{"a stopped member is held as ClusterNotReady and the Serving stays Deployed", memberStopped},
		{"a member whose Deployment cannot become ready fails the deployment", memberDegraded},
		{"a release that degrades on the canary never reaches the other members and is rolled back", canaryRollsBack},
		{"a canary whose smoke gate fails never reaches the other members", smokeGateHolds},
		{"a canary compared with the members still on the release before halts only when it alone is worse", perClusterCompareHalts},
		{"a canary whose verification Job fails on the hub halts the roll-out; a passing Job lets it on", jobGateHolds},
		{"a destination the AppProject forbids is Rejected with Argo CD's message", forbiddenDestination},
		{"a fourth member joins and gets its Application; then it leaves", joinAndLeave},
		{"a target namespace change moves the workload", targetNamespaceChange},
		{"deleting the Environment's AppProject deletes the Applications, not the workloads", projectDeleted},
	}
	for _, s := range steps {
		start := time.Now()
		if !t.Run(s.name, s.run) {
			t.Fatalf("the scenarios after %q need it to pass", s.name)
		}
		t.Logf("%s: %s", s.name, time.Since(start).Round(100*time.Millisecond))
	}
}

func deployToThree(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	for _, m := range edgeMembers() {
		if err := fleet.RegisterCluster(ctx, m, map[string]string{sandbox.EnvironmentLabel: sandbox.DemoEnvironment}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fleet.SetUpEnvironment(ctx, sandbox.EnvironmentSetup{
		Namespace: tenant, Name: sandbox.DemoEnvironment, Project: sandbox.DemoEnvironment,
		TargetNamespaces: []string{sandbox.DemoTargetNamespace, movedNamespace},
	}); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-n", tenant, "-k", filepath.Join(assets.Root, "examples", "multi-cluster"))
	kubectl(t, "patch", "-n", tenant, "product", sandbox.DemoProduct, "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"source":{"url":%q,"version":%q}}}`, demo.ChartURL, demo.ChartVersion))

	s := waitServing(t, serving, "every member runs podinfo synced and healthy", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3)
	})
	t.Logf("Deployed %s %s after %s", s.Spec.PreparationName, s.Status.Revision, time.Since(start).Round(100*time.Millisecond))
	out := kubectl(t, "get", "serving", serving, "-n", tenant, "-o", "wide")
	t.Logf("kubectl get serving %s -n %s -o wide:\n%s", serving, tenant, out)
	if f := strings.Fields(lastLine(out)); len(f) < 7 || f[3] != "3" || f[4] != "3" || f[5] != "True" || f[6] != "Deployed" {
		t.Errorf("kubectl shows %q, want CLUSTERS 3, HEALTHY 3, READY True, REASON Deployed", lastLine(out))
	}
	for _, m := range edgeMembers() {
		expectWorkload(t, m.Name, sandbox.DemoTargetNamespace)
	}
	apps := applications(t)
	if len(apps) != 3 {
		t.Errorf("%d Applications carry the Serving's labels, want one per cluster: %v", len(apps), apps)
	}
	// The UI's Serving page shows what Argo CD reports: every cluster healthy at the revision.
	eventually(t, time.Minute, "the Serving page shows three healthy clusters", func(ctx context.Context) error {
		page, err := servingPage(ctx, serving)
		if err != nil {
			return err
		}
		if len(page.Rows) != 3 {
			return fmt.Errorf("%d rows, want 3: %+v", len(page.Rows), page.Rows)
		}
		for _, r := range page.Rows {
			if r.Health != "Healthy" || r.Sync != "Synced" || r.Revision != s.Status.Revision || r.Since == nil {
				return fmt.Errorf("%s shows %s/%s at %s since %v, want Healthy/Synced at %s", r.Cluster, r.Health, r.Sync, r.Revision, r.Since, s.Status.Revision)
			}
		}
		return nil
	})
}

// servingPage reads the Serving page of the UI's API, as the UI does.
func servingPage(ctx context.Context, name string) (view.ServingDetail, error) {
	var d view.ServingDetail
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uiBase+"/api/v1/namespaces/"+tenant+"/servings/"+name, nil)
	if err != nil {
		return d, err
	}
	req.Header.Set("Authorization", "Bearer "+uiToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return d, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return d, fmt.Errorf("GET the Serving page: status %d", res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
		return d, fmt.Errorf("decode the Serving page: %w", err)
	}
	return d, nil
}

func memberStopped(t *testing.T) {
	if err := fleet.StopMember("edge-3"); err != nil {
		t.Fatal(err)
	}
	waitServing(t, serving, "edge-3 is held, the Serving stays Deployed and names it", func(s *v1.Serving) error {
		if err := expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 2); err != nil {
			return err
		}
		if err := expectTarget(s, "edge-3", v1.ReasonClusterNotReady); err != nil {
			return err
		}
		if msg := readyMessage(s); !strings.Contains(msg, "edge-3") {
			return fmt.Errorf("the Ready message %q does not name edge-3", msg)
		}
		return nil
	})
	eventually(t, time.Minute, "the Serving page lists the held edge-3 first, with its reason", func(ctx context.Context) error {
		page, err := servingPage(ctx, serving)
		if err != nil {
			return err
		}
		if rows := page.Rows; len(rows) != 3 || rows[0].Cluster != "edge-3" || rows[0].Reason != v1.ReasonClusterNotReady {
			return fmt.Errorf("rows %+v", rows)
		}
		return nil
	})
	if _, err := fleet.AddMember(context.Background(), "edge-3"); err != nil {
		t.Fatal(err)
	}
	waitServing(t, serving, "edge-3 is back and healthy", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3)
	})
}

func memberDegraded(t *testing.T) {
	// No Pod can be scheduled on edge-2 any more; the next rollout cannot progress there.
	setUnschedulable(t, "edge-2", true)
	kubectl(t, "patch", "-n", tenant, "product", sandbox.DemoProduct, "--type=merge",
		"-p", `{"spec":{"render":{"helm":{"values":{"ui":{"message":"Hello again from the edge"},"progressDeadlineSeconds":5}}}}}`)
	waitServing(t, serving, "edge-2 is degraded and the deployment failed", func(s *v1.Serving) error {
		if err := expectReady(s, metav1.ConditionFalse, v1.ReasonDeploymentFailed, 3, 2); err != nil {
			return err
		}
		return expectTarget(s, "edge-2", v1.ReasonDegraded)
	})
	setUnschedulable(t, "edge-2", false)
	waitServing(t, serving, "edge-2 rolls out once Pods can run again", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3)
	})
}

// canaryRollsBack rolls releases out in two waves, edge-1 first: a release whose Pods cannot
// run on edge-1 fails there, never reaches edge-2 and edge-3 (their Applications keep the
// release that ran), and edge-1 goes back to the last release with a signed record in the
// Environment. The next release, healthy, rolls through both waves; then the policy is removed.
func canaryRollsBack(t *testing.T) {
	kubectl(t, "label", "cluster", "edge-1", "ring=canary", "--overwrite")
	kubectl(t, "patch", "-n", tenant, "environment", sandbox.DemoEnvironment, "--type=merge", "-p",
		`{"spec":{"rollout":{"waves":[{"name":"canary","clusterSelector":{"matchLabels":{"ring":"canary"}}},{"name":"rest"}],"failureBudget":0,"onFailure":"Rollback"}}}`)
	t.Cleanup(func() {
		setUnschedulable(t, "edge-1", false)
		kubectl(t, "patch", "-n", tenant, "environment", sandbox.DemoEnvironment, "--type=json", "-p", `[{"op":"remove","path":"/spec/rollout"}]`)
		kubectl(t, "label", "cluster", "edge-1", "ring-")
	})
	var before v1.Serving
	must(t, hub.Get(context.Background(), client.ObjectKey{Namespace: tenant, Name: serving}, &before))
	good := before.Status.Revision
	// The release that ran has its signed record in the Environment: that is where a rollback goes.
	eventually(t, time.Minute, "the running release's deployment record", func(ctx context.Context) error {
		var prep v1.Preparation
		if err := hub.Get(ctx, client.ObjectKey{Namespace: tenant, Name: before.Spec.PreparationName}, &prep); err != nil {
			return err
		}
		for _, r := range prep.Status.DeploymentRecords {
			if r.Environment == sandbox.DemoEnvironment {
				return nil
			}
		}
		return fmt.Errorf("%s lists no record of %s yet", prep.Name, sandbox.DemoEnvironment)
	})

	// A release that cannot become ready on edge-1.
	setUnschedulable(t, "edge-1", true)
	kubectl(t, "patch", "-n", tenant, "product", sandbox.DemoProduct, "--type=merge",
		"-p", `{"spec":{"render":{"helm":{"values":{"ui":{"message":"A canary that fails"},"progressDeadlineSeconds":5}}}}}`)
	reached := map[string]string{}
	watchRest := func() { secondWaveReached(t, good, reached, "edge-2", "edge-3") }
	s := waitServing(t, serving, "the canary failed and the roll-out went back", func(s *v1.Serving) error {
		watchRest()
		if c := readyCondition(s); c == nil || c.Reason != v1.ReasonRolledBack {
			return fmt.Errorf("Ready %s", readyMessage(s))
		}
		return nil
	})
	t.Logf("rolled back: %s", readyMessage(s))
	if len(reached) != 0 {
		t.Errorf("the failed release reached the second wave: %v", reached)
	}
	if !strings.Contains(readyMessage(s), "edge-1") {
		t.Errorf("the Ready message does not name the failed canary: %s", readyMessage(s))
	}
	eventually(t, 2*time.Minute, "edge-1's Application targets the release that ran", func(context.Context) error {
		watchRest()
		for _, app := range clusterApplications(t, serving, "edge-1") {
			if rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision"); rev != good {
				return fmt.Errorf("edge-1 targets %s, want %s", rev, good)
			}
		}
		return nil
	})
	if len(reached) != 0 {
		t.Errorf("the failed release reached the second wave: %v", reached)
	}

	// Pods can run again, and the next release rolls through both waves.
	setUnschedulable(t, "edge-1", false)
	kubectl(t, "patch", "-n", tenant, "product", sandbox.DemoProduct, "--type=merge",
		"-p", `{"spec":{"render":{"helm":{"values":{"ui":{"message":"A canary that passes"}}}}}}`)
	waitServing(t, serving, "the next release Deployed through both waves", func(s *v1.Serving) error {
		if err := expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3); err != nil {
			return err
		}
		if s.Status.Revision == good {
			return fmt.Errorf("still at the release before")
		}
		return nil
	})
}

// smokeGateHolds rolls a release out in two waves, edge-1 first, with an HTTP smoke check of
// the canary: the release runs healthily on edge-1, as Argo CD reports, but the smoke endpoint
// answers 500 (the admin shows its answer to the tenant: http.showResponse), so the roll-out halts and edge-2 and edge-3 keep the release that ran. Then the
// policy is removed and the release reaches every member.
func smokeGateHolds(t *testing.T) {
	smoke := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprint(w, `{"status":"failing","checks":{"checkout":"500 from /api/cart"}}`)
	}))
	defer smoke.Close()
	policy := fmt.Sprintf(`{"spec":{"rollout":{"waves":[{"name":"canary","clusterSelector":{"matchLabels":{"ring":"canary"}},`+
		`"verify":[{"name":"smoke","http":{"url":%q,"showResponse":true,"successCondition":"response.status == 200 && response.body.status == 'ok'"}}]},{"name":"rest"}]}}}`, smoke.URL+"/smoke")
	cleanup := canaryPolicy(t, policy)
	var before v1.Serving
	must(t, hub.Get(context.Background(), client.ObjectKey{Namespace: tenant, Name: serving}, &before))
	good := before.Status.Revision

	kubectl(t, "patch", "-n", tenant, "product", sandbox.DemoProduct, "--type=merge",
		"-p", `{"spec":{"render":{"helm":{"values":{"ui":{"message":"A canary whose smoke test fails"}}}}}}`)
	reached := map[string]string{}
	watchRest := func() { secondWaveReached(t, good, reached, "edge-2", "edge-3") }
	s := waitServing(t, serving, "the smoke gate failed and the roll-out halted", func(s *v1.Serving) error {
		watchRest()
		if c := readyCondition(s); c == nil || c.Reason != v1.ReasonRolloutHalted {
			return fmt.Errorf("Ready %s", readyMessage(s))
		}
		return nil
	})
	t.Logf("halted: %s", readyMessage(s))
	if len(reached) != 0 {
		t.Errorf("the release whose smoke gate failed reached the second wave: %v", reached)
	}
	r := s.Status.Rollout
	if r == nil || len(r.Verifications) != 1 || r.Verifications[0].Phase != v1.VerificationFailed ||
		!strings.Contains(r.Verifications[0].Message, "500 from /api/cart") || r.Waves[0].Healthy != 1 {
		t.Errorf("status.rollout %+v", r)
	}
	for range 5 { // it stays halted
		time.Sleep(time.Second)
		watchRest()
	}
	if len(reached) != 0 {
		t.Errorf("the release whose smoke gate failed reached the second wave: %v", reached)
	}

	cleanup()
	waitServing(t, serving, "without the policy the release reaches every member", func(s *v1.Serving) error {
		if err := expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3); err != nil {
			return err
		}
		if s.Status.Revision == good {
			return fmt.Errorf("still at the release before")
		}
		return nil
	})
}

// canaryPolicy labels edge-1 ring=canary and patches the Environment's spec.rollout with
// policy (a merge patch); the cleanup it returns, which the test's end runs too, removes both.
func canaryPolicy(t *testing.T, policy string) (cleanup func()) {
	kubectl(t, "label", "cluster", "edge-1", "ring=canary", "--overwrite")
	kubectl(t, "patch", "-n", tenant, "environment", sandbox.DemoEnvironment, "--type=merge", "-p", policy)
	cleaned := false
	cleanup = func() {
		if cleaned {
			return
		}
		cleaned = true
		kubectl(t, "patch", "-n", tenant, "environment", sandbox.DemoEnvironment, "--type=json", "-p", `[{"op":"remove","path":"/spec/rollout"}]`)
		kubectl(t, "label", "cluster", "edge-1", "ring-")
	}
	t.Cleanup(cleanup)
	return cleanup
}

// secondWaveReached notes in reached each member of the second wave, rest, whose Application
// targets another revision than good.
func secondWaveReached(t *testing.T, good string, reached map[string]string, rest ...string) {
	for _, c := range rest {
		for _, app := range clusterApplications(t, serving, c) {
			if rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision"); rev != good {
				reached[c] = rev
			}
		}
	}
}

func forbiddenDestination(t *testing.T) {
	ctx := context.Background()
	order := &v1.Order{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: tenant, Name: serving}, order); err != nil {
		t.Fatal(err)
	}
	forbidden := &v1.Order{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo-forbidden", Namespace: tenant},
		Spec:       *order.Spec.DeepCopy(),
	}
	forbidden.Spec.TargetNamespace = "forbidden"
	if err := hub.Create(ctx, forbidden); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := hub.Delete(context.Background(), forbidden); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	waitServing(t, forbidden.Name, "every cluster is Rejected with Argo CD's message", func(s *v1.Serving) error {
		if err := expectReady(s, metav1.ConditionFalse, v1.ReasonDeploymentFailed, 3, 0); err != nil {
			return err
		}
		for _, m := range edgeMembers() {
			if err := expectTarget(s, m.Name, v1.ReasonRejected); err != nil {
				return err
			}
		}
		msg := s.Status.Targets[0].Conditions[0].Message
		if !strings.Contains(msg, "forbidden") || !strings.Contains(msg, "do not match any of the allowed destinations") {
			return fmt.Errorf("the target says %q, want Argo CD's refusal of namespace forbidden", msg)
		}
		return nil
	})
	for _, m := range edgeMembers() {
		if _, err := member(t, m.Name).CoreV1().Namespaces().Get(ctx, "forbidden", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the forbidden namespace exists (%v)", m.Name, err)
		}
	}
}

func joinAndLeave(t *testing.T) {
	ctx := context.Background()
	// Beside podinfo, a tenant's chart with a delete hook Argo CD would run when Kokumi deletes
	// the Application; it deploys while edge-4 starts.
	orderHooks(t)
	edge4, err := fleet.AddMember(ctx, "edge-4")
	if err != nil {
		t.Fatal(err)
	}
	if err := fleet.RegisterCluster(ctx, edge4, map[string]string{sandbox.EnvironmentLabel: sandbox.DemoEnvironment}); err != nil {
		t.Fatal(err)
	}
	waitServing(t, serving, "edge-4 joins and runs podinfo healthily", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 4, 4)
	})
	if apps := applications(t); len(apps) != 4 {
		t.Errorf("%d Applications after edge-4 joined, want 4: %v", len(apps), apps)
	}
	expectWorkload(t, "edge-4", sandbox.DemoTargetNamespace)
	waitServing(t, hooksOrder, "the hooks chart runs on the four clusters", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 4, 4)
	})
	expectConfigMap(t, "edge-4", hooksApp, true)
	// Argo CD marks an Application whose manifests hold a post-delete hook with its finalizer,
	// and holds its deletion until the hook ran: the rendered manifests hold none.
	for _, app := range clusterApplications(t, hooksOrder, "edge-4") {
		for _, f := range app.GetFinalizers() {
			if strings.HasPrefix(f, "post-delete-finalizer.argocd.argoproj.io") || strings.HasPrefix(f, "pre-delete-finalizer.argocd.argoproj.io") {
				t.Errorf("Application %s carries Argo CD's delete-hook finalizer %s", app.GetName(), f)
			}
		}
	}

	// edge-4 leaves the Environment: its label no longer matches.
	if err := fleet.RegisterCluster(ctx, edge4, map[string]string{sandbox.EnvironmentLabel: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	waitServing(t, serving, "edge-4 leaves", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3)
	})
	eventually(t, settle, "edge-4's Application is deleted", func(ctx context.Context) error {
		for _, app := range applications(t) {
			if strings.Contains(app, "edge-4") {
				return fmt.Errorf("Application %s is still there", app)
			}
		}
		return nil
	})
	eventually(t, settle, "an Event names edge-4", func(ctx context.Context) error {
		events := &corev1.EventList{}
		if err := hub.List(ctx, events, client.InNamespace(tenant)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Serving" && e.InvolvedObject.Name == serving && strings.Contains(e.Message, "edge-4") {
				return nil
			}
		}
		return fmt.Errorf("no Event of the Serving names edge-4 among %d", len(events.Items))
	})
	// What runs there keeps running.
	expectWorkload(t, "edge-4", sandbox.DemoTargetNamespace)
	// The hook never ran: once the Application is gone (Argo CD would have held it until its
	// post-delete hooks ran), the hook's ConfigMap, which Argo CD would keep (HookFailed), is
	// not on edge-4, and the chart's other ConfigMap still is.
	eventually(t, settle, "the hooks chart's Application on edge-4 is gone", func(ctx context.Context) error {
		if apps := clusterApplications(t, hooksOrder, "edge-4"); len(apps) > 0 {
			return fmt.Errorf("Application %s is still there (finalizers %v)", apps[0].GetName(), apps[0].GetFinalizers())
		}
		return nil
	})
	expectConfigMap(t, "edge-4", hooksFarewell, false)
	expectConfigMap(t, "edge-4", hooksApp, true)
}

// The hooks chart: a ConfigMap, and a ConfigMap Argo CD would create on a cluster when the
// Application deploying the chart there is deleted (PostDelete), and keep (HookFailed: it
// deletes the hook only if it failed).
const (
	hooksOrder    = "hooks-edge"
	hooksApp      = "hooks-app"
	hooksFarewell = "hooks-farewell"
)

// orderHooks pushes the hooks chart to the bundled registry and orders it to the Environment,
// into the namespace podinfo runs in (the AppProject permits it).
func orderHooks(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	ocitest.SignIn(t, fleet.Registry, registryCreds.Pusher)
	chart := ocitest.Chart(t, "hooks", map[string]string{
		"Chart.yaml":         "apiVersion: v2\nname: hooks\nversion: 1.0.0\n",
		"templates/app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + hooksApp + "\ndata:\n  app: runs\n",
		"templates/farewell.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + hooksFarewell + "\n  annotations:\n" +
			"    argocd.argoproj.io/hook: PostDelete\n    argocd.argoproj.io/hook-delete-policy: HookFailed\n" +
			"data:\n  farewell: the tenant's cleanup ran\n",
	})
	ocitest.PushChart(t, fleet.Registry+"/charts/hooks", "1.0.0", "hooks", "1.0.0", chart)
	must(t, hub.Create(ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: "hooks", Namespace: tenant}, Spec: v1.ProductSpec{
		Source:          v1.ProductSource{URL: "oci://" + fleet.Registry + "/charts/hooks", Version: "1.0.0"},
		TargetNamespace: sandbox.DemoTargetNamespace,
		Render:          &v1.RenderSpec{Helm: &v1.HelmRender{}},
	}}))
	must(t, hub.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: hooksOrder, Namespace: tenant}, Spec: v1.OrderSpec{
		ProductRef:     v1.LocalObjectReference{Name: "hooks"},
		EnvironmentRef: v1.LocalObjectReference{Name: sandbox.DemoEnvironment},
		Promotion:      v1.Promotion{Mode: v1.PromotionAutomatic},
	}}))
}

// expectConfigMap checks that a ConfigMap of podinfo's namespace is on the member, or is not.
func expectConfigMap(t *testing.T, cluster, name string, present bool) {
	t.Helper()
	_, err := member(t, cluster).CoreV1().ConfigMaps(sandbox.DemoTargetNamespace).Get(context.Background(), name, metav1.GetOptions{})
	switch {
	case present && err != nil:
		t.Errorf("%s: ConfigMap %s/%s: %v", cluster, sandbox.DemoTargetNamespace, name, err)
	case !present && err == nil:
		t.Errorf("%s: ConfigMap %s/%s is there: a delete hook ran", cluster, sandbox.DemoTargetNamespace, name)
	case !present && !apierrors.IsNotFound(err):
		t.Errorf("%s: ConfigMap %s/%s: %v", cluster, sandbox.DemoTargetNamespace, name, err)
	}
}

// clusterApplications lists the Applications of a Serving of the tenant namespace for one
// cluster, those being deleted included.
func clusterApplications(t *testing.T, name, cluster string) []unstructured.Unstructured {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("argoproj.io/v1alpha1")
	list.SetKind("ApplicationList")
	if err := hub.List(context.Background(), list, client.InNamespace(fleet.ArgoCDNamespace),
		client.MatchingLabels{argocd.LabelServing: name, argocd.LabelServingNamespace: tenant, argocd.LabelCluster: cluster}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func targetNamespaceChange(t *testing.T) {
	kubectl(t, "patch", "-n", tenant, "order", serving, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"targetNamespace":%q}}`, movedNamespace))
	waitServing(t, serving, "the workload is deployed in the new namespace", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3)
	})
	for _, m := range edgeMembers() {
		if m.Name == "edge-4" {
			continue
		}
		expectWorkload(t, m.Name, movedNamespace)
		cs := member(t, m.Name)
		eventually(t, settle, m.Name+": Argo CD empties the old namespace", func(ctx context.Context) error {
			deps, err := cs.AppsV1().Deployments(sandbox.DemoTargetNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			svcs, err := cs.CoreV1().Services(sandbox.DemoTargetNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(deps.Items)+len(svcs.Items) > 0 {
				return fmt.Errorf("%d Deployments and %d Services left in %s", len(deps.Items), len(svcs.Items), sandbox.DemoTargetNamespace)
			}
			return nil
		})
	}
}

func projectDeleted(t *testing.T) {
	ctx := context.Background()
	project := sandbox.AppProject(fleet.ArgoCDNamespace, sandbox.DemoEnvironment, sandbox.AppProjectSpec{})
	if err := hub.Delete(ctx, project); err != nil {
		t.Fatal(err)
	}
	waitServing(t, serving, "the Serving reports ProjectNotFound", func(s *v1.Serving) error {
		c := readyCondition(s)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonProjectNotFound {
			return fmt.Errorf("Ready is %+v, want False ProjectNotFound", c)
		}
		return nil
	})
	eventually(t, settle, "the Serving's Applications are deleted", func(ctx context.Context) error {
		if apps := applications(t); len(apps) > 0 {
			return fmt.Errorf("Applications left: %v", apps)
		}
		return nil
	})
	for _, m := range edgeMembers() {
		if m.Name == "edge-4" {
			continue
		}
		expectWorkload(t, m.Name, movedNamespace)
	}
}

// waitServing polls the Serving until check passes and returns it.
func waitServing(t *testing.T, name, what string, check func(*v1.Serving) error) *v1.Serving {
	t.Helper()
	s := &v1.Serving{}
	eventually(t, settle, what, func(ctx context.Context) error {
		if err := hub.Get(ctx, client.ObjectKey{Namespace: tenant, Name: name}, s); err != nil {
			return err
		}
		if err := check(s); err != nil {
			return fmt.Errorf("%w (status: clusters %+v, targets %+v, Ready %+v)", err, s.Status.Clusters, s.Status.Targets, readyCondition(s))
		}
		return nil
	})
	return s
}

func readyCondition(s *v1.Serving) *metav1.Condition {
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == v1.ConditionReady {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

func readyMessage(s *v1.Serving) string {
	if c := readyCondition(s); c != nil {
		return c.Message
	}
	return ""
}

func expectReady(s *v1.Serving, status metav1.ConditionStatus, reason string, selected, healthy int32) error {
	c := readyCondition(s)
	if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != s.Generation {
		return fmt.Errorf("Ready is %+v, want %s %s", c, status, reason)
	}
	if s.Status.Clusters.Selected != selected || s.Status.Clusters.Healthy != healthy {
		return fmt.Errorf("clusters %+v, want %d selected and %d healthy", s.Status.Clusters, selected, healthy)
	}
	return nil
}

func expectTarget(s *v1.Serving, cluster, reason string) error {
	for _, target := range s.Status.Targets {
		if target.Cluster == cluster {
			if len(target.Conditions) == 0 || target.Conditions[0].Reason != reason {
				return fmt.Errorf("target %s is %+v, want %s", cluster, target.Conditions, reason)
			}
			return nil
		}
	}
	return fmt.Errorf("no target %s", cluster)
}

// expectWorkload checks that the member runs podinfo in namespace, Ready, with the demo image
// pinned by digest.
func expectWorkload(t *testing.T, cluster, namespace string) {
	t.Helper()
	cs := member(t, cluster)
	eventually(t, settle, cluster+" runs podinfo in "+namespace, func(ctx context.Context) error {
		d, err := cs.AppsV1().Deployments(namespace).Get(ctx, serving, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := strings.TrimSuffix(demo.Image, ":"+demo.ChartVersion) + "@" + demo.ImageDigest
		if image := d.Spec.Template.Spec.Containers[0].Image; image != want {
			return fmt.Errorf("it runs %s, want the image pinned by digest, %s", image, want)
		}
		if d.Status.ReadyReplicas < 1 || d.Status.ReadyReplicas != d.Status.Replicas {
			return fmt.Errorf("%d of %d replicas are ready", d.Status.ReadyReplicas, d.Status.Replicas)
		}
		return nil
	})
}

// applications lists the names of Kokumi's Applications of the tenant's Serving that are not
// being deleted.
func applications(t *testing.T) []string {
	t.Helper()
	all, err := servingApplications(context.Background(), tenant, serving)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, app := range all {
		if app.GetDeletionTimestamp() == nil {
			out = append(out, app.GetName())
		}
	}
	return out
}

// servingApplications lists Kokumi's Applications of the Serving ns/name, those being deleted too.
func servingApplications(ctx context.Context, ns, name string) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("argoproj.io/v1alpha1")
	list.SetKind("ApplicationList")
	if err := hub.List(ctx, list, client.InNamespace(fleet.ArgoCDNamespace),
		client.MatchingLabels{argocd.LabelServing: name, argocd.LabelServingNamespace: ns}); err != nil {
		return nil, fmt.Errorf("list the Applications of Serving %s/%s: %w", ns, name, err)
	}
	return list.Items, nil
}

func setUnschedulable(t *testing.T, cluster string, unschedulable bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	if _, err := member(t, cluster).CoreV1().Nodes().Patch(context.Background(), sandbox.NodeName, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// kubectl runs kubectl against the hub, as the spec's commands do, and returns its output.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(assets.Kubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// Every member's simulated node keeps a Lease, as a kubelet does: without one the node
// lifecycle controller marks the node, and every Pod on it, NotReady within a minute, and
// KWOK never turns those Pods Ready again. The scenarios above take longer than that.
func TestMembersKeepTheirNodeLease(t *testing.T) {
	for _, m := range edgeMembers() {
		eventually(t, time.Minute, m.Name+"'s node lease is fresh", func(ctx context.Context) error {
			lease, err := member(t, m.Name).CoordinationV1().Leases("kube-node-lease").Get(ctx, sandbox.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if lease.Spec.RenewTime == nil || time.Since(lease.Spec.RenewTime.Time) > 40*time.Second {
				return fmt.Errorf("renewed at %v", lease.Spec.RenewTime)
			}
			return nil
		})
		node, err := member(t, m.Name).CoreV1().Nodes().Get(context.Background(), sandbox.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				t.Errorf("%s's node is not Ready: %s %s", m.Name, c.Reason, c.Message)
			}
		}
	}
}

// jobGateHolds rolls releases out in two waves, edge-1 first, with a verification Job of the
// canary that runs as on a real cluster: the hub's Job controller creates its Pod, the hub's
// scheduler places it on the hub's simulated node, and KWOK plays it. A Job of
// sandbox.JobFailImage fails there: the release runs healthily on edge-1, as Argo CD reports,
// but the Job fails, the roll-out halts, edge-2 and edge-3 keep the release that ran, whose
// signed deployment record stays as it was, and the failed release has no record at all. The
// next release's Job succeeds, and the release rolls through both waves with a verified record
// of the canary. Then the policy is removed.
func jobGateHolds(t *testing.T) {
	ctx := context.Background()
	const gate = "smoke-job"
	// What the failing Job's container says, as its args: the stage of sandbox.JobFailImage
	// makes them its termination message, which Kokumi reports.
	const said = "checkout answered 500 on /api/cart"
	policy := func(image string) string {
		return fmt.Sprintf(`{"spec":{"rollout":{"waves":[{"name":"canary","clusterSelector":{"matchLabels":{"ring":"canary"}},`+
			`"verify":[{"name":%q,"job":{"image":%q,"args":[%q],"timeout":"2m"}}]},{"name":"rest"}]}}}`, gate, image, said)
	}
	kubectl(t, "label", "cluster", "edge-1", "ring=canary", "--overwrite")
	kubectl(t, "patch", "-n", tenant, "environment", sandbox.DemoEnvironment, "--type=merge", "-p", policy(sandbox.JobFailImage))
	t.Cleanup(func() {
		kubectl(t, "patch", "-n", tenant, "environment", sandbox.DemoEnvironment, "--type=json", "-p", `[{"op":"remove","path":"/spec/rollout"}]`)
		kubectl(t, "label", "cluster", "edge-1", "ring-")
	})
	var before v1.Serving
	must(t, hub.Get(ctx, client.ObjectKey{Namespace: tenant, Name: serving}, &before))
	good, goodPrep := before.Status.Revision, before.Spec.PreparationName
	// The release that runs is Deployed with a signed record of the Environment.
	var goodRecord v1.DeploymentRecord
	eventually(t, time.Minute, "the running release's signed deployment record", func(ctx context.Context) error {
		r, err := deploymentRecord(ctx, goodPrep, "")
		if err != nil {
			return err
		}
		if r.Digest == "" {
			return fmt.Errorf("the record of %s names no signed envelope: %+v", goodPrep, r)
		}
		goodRecord = *r
		return nil
	})

	// A release whose canary runs healthily, and whose Job fails.
	kubectl(t, "patch", "-n", tenant, "product", sandbox.DemoProduct, "--type=merge",
		"-p", `{"spec":{"render":{"helm":{"values":{"ui":{"message":"A canary whose Job fails"}}}}}}`)
	reached := map[string]string{}
	watchRest := func() { secondWaveReached(t, good, reached, "edge-2", "edge-3") }
	s := waitServing(t, serving, "the Job gate failed and the roll-out halted", func(s *v1.Serving) error {
		watchRest()
		if s.Spec.PreparationName == goodPrep {
			return fmt.Errorf("the new release is not promoted yet")
		}
		if c := readyCondition(s); c == nil || c.Reason != v1.ReasonRolloutHalted {
			return fmt.Errorf("Ready %s", readyMessage(s))
		}
		return nil
	})
	failedPrep := s.Spec.PreparationName
	t.Logf("halted: %s", readyMessage(s))
	r := s.Status.Rollout
	if r == nil || len(r.Verifications) != 1 || r.Verifications[0].Kind != "job" || r.Verifications[0].Phase != v1.VerificationFailed ||
		!strings.Contains(r.Verifications[0].Message, said) || len(r.Waves) == 0 || r.Waves[0].Healthy != 1 {
		t.Errorf("status.rollout %+v", r)
	}
	if r != nil && len(r.Verifications) > 0 {
		t.Logf("%s: %s", gate, r.Verifications[0].Message)
	}
	// The real Job controller ended the Job: its Pod ran on the hub's simulated node and failed.
	expectJobRun(t, failedPrep, gate, false, said)
	for range 5 { // it stays halted
		time.Sleep(time.Second)
		watchRest()
	}
	if len(reached) != 0 {
		t.Errorf("the release whose Job gate failed reached the second wave: %v", reached)
	}
	must(t, hub.Get(ctx, client.ObjectKey{Namespace: tenant, Name: serving}, s))
	if c := readyCondition(s); s.Spec.PreparationName != failedPrep || c == nil || c.Reason != v1.ReasonRolloutHalted {
		t.Errorf("the roll-out of %s did not stay halted: %s at %s", failedPrep, readyMessage(s), s.Spec.PreparationName)
	}
	// The record of the release that ran is intact; the failed release has none, of no wave.
	if r, err := deploymentRecord(ctx, goodPrep, ""); err != nil {
		t.Error(err)
	} else if r.Digest != goodRecord.Digest || !r.Time.Equal(&goodRecord.Time) || r.Clusters != goodRecord.Clusters {
		t.Errorf("the record of %s changed: %+v, was %+v", goodPrep, r, goodRecord)
	}
	var prep v1.Preparation
	must(t, hub.Get(ctx, client.ObjectKey{Namespace: tenant, Name: failedPrep}, &prep))
	for _, rec := range prep.Status.DeploymentRecords {
		if rec.Environment == sandbox.DemoEnvironment {
			t.Errorf("the release whose Job gate failed has a record of %s: %+v", sandbox.DemoEnvironment, rec)
		}
	}

	// The next release's Job succeeds: it rolls through both waves, verified past the canary.
	kubectl(t, "patch", "-n", tenant, "environment", sandbox.DemoEnvironment, "--type=merge", "-p", policy("registry.example/smoke:1.4"))
	kubectl(t, "patch", "-n", tenant, "product", sandbox.DemoProduct, "--type=merge",
		"-p", `{"spec":{"render":{"helm":{"values":{"ui":{"message":"A canary whose Job passes"}}}}}}`)
	s = waitServing(t, serving, "the next release passed the Job gate and Deployed through both waves", func(s *v1.Serving) error {
		if s.Spec.PreparationName == goodPrep || s.Spec.PreparationName == failedPrep {
			return fmt.Errorf("the next release is not promoted yet")
		}
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3)
	})
	passedPrep := s.Spec.PreparationName
	if r := s.Status.Rollout; r == nil || len(r.Verifications) != 1 || r.Verifications[0].Phase != v1.VerificationPassed {
		t.Errorf("status.rollout %+v", r)
	}
	expectJobRun(t, passedPrep, gate, true, "")
	eventually(t, time.Minute, "the next release's verified record of the canary", func(ctx context.Context) error {
		r, err := deploymentRecord(ctx, passedPrep, "canary")
		if err != nil {
			return err
		}
		if !r.Verified || r.Digest == "" {
			return fmt.Errorf("the canary's record of %s is %+v, want a signed one that says verified", passedPrep, r)
		}
		return nil
	})
}

// deploymentRecord returns the record of the Environment (wave empty) or of a wave of it that a
// Preparation of the tenant lists.
func deploymentRecord(ctx context.Context, prep, wave string) (*v1.DeploymentRecord, error) {
	var p v1.Preparation
	if err := hub.Get(ctx, client.ObjectKey{Namespace: tenant, Name: prep}, &p); err != nil {
		return nil, err
	}
	for i, r := range p.Status.DeploymentRecords {
		if r.Environment == sandbox.DemoEnvironment && r.Wave == wave {
			return &p.Status.DeploymentRecords[i], nil
		}
	}
	return nil, fmt.Errorf("%s lists no record of %s (wave %q) among %+v", prep, sandbox.DemoEnvironment, wave, p.Status.DeploymentRecords)
}

// expectJobRun finds the Job of the verification gate of the Serving's Preparation prep, in
// whichever namespace it runs (by its labels, and the Preparation its environment names), and
// checks that the hub ran it as a cluster does: its Pod was scheduled to the hub's simulated
// node as the ServiceAccount the Job names, which exists there, and ended as the Job did, which
// the Job controller marked Complete, or Failed with the container's last words said.
func expectJobRun(t *testing.T, prep, gate string, passed bool, said string) {
	t.Helper()
	eventually(t, time.Minute, "the Job of "+gate+" of "+prep+" ran on the hub", func(ctx context.Context) error {
		var jobs batchv1.JobList
		if err := hub.List(ctx, &jobs, client.MatchingLabels{"delivery.kokumi.dev/serving": serving, "delivery.kokumi.dev/verification": gate}); err != nil {
			return err
		}
		var job *batchv1.Job
		for i := range jobs.Items {
			for _, e := range jobs.Items[i].Spec.Template.Spec.Containers[0].Env {
				if e.Name == "KOKUMI_PREPARATION" && e.Value == prep {
					job = &jobs.Items[i]
				}
			}
		}
		if job == nil {
			return fmt.Errorf("no Job of %s among the %d of the Serving", prep, len(jobs.Items))
		}
		want, phase := batchv1.JobFailed, corev1.PodFailed
		if passed {
			want, phase = batchv1.JobComplete, corev1.PodSucceeded
		}
		ended := false
		for _, c := range job.Status.Conditions {
			ended = ended || (c.Type == want && c.Status == corev1.ConditionTrue)
		}
		if !ended {
			return fmt.Errorf("Job %s/%s is not %s: %+v", job.Namespace, job.Name, want, job.Status)
		}
		var pods corev1.PodList
		if err := hub.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("Job %s/%s has %d Pods, want 1 (backoffLimit 0)", job.Namespace, job.Name, len(pods.Items))
		}
		pod := pods.Items[0]
		if pod.Spec.NodeName != sandbox.NodeName || pod.Status.Phase != phase {
			return fmt.Errorf("Pod %s is %s on node %q, want %s on %s", pod.Name, pod.Status.Phase, pod.Spec.NodeName, phase, sandbox.NodeName)
		}
		if said != "" {
			if cs := pod.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.Message != said {
				return fmt.Errorf("Pod %s's container ended as %+v, want it to have said %q", pod.Name, cs, said)
			}
		}
		sa := pod.Spec.ServiceAccountName
		if err := hub.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: sa}, &corev1.ServiceAccount{}); err != nil {
			return fmt.Errorf("the ServiceAccount %s/%s the Job runs as: %w", job.Namespace, sa, err)
		}
		return nil
	})
}
