// Package shard tests two controller replicas splitting the delivery objects by the label
// delivery.kokumi.dev/shard, as Flux's controllers split theirs: the main shard (no --shard)
// and shard b, both whole managers run as the controller's ServiceAccount against a real API
// server. Every Serving gets its Application, written by its own shard only.
package shard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocache"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	kshard "github.com/kokumi-dev/kokumi/internal/shard"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var env *harness.Env

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(m, &env)
}

// must is harness.Must: the test stops at an error.
var must = harness.Must

const servings = 100

// kokumiManagers are the Kokumi field managers of an object's managedFields (any subresource).
func kokumiManagers(o client.Object) map[string]bool {
	out := map[string]bool{}
	for _, f := range o.GetManagedFields() {
		if strings.HasPrefix(f.Manager, "kokumi") {
			out[f.Manager] = true
		}
	}
	return out
}

func TestTwoShardsSplitServingsAndWriteOnlyTheirOwn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sa, err := env.ControllerConfig(ctx)
	must(t, err)
	base := config.Config{Namespace: "kokumi-system", ArgoCDNamespace: "argocd", LocalProject: "kokumi-local",
		BundledRegistry: "127.0.0.1:1", ProbePeriod: 30 * time.Second, SyncRetry: argocd.DefaultSyncRetry, ApplicationWriters: 4}
	var dones []chan error
	var mainArgo *argocache.Cache
	for _, shard := range []string{kshard.Main, "b"} {
		cfg := base
		cfg.Shard = shard
		// Every reconciler of the shard, as `kokumi controller [--shard=b]` runs them, with the
		// shipped RBAC and leader election on (a lease per shard).
		// The main shard's cache of Argo CD's namespace, as its reconcilers read it.
		keep := func(_ ctrl.Manager, s controller.Shared) error {
			if shard == kshard.Main {
				mainArgo = s.ArgoCD
			}
			return nil
		}
		mgr, err := controller.NewManager(sa, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg,
			LeaderElection: true, LeaderElectionNamespace: harness.ControllerNamespace, Also: []controller.Setup{keep}})
		must(t, err)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		dones = append(dones, done)
	}
	t.Cleanup(func() {
		cancel()
		for _, d := range dones {
			if err := <-d; err != nil {
				t.Errorf("manager: %v", err)
			}
		}
	})

	// Shard by namespace: a pipeline's Servings stay in one shard.
	namespaces := map[string]string{"team-main": "", "team-b": "b"}
	p := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"sourceNamespaces": []any{"team-main", "team-b"}, "sourceRepos": []any{"*"},
		"destinations": []any{map[string]any{"server": v1.InClusterServer, "namespace": "*"}},
	}}}
	p.SetGroupVersionKind(argocd.AppProjectGVK)
	p.SetName(base.LocalProject)
	p.SetNamespace(base.ArgoCDNamespace)
	must(t, env.Client.Create(ctx, p))

	type key struct{ ns, name, shard string }
	var all []key
	for ns, shard := range namespaces {
		must(t, env.CreateNamespace(ctx, ns))
		labels := map[string]string{}
		if shard != "" {
			labels[kshard.Label] = shard
		}
		for i := range servings / 2 {
			name := fmt.Sprintf("app-%02d", i)
			digest := fmt.Sprintf("sha256:%064x", i+1)
			must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: v1.OrderSpec{
				ProductRef: v1.LocalObjectReference{Name: name}, EnvironmentRef: v1.LocalObjectReference{Name: v1.LocalEnvironmentName},
				Promotion: v1.Promotion{Mode: v1.PromotionManual},
			}}))
			must(t, env.Client.Create(ctx, &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: labels}, Spec: v1.PreparationSpec{
				OrderRef: v1.LocalObjectReference{Name: name}, ProductRef: v1.LocalObjectReference{Name: name},
				Source:          v1.PreparationSource{URL: "oci://ghcr.io/example/" + name, Version: "1.0.0", Digest: digest},
				TargetNamespace: name, Artifact: v1.Artifact{Ref: "oci://127.0.0.1:1/" + ns + "/" + name + "@" + digest, Digest: digest}, ConfigHash: "1",
			}}))
			must(t, env.Client.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: v1.ServingSpec{
				OrderRef: v1.LocalObjectReference{Name: name}, PreparationName: name + "-1", PromotedBy: env.AdminName,
			}}))
			all = append(all, key{ns, name, shard})
		}
	}

	want := func(shard string) string {
		if shard == "" {
			return kshard.FieldManager(kshard.Main)
		}
		return kshard.FieldManager(shard)
	}
	harness.Eventually(t, "every Serving has its Application, written by its own shard alone", 3*time.Minute, func() error {
		for _, k := range all {
			app := &unstructured.Unstructured{}
			app.SetGroupVersionKind(argocd.ApplicationGVK)
			name := fleet.ApplicationName(k.ns, k.name, argocd.InClusterName)
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: base.ArgoCDNamespace, Name: name}, app); err != nil {
				return fmt.Errorf("Serving %s/%s: %w", k.ns, k.name, err)
			}
			if m := kokumiManagers(app); len(m) != 1 || !m[want(k.shard)] {
				return fmt.Errorf("Application %s is managed by %v, want %s alone", name, m, want(k.shard))
			}
			if got := app.GetLabels()[kshard.Label]; got != k.shard {
				return fmt.Errorf("Application %s has shard label %q, want %q", name, got, k.shard)
			}
			var s v1.Serving
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: k.name}, &s); err != nil {
				return err
			}
			if s.Status.ObservedGeneration == 0 {
				return fmt.Errorf("Serving %s/%s has no status yet", k.ns, k.name)
			}
			if m := kokumiManagers(&s); len(m) != 1 || !m[want(k.shard)] {
				return fmt.Errorf("Serving %s/%s is written by %v, want %s alone", k.ns, k.name, m, want(k.shard))
			}
		}
		return nil
	})

	// Each shard holds its own lease.
	for _, id := range []string{"kokumi-controller.delivery.kokumi.dev", "kokumi-controller-b.delivery.kokumi.dev"} {
		var lease unstructured.Unstructured
		lease.SetAPIVersion("coordination.k8s.io/v1")
		lease.SetKind("Lease")
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: harness.ControllerNamespace, Name: id}, &lease))
	}

	// Someone else's Application under the name a Serving plans: never cached, never touched,
	// and the Serving says so.
	foreign := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"project": "other",
		"source":      map[string]any{"repoURL": "https://example.com/x", "path": "."},
		"destination": map[string]any{"server": v1.InClusterServer, "namespace": "x"}}}}
	foreign.SetGroupVersionKind(argocd.ApplicationGVK)
	foreign.SetNamespace(base.ArgoCDNamespace)
	foreign.SetName(fleet.ApplicationName("team-main", "taken", argocd.InClusterName))
	must(t, env.Client.Create(ctx, foreign))
	must(t, env.Client.Create(ctx, &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: "taken-1", Namespace: "team-main"}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: "taken"}, ProductRef: v1.LocalObjectReference{Name: "taken"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/example/taken", Version: "1.0.0", Digest: "sha256:" + strings.Repeat("a", 64)},
		TargetNamespace: "taken", Artifact: v1.Artifact{Ref: "oci://127.0.0.1:1/x@sha256:" + strings.Repeat("a", 64), Digest: "sha256:" + strings.Repeat("a", 64)}, ConfigHash: "1",
	}}))
	must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: "team-main"}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "taken"}, EnvironmentRef: v1.LocalObjectReference{Name: v1.LocalEnvironmentName},
		Promotion: v1.Promotion{Mode: v1.PromotionManual}}}))
	must(t, env.Client.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: "team-main"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "taken"}, PreparationName: "taken-1", PromotedBy: env.AdminName}}))
	harness.Eventually(t, "the Serving whose name is taken is held OptInRequired", time.Minute, func() error {
		var s v1.Serving
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "team-main", Name: "taken"}, &s); err != nil {
			return err
		}
		for _, tg := range s.Status.Targets {
			for _, c := range tg.Conditions {
				if c.Reason == v1.ReasonOptInRequired {
					return nil
				}
			}
		}
		return fmt.Errorf("targets %+v", s.Status.Targets)
	})
	argo := mainArgo
	cached := &unstructured.Unstructured{}
	cached.SetGroupVersionKind(argocd.ApplicationGVK)
	if err := argo.Cache.Get(ctx, client.ObjectKeyFromObject(foreign), cached); err == nil {
		t.Error("someone else's Application is in Kokumi's cache")
	}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), cached))
	if kokumiManagers(cached)["kokumi"] || cached.GetLabels()[argocd.LabelManagedBy] != "" {
		t.Errorf("someone else's Application was written: %v", cached.GetLabels())
	}

	// Kokumi's Applications still fold: Argo CD reports one of each shard healthy at its
	// revision (as Argo CD writes status, with resources and history), and its Serving is Deployed.
	for _, k := range []key{all[0], all[len(all)-1]} {
		app := &unstructured.Unstructured{}
		app.SetGroupVersionKind(argocd.ApplicationGVK)
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: base.ArgoCDNamespace, Name: fleet.ApplicationName(k.ns, k.name, argocd.InClusterName)}, app))
		rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
		resources := make([]any, 0, 200)
		for i := range 200 {
			resources = append(resources, map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": k.name, "name": fmt.Sprintf("c-%03d", i), "status": "Synced"})
		}
		app.Object["status"] = map[string]any{"sync": map[string]any{"status": argocd.SyncSynced, "revision": rev},
			"health": map[string]any{"status": argocd.HealthHealthy}, "resources": resources,
			"history": []any{map[string]any{"id": int64(0), "revision": rev, "deployedAt": "2025-06-01T12:00:00Z"}}}
		app.SetManagedFields(nil)
		must(t, env.Client.Update(ctx, app, client.FieldOwner("argocd-application-controller")))
		harness.Eventually(t, "Serving "+k.ns+"/"+k.name+" is Deployed", time.Minute, func() error {
			var s v1.Serving
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: k.name}, &s); err != nil {
				return err
			}
			if s.Status.Clusters.Healthy != 1 {
				return fmt.Errorf("clusters %+v", s.Status.Clusters)
			}
			return nil
		})
		// Argo CD's status survived Kokumi's writes.
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(app), app))
		if r, _, _ := unstructured.NestedSlice(app.Object, "status", "resources"); len(r) != 200 {
			t.Errorf("Application %s has %d status.resources after Kokumi's writes, want 200", app.GetName(), len(r))
		}
	}

	// Nothing either shard did touched the other's: a second look after a while finds the same.
	time.Sleep(5 * time.Second)
	for _, k := range all {
		var s v1.Serving
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: k.name}, &s))
		if m := kokumiManagers(&s); len(m) != 1 || !m[want(k.shard)] {
			t.Errorf("Serving %s/%s is written by %v, want %s alone", k.ns, k.name, m, want(k.shard))
		}
	}
	t.Logf("%d Servings: %d in the main shard, %d in shard b, each Application and Serving written by its own shard alone", len(all), servings/2, servings/2)
}
