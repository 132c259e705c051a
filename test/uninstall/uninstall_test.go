// Package uninstall runs the uninstall steps of docs/install.md, as written, against a running
// Kokumi with a deployment and a registered cluster, and checks that nothing hangs and nothing
// of Kokumi's is left in Argo CD's namespace.
package uninstall

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var env *harness.Env

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(m, &env)
}

// must is harness.Must: the test stops at an error.
var must = harness.Must

// eventually is harness.Eventually.
var eventually = harness.Eventually

// uninstallCommands are the commands of the block docs/install.md marks as tested here.
func uninstallCommands(t *testing.T) [][]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(file), "..", "..", "docs", "install.md"))
	must(t, err)
	defer func() { _ = f.Close() }()
	var cmds [][]string
	state := 0 // 0: before the marker, 1: before the block, 2: in it
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case state == 0 && strings.HasPrefix(line, "<!-- uninstall: tested by test/uninstall"):
			state = 1
		case state == 1 && line == "```sh":
			state = 2
		case state == 2 && line == "```":
			return cmds
		case state == 2 && line != "":
			fields := strings.Fields(line)
			if fields[0] != "kubectl" {
				t.Fatalf("docs/install.md's uninstall block runs %q: only kubectl commands are tested", line)
			}
			cmds = append(cmds, fields[1:])
		}
	}
	must(t, sc.Err())
	t.Fatal("docs/install.md has no uninstall block marked for test/uninstall")
	return nil
}

func TestTheDocumentedUninstallRemovesEverythingWithoutHanging(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := config.Config{Namespace: "kokumi-system", ArgoCDNamespace: "argocd", LocalProject: "kokumi-local",
		ProbePeriod: 30 * time.Second, SyncRetry: argocd.DefaultSyncRetry, ApplicationWriters: 4,
		UnreachableClusterDeletion: 10 * time.Minute}
	registry, err := registry.Start("127.0.0.1:0", t.TempDir(), false)
	must(t, err)
	t.Cleanup(func() { _ = registry.Stop() })
	sa, err := env.ControllerConfig(ctx)
	must(t, err)
	mgr, err := controller.NewManager(sa, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg})
	must(t, err)
	harness.StartManager(t, mgr)

	// A deployment to the hub (the Environment local) and a registered member cluster.
	ns := "team-leaving"
	must(t, env.CreateNamespace(ctx, ns))
	p := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"sourceNamespaces": []any{ns}, "sourceRepos": []any{"*"},
		"destinations": []any{map[string]any{"server": v1.InClusterServer, "namespace": "*"}},
	}}}
	p.SetGroupVersionKind(argocd.AppProjectGVK)
	p.SetName(cfg.LocalProject)
	p.SetNamespace(cfg.ArgoCDNamespace)
	must(t, env.Client.Create(ctx, p))
	repository := registry.Addr + "/" + ns + "/podinfo"
	digest, err := (&oci.Client{}).PushArtifact(ctx, repository, []byte("podinfo"), nil)
	must(t, err)
	must(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "member-1", Namespace: cfg.Namespace},
		Data: map[string][]byte{"token": []byte("t0ken")}}))
	must(t, env.Client.Create(ctx, &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "member-1", Labels: map[string]string{"tier": "leaving"}},
		Spec:       v1.ClusterSpec{Server: "https://member-1.example:6443", CredentialsRef: v1.LocalObjectReference{Name: "member-1"}},
	}))
	must(t, env.Client.Create(ctx, &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns},
		Spec:       v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "leaving"}}, Project: cfg.LocalProject},
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
	must(t, env.Client.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo"}, PreparationName: "podinfo-1", PromotedBy: env.AdminName,
	}}))

	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	appKey := client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: fleet.ApplicationName(ns, "podinfo", argocd.InClusterName)}
	eventually(t, "the Serving writes its Application", time.Minute, func() error { return env.Client.Get(ctx, appKey, app) })
	kokumisSecrets := func() ([]string, error) {
		var list corev1.SecretList
		if err := env.Client.List(ctx, &list, client.InNamespace(cfg.ArgoCDNamespace), client.MatchingLabels{argocd.LabelManagedBy: argocd.ManagedByKokumi, argocd.LabelSecretType: argocd.SecretTypeCluster}); err != nil {
			return nil, err
		}
		var names []string
		for _, s := range list.Items {
			names = append(names, s.Name)
		}
		return names, nil
	}
	eventually(t, "the Cluster's Argo CD cluster Secret", time.Minute, func() error {
		names, err := kokumisSecrets()
		if err == nil && len(names) == 0 {
			err = fmt.Errorf("none yet")
		}
		return err
	})
	for _, obj := range []client.Object{&v1.Serving{}, &v1.Cluster{}} {
		key := client.ObjectKey{Namespace: ns, Name: "podinfo"}
		if _, ok := obj.(*v1.Cluster); ok {
			key = client.ObjectKey{Name: "member-1"}
		}
		eventually(t, "the finalizer of "+key.String(), time.Minute, func() error {
			if err := env.Client.Get(ctx, key, obj); err != nil {
				return err
			}
			if len(obj.GetFinalizers()) == 0 {
				return fmt.Errorf("no finalizer yet")
			}
			return nil
		})
	}

	// The documented steps, as written, each within a minute.
	for _, args := range uninstallCommands(t) {
		stepCtx, stepCancel := context.WithTimeout(ctx, time.Minute)
		start := time.Now()
		out, err := env.Kubectl(stepCtx, args...)
		stepCancel()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("kubectl %s: %s (%.1f s)", strings.Join(args, " "), strings.TrimSpace(out), time.Since(start).Seconds())
	}

	// Nothing of Kokumi's kinds is left, nor of Kokumi's in Argo CD's namespace.
	for _, list := range []client.ObjectList{&v1.OrderList{}, &v1.ServingList{}, &v1.PreparationList{}, &v1.ClusterList{}, &v1.EnvironmentList{}, &v1.ProductList{}} {
		must(t, env.Client.List(ctx, list))
		if n := apimeta.LenList(list); n != 0 {
			t.Errorf("%T still has %d items after the uninstall steps", list, n)
		}
	}
	if err := env.Client.Get(ctx, appKey, app); err == nil {
		t.Errorf("the Application %s is left", appKey)
	}
	if names, err := kokumisSecrets(); err != nil || len(names) != 0 {
		t.Errorf("Kokumi's cluster Secrets are left in Argo CD's namespace: %v %v", names, err)
	}
}
