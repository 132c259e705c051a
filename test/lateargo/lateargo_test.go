// Package lateargo tests Kokumi started before Argo CD is installed: the whole controller
// manager starts, Servings and Environments say ArgoCDNotInstalled, and once Argo CD's CRDs
// appear Kokumi begins watching them and deploys, with no restart.
package lateargo

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/render/isolate"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocache"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var (
	env *harness.Env
	cfg = config.Config{Namespace: "kokumi-system", ArgoCDNamespace: "argocd", LocalProject: "kokumi-local",
		ProbePeriod: 30 * time.Second, SyncRetry: argocd.DefaultSyncRetry, ApplicationWriters: 4}
)

func TestMain(m *testing.M) {
	isolate.MainIfChild() // a render the Order reconciler started: the test binary is its child
	harness.QuietLogs()
	e, err := harness.StartWithoutArgoCD()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start test control plane:", err)
		os.Exit(1)
	}
	env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop test control plane:", err)
	}
	os.Exit(code)
}

// must is harness.Must: the test stops at an error.
var must = harness.Must

// eventually is harness.Eventually.
var eventually = harness.Eventually

func readyReason(obj client.Object, conditions func() []metav1.Condition, want string) func() error {
	return func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(conditions(), v1.ConditionReady)
		if c == nil || c.Reason != want {
			return fmt.Errorf("Ready is %+v, want reason %s", c, want)
		}
		return nil
	}
}

func TestKokumiStartsBeforeArgoCDAndBeginsWatchingWhenItArrives(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	argocache.PollInterval = 500 * time.Millisecond

	dir := t.TempDir()
	registry, err := registry.Start("127.0.0.1:0", dir, false)
	must(t, err)
	t.Cleanup(func() { _ = registry.Stop() })
	sa, err := env.ControllerConfig(ctx)
	must(t, err)
	// Every reconciler, as `kokumi controller` runs them, with the shipped RBAC.
	mgr, err := controller.NewManager(sa, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg})
	must(t, err)
	harness.StartManager(t, mgr)

	ns := "team-late"
	must(t, env.CreateNamespace(ctx, ns))
	repository := registry.Addr + "/" + ns + "/podinfo"
	digest, err := (&oci.Client{}).PushArtifact(ctx, repository, []byte("podinfo"), nil)
	must(t, err)
	must(t, env.Client.Create(ctx, &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns},
		Spec:       v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "late"}}, Project: "late"},
	}))
	must(t, env.Client.Create(ctx, &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "late-1", Labels: map[string]string{"tier": "late"}},
		Spec:       v1.ClusterSpec{Server: "https://late-1.example:6443", CredentialsRef: v1.LocalObjectReference{Name: "late-1"}},
	}))
	must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: v1.LocalEnvironmentName},
		Promotion: v1.Promotion{Mode: v1.PromotionManual},
	}}))
	must(t, env.Client.Create(ctx, &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-1", Namespace: ns}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo"}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: digest},
		TargetNamespace: "podinfo", Artifact: v1.Artifact{Ref: "oci://" + repository + "@" + digest, Digest: digest}, ConfigHash: "1",
	}}))
	serving := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo"}, PreparationName: "podinfo-1", PromotedBy: env.AdminName,
	}}
	must(t, env.Client.Create(ctx, serving))
	environment := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns}}

	// Before Argo CD: the manager runs, and both kinds say what is missing.
	eventually(t, "the Serving says ArgoCDNotInstalled", time.Minute,
		readyReason(serving, func() []metav1.Condition { return serving.Status.Conditions }, v1.ReasonArgoCDNotInstalled))
	eventually(t, "the Environment says ArgoCDNotInstalled", time.Minute,
		readyReason(environment, func() []metav1.Condition { return environment.Status.Conditions }, v1.ReasonArgoCDNotInstalled))

	// Argo CD arrives. Neither kind polls for it (nor is anything else changing): only the
	// watches Kokumi begins when the CRDs appear can move them on.
	must(t, env.InstallArgoCDCRDs())
	eventually(t, "the Serving sees Argo CD, and not the AppProject of local", 30*time.Second,
		readyReason(serving, func() []metav1.Condition { return serving.Status.Conditions }, v1.ReasonProjectNotFound))
	eventually(t, "the Environment sees Argo CD, and not its AppProject", 30*time.Second,
		readyReason(environment, func() []metav1.Condition { return environment.Status.Conditions }, v1.ReasonProjectNotFound))

	// The AppProjects appear: the AppProject watches, begun late, bring both on.
	for _, name := range []string{cfg.LocalProject, "late"} {
		p := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
			"sourceNamespaces": []any{ns}, "sourceRepos": []any{"*"},
			"destinations": []any{map[string]any{"server": v1.InClusterServer, "namespace": "*"}},
		}}}
		p.SetGroupVersionKind(argocd.AppProjectGVK)
		p.SetName(name)
		p.SetNamespace(cfg.ArgoCDNamespace)
		must(t, env.Client.Create(ctx, p))
	}
	eventually(t, "the Environment finds its AppProject", 30*time.Second,
		readyReason(environment, func() []metav1.Condition { return environment.Status.Conditions }, v1.ReasonEnvironmentReady))
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	key := client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: fleet.ApplicationName(ns, "podinfo", argocd.InClusterName)}
	eventually(t, "the Serving writes its Application", 30*time.Second, func() error { return env.Client.Get(ctx, key, app) })
	if got, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision"); got != digest {
		t.Errorf("the Application deploys %q, want %s", got, digest)
	}

	// Argo CD reports it synced and healthy: the Application watch, begun late, folds it in.
	app.Object["status"] = map[string]any{
		"sync":   map[string]any{"status": "Synced", "revision": digest},
		"health": map[string]any{"status": "Healthy"},
	}
	must(t, env.Client.Update(ctx, app))
	eventually(t, "the Serving Deployed", 30*time.Second, func() error {
		err := readyReason(serving, func() []metav1.Condition { return serving.Status.Conditions }, v1.ReasonDeployed)()
		if err == nil && !strings.Contains(apimeta.FindStatusCondition(serving.Status.Conditions, v1.ConditionReady).Message, "podinfo-1") {
			return fmt.Errorf("Deployed without naming the Preparation")
		}
		return err
	})
}
