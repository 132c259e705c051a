// Package serving tests the Serving reconciler against a real API server with Argo CD's real
// CRDs; the tests play Argo CD by writing the Applications' status.
package serving

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/argocache"
	ociregistry "github.com/kokumi-dev/kokumi/internal/oci/registry"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var (
	env *harness.Env
	mgr ctrl.Manager
	// argo is the manager's cache of Argo CD's namespace, which the Serving reconciler reads.
	argo *argocache.Cache
	// A roll-out writes at most 50 Applications a reconcile: the tests of more clusters roll out
	// in slices (progress_test.go). A cluster out of sync after Argo CD deployed it is Drifted
	// after 3 s (clusterdrift_test.go).
	//
	// The gates' endpoints and the webhooks listen on 127.0.0.1, which the egress policy allows
	// here (and only that address: attackers_test.go).
	cfg = config.Config{ArgoCDNamespace: "argocd", LocalProject: "kokumi-local", Namespace: "kokumi-system", SyncRetry: argocd.DefaultSyncRetry,
		ApplicationWriteSlice: 50, DriftAfter: 3 * time.Second, VerifyAllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	// registry holds the Preparations' deployment records.
	registry *ociregistry.Registry
	// registryCreds are the bundled registry's credentials, in their Secret of Kokumi's namespace.
	registryCreds oci.RegistryCredentials
	// faults, when harness.EnvFaults is set, fails that share of the controller's API requests;
	// the tests' own client stays clean.
	faults *harness.Faults
)

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(runWithManager{m}, &env)
}

// runWithManager runs the Serving reconciler in a manager around the tests.
type runWithManager struct{ m *testing.M }

func (r runWithManager) Run() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := env.CreateNamespaces(ctx, cfg.ArgoCDNamespace, cfg.Namespace); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "kokumi-records-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if registry, err = ociregistry.Start("127.0.0.1:0", dir, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = registry.Stop() }()
	// It plays the bundled registry too (moved_test.go), with the credentials the controller
	// makes at start (the keeper does not run here).
	cfg.BundledRegistry = registry.Addr
	if registryCreds, err = oci.GenerateRegistryCredentials(); err == nil {
		err = env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: oci.RegistryCredentialsSecret}, Data: registryCreds.Data()})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The reconciler runs as the controller's ServiceAccount with the shipped RBAC: a verb the
	// install does not grant fails the tests.
	sa, err := env.ControllerConfig(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if faults, err = harness.FaultsFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if faults != nil {
		sa = faults.Config(sa)
	}
	keepArgo := func(_ ctrl.Manager, s controller.Shared) error { argo = s.ArgoCD; return nil }
	mgr, err = controller.NewManager(sa, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg}, controller.Serving.Setup, keepArgo)
	// NewManager tries again after a failed discovery request, as under faults.
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := harness.RunWithManager(ctx, mgr, r.m.Run)
	if faults != nil {
		fmt.Fprintf(os.Stderr, "API faults, seed %d: %v\n", faults.Seed, faults.Counts())
	}
	return code
}

// fixture is one namespace with an Environment, its AppProject, Clusters, an Order, a
// Preparation and a Serving.
type fixture struct {
	t       testing.TB
	ctx     context.Context
	ns      string
	project string
	tier    string
}

var fixtures int

func newFixture(t testing.TB) *fixture {
	t.Helper()
	fixtures++
	f := &fixture{t: t, ctx: context.Background(), ns: fmt.Sprintf("team-%d", fixtures), tier: fmt.Sprintf("tier-%d", fixtures)}
	f.project = "proj-" + f.ns
	must(t, env.CreateNamespace(f.ctx, f.ns))
	f.createProject(f.project, []any{f.ns}, []any{map[string]any{"server": "*", "namespace": "*"}})
	must(t, env.Client.Create(f.ctx, &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: f.ns},
		Spec:       v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": f.tier}}, Project: f.project},
	}))
	return f
}

// must is harness.Must: the test stops at an error.
var must = harness.Must

func (f *fixture) createProject(name string, sourceNamespaces, destinations []any) {
	p := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"sourceNamespaces": sourceNamespaces, "destinations": destinations, "sourceRepos": []any{"*"},
	}}}
	p.SetGroupVersionKind(argocd.AppProjectGVK)
	p.SetName(name)
	p.SetNamespace(cfg.ArgoCDNamespace)
	must(f.t, env.Client.Create(f.ctx, p))
}

// cluster registers a Cluster of the fixture's tier and sets its Ready condition.
func (f *fixture) cluster(name string, ready bool) *v1.Cluster {
	f.t.Helper()
	return f.clusterAt(name, "https://"+name+".example:6443", ready)
}

func (f *fixture) clusterAt(name, server string, ready bool) *v1.Cluster {
	f.t.Helper()
	c, err := f.tryCluster(name, server, ready)
	must(f.t, err)
	return c
}

// tryCluster is clusterAt, which fails no test: manyClusters calls it from goroutines of its own.
func (f *fixture) tryCluster(name, server string, ready bool) (*v1.Cluster, error) {
	c := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tier": f.tier}},
		Spec:       v1.ClusterSpec{Server: server, CredentialsRef: v1.LocalObjectReference{Name: name}},
	}
	if err := f.createCluster(c); err != nil {
		return nil, err
	}
	return c, f.trySetReady(c, ready)
}

// createCluster creates c, and deletes it when the test ends: Clusters have no namespace, and a
// test run again in the same API server (go test -count=2) registers them again by name.
func (f *fixture) createCluster(c *v1.Cluster) error {
	if err := env.Client.Create(f.ctx, c); err != nil {
		return fmt.Errorf("create Cluster %s: %w", c.Name, err)
	}
	f.t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: c.Name}})
	})
	return nil
}

func (f *fixture) setReady(c *v1.Cluster, ready bool) {
	f.t.Helper()
	must(f.t, f.trySetReady(c, ready))
}

// trySetReady is setReady, which fails no test.
func (f *fixture) trySetReady(c *v1.Cluster, ready bool) error {
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(c), c); err != nil {
		return err
	}
	cond := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonConnected, Message: "v1.37.2"}
	if !ready {
		cond = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonUnreachable, Message: "dial tcp: connection refused"}
	}
	apimeta.SetStatusCondition(&c.Status.Conditions, cond)
	return env.Client.Status().Update(f.ctx, c)
}

func digestOf(s string) string {
	return "sha256:" + fmt.Sprintf("%064x", []byte(s))[:64]
}

// preparation creates a Preparation of the Order podinfo-edge rendered into targetNamespace.
func (f *fixture) preparation(name, targetNamespace string, vendored bool) *v1.Preparation {
	f.t.Helper()
	// A real artifact in the registry: deployment records are attached to it.
	repository := registry.Addr + "/" + f.ns + "/podinfo-edge"
	d, err := (&oci.Client{}).PushArtifact(f.ctx, repository, []byte(name), nil)
	must(f.t, err)
	p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo-edge"}, ProductRef: v1.LocalObjectReference{Name: "podinfo-fleet"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: digestOf("chart")},
		TargetNamespace: targetNamespace, ImagesInBundledRegistry: vendored,
		Artifact:   v1.Artifact{Ref: "oci://" + repository + "@" + d, Digest: d},
		ConfigHash: name,
	}}
	must(f.t, env.Client.Create(f.ctx, p))
	return p
}

// order creates the Order podinfo-edge to environment and its Serving of preparation.
func (f *fixture) order(environment, preparation string) *v1.Serving {
	f.t.Helper()
	must(f.t, env.Client.Create(f.ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-edge", Namespace: f.ns}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo-fleet"}, EnvironmentRef: v1.LocalObjectReference{Name: environment},
	}}))
	s := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-edge", Namespace: f.ns}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo-edge"}, PreparationName: preparation, PromotedBy: env.AdminName,
	}}
	must(f.t, env.Client.Create(f.ctx, s))
	return s
}

func (f *fixture) appName(cluster string) string {
	return fleet.ApplicationName(f.ns, "podinfo-edge", cluster)
}

func (f *fixture) app(cluster string) (*unstructured.Unstructured, error) {
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argocd.ApplicationGVK)
	err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: f.appName(cluster)}, app)
	return app, err
}

// apps lists the Serving's Applications by the labels the spec's kubectl command uses.
func (f *fixture) apps() []unstructured.Unstructured {
	f.t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	must(f.t, env.Client.List(f.ctx, list, client.InNamespace(cfg.ArgoCDNamespace),
		client.MatchingLabels{argocd.LabelServing: "podinfo-edge", argocd.LabelServingNamespace: f.ns}))
	return list.Items
}

// playArgoCD writes the status Argo CD would write on cluster's Application.
func (f *fixture) playArgoCD(cluster, sync, health, revision string, conditions ...map[string]any) {
	f.t.Helper()
	f.eventually("Application of "+cluster+" exists", func() error { _, err := f.app(cluster); return err })
	for {
		app, err := f.app(cluster)
		must(f.t, err)
		status := map[string]any{
			"sync":   map[string]any{"status": sync, "revision": revision},
			"health": map[string]any{"status": health},
		}
		if len(conditions) > 0 {
			list := make([]any, len(conditions))
			for i, c := range conditions {
				list[i] = c
			}
			status["conditions"] = list
		}
		app.Object["status"] = status
		err = env.Client.Update(f.ctx, app)
		if apierrors.IsConflict(err) {
			continue
		}
		must(f.t, err)
		return
	}
}

func (f *fixture) healthy(revision string, clusters ...string) {
	f.t.Helper()
	for _, c := range clusters {
		f.playArgoCD(c, "Synced", "Healthy", revision)
	}
}

func (f *fixture) serving() *v1.Serving {
	f.t.Helper()
	var s v1.Serving
	must(f.t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "podinfo-edge"}, &s))
	return &s
}

// promote points the Serving at a Preparation, as a person would, again on a conflict with
// the controller's own writes.
func (f *fixture) promote(preparation string) {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := f.serving()
		s.Spec.PreparationName, s.Spec.PromotedBy = preparation, env.AdminName
		return env.Client.Update(f.ctx, s)
	}))
}

// settled waits until the manager's cache holds the Serving as the API server does, so that a
// reconcile reading the cache sees the last status written.
func (f *fixture) settled() {
	f.t.Helper()
	f.eventually("the cache holds the latest Serving", func() error {
		var cached v1.Serving
		if err := mgr.GetCache().Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "podinfo-edge"}, &cached); err != nil {
			return err
		}
		if live := f.serving(); cached.ResourceVersion != live.ResourceVersion {
			return fmt.Errorf("cache at %s, API server at %s", cached.ResourceVersion, live.ResourceVersion)
		}
		return nil
	})
}

// eventually polls check until it passes, for up to 90 seconds (a loaded CI machine is slow),
// longer when the controller's requests fail.
func (f *fixture) eventually(what string, check func() error) {
	f.t.Helper()
	deadline := time.Now().Add(faults.Patience(90 * time.Second))
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready waits for the Serving's Ready condition to have reason, and a message containing msg.
func (f *fixture) ready(reason, msg string) *v1.Serving {
	f.t.Helper()
	var s *v1.Serving
	f.eventually("Serving Ready "+reason, func() error {
		s = f.serving()
		c := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
		if c == nil || c.Reason != reason || !strings.Contains(c.Message, msg) || s.Status.ObservedGeneration != s.Generation {
			return fmt.Errorf("Ready is %+v, want reason %s with %q", c, reason, msg)
		}
		return nil
	})
	return s
}

func (f *fixture) target(s *v1.Serving, cluster string) *v1.Target {
	for i := range s.Status.Targets {
		if s.Status.Targets[i].Cluster == cluster {
			return &s.Status.Targets[i]
		}
	}
	return nil
}

// expectEvents checks the Events of reason on the Serving: one for each of want (a substring
// of its message), and no other. Events are written apart from the reconcile and retried, so it
// polls. Under injected API faults Events may be lost without the controller being at fault:
// client-go drops an Event the API server refuses with an error status, and a create whose
// answer was lost records none; so there, after waiting for client-go's retries, it accepts
// some of want missing, never one twice nor an Event that is not wanted.
func (f *fixture) expectEvents(reason string, want ...string) {
	f.t.Helper()
	check := func() (missing []string, err error) {
		got := f.events(reason)
		for _, w := range want {
			n := 0
			for _, m := range got {
				if strings.Contains(m, w) {
					n++
				}
			}
			switch {
			case n == 0:
				missing = append(missing, w)
			case n > 1:
				return nil, fmt.Errorf("%d %s Events with %q, want one: %q", n, reason, w, got)
			}
		}
		if len(got) != len(want)-len(missing) {
			return nil, fmt.Errorf("%s Events %q, want one for each of %q", reason, got, want)
		}
		return missing, nil
	}
	wait := 90 * time.Second
	if faults != nil {
		// client-go tries an Event that failed in transit again after 10 to 12.5 s: twice.
		wait = 30 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		missing, err := check()
		if err != nil {
			f.t.Fatal(err)
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if faults != nil {
				f.t.Logf("%s Events lost to injected API faults: %q", reason, missing)
				return
			}
			f.t.Fatalf("no %s Event with %q", reason, missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// events lists the messages of the events of reason on the Serving.
func (f *fixture) events(reason string) []string {
	f.t.Helper()
	var list corev1.EventList
	must(f.t, env.Client.List(f.ctx, &list, client.InNamespace(f.ns)))
	var out []string
	for _, e := range list.Items {
		if e.Reason == reason && e.InvolvedObject.Name == "podinfo-edge" {
			out = append(out, e.Message)
		}
	}
	return out
}
