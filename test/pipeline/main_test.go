// Package pipeline tests promotion pipelines and deployment records against a real API server
// with Argo CD's real CRDs and a real registry on loopback: Orders render, Servings deploy (the
// tests play Argo CD), records are signed and attached, and the stages gate promotion. A fake
// clock drives the soaks.
package pipeline

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
	"github.com/kokumi-dev/kokumi/internal/controller/order"
	"github.com/kokumi-dev/kokumi/internal/controller/serving"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/stages"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var (
	env     *harness.Env
	bundled *registry.Registry
	cfg     config.Config
	clock   = &fakeClock{}
	// pipeline is the tests' own view of the pipeline, with the same clock and keys.
	pipeline *stages.Pipeline
	// blocker fails the controller's writes of the status of the Servings a test names.
	blocker = &statusWrites{}
)

// waitTimeout bounds every wait: generous, for a loaded machine.
const waitTimeout = 90 * time.Second

// fakeClock is the real time plus an offset the tests move forward.
type fakeClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(suite{m}, &env)
}

type suite struct{ m *testing.M }

// Run starts the bundled registry and a manager with the Order, Serving and Environment
// reconcilers, all on the fake clock.
func (s suite) Run() int {
	dir, err := os.MkdirTemp("", "kokumi-bundled-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bundled, err = registry.Start("127.0.0.1:0", dir, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = bundled.Stop() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg = config.Default()
	cfg.BundledRegistry, cfg.ArgoCDNamespace = bundled.Addr, "argocd"
	if err := env.CreateNamespaces(ctx, cfg.ArgoCDNamespace, cfg.Namespace); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pipeline = newPipeline(env.Client, env.Client)
	// The reconcilers run as the controller's ServiceAccount with the shipped RBAC: a verb the
	// install does not grant fails the tests.
	sa, err := env.ControllerConfig(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sa.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		blocker.next = rt
		return blocker
	})
	mgr, err := controller.NewManager(sa, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg},
		setupOrder, setupServing, controller.Environment.Setup)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return harness.RunWithManager(ctx, mgr, s.m.Run)
}

func newPipeline(c client.Client, reader client.Reader) *stages.Pipeline {
	p := stages.NewPipeline(c, reader, cfg)
	p.Now = clock.Now
	return p
}

func setupOrder(mgr ctrl.Manager, _ controller.Shared) error {
	r := &order.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("kokumi-order"),
		Config: cfg, RetryAfter: 2 * time.Second, Resync: 2 * time.Second, Gate: newPipeline(mgr.GetClient(), mgr.GetAPIReader()).Gate}
	return r.SetupWithManager(mgr)
}

func setupServing(mgr ctrl.Manager, shared controller.Shared) error {
	p := newPipeline(mgr.GetClient(), mgr.GetAPIReader())
	r := &serving.Reconciler{Client: mgr.GetClient(), Config: shared.Config, ArgoCD: shared.ArgoCD, Recorder: mgr.GetEventRecorder("kokumi-serving"),
		Now: clock.Now, Pipeline: p, Records: p.Records, Keys: p.Keys.(*record.Keys)}
	return r.SetupWithManager(mgr)
}

// source is a registry on loopback with the podinfo-like chart and its images, shared by the
// tests.
var (
	sourceOnce sync.Once
	chartURL   string
	imageRepo  string
	initImage  string
)

func source(t *testing.T) {
	sourceOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kokumi-source-") // outlives the first test; the suite shares it
		if err != nil {
			t.Fatal(err)
		}
		reg, err := registry.Start("127.0.0.1:0", dir, false)
		if err != nil {
			t.Fatal(err)
		}
		imageRepo = ocitest.Repo(reg, "stefanprodan/podinfo")
		ocitest.PushImage(t, imageRepo+":6.14.1", 1)
		ocitest.PushImage(t, imageRepo+":6.15.0", 1)
		initImage = ocitest.Repo(reg, "library/busybox:1.37")
		ocitest.PushImage(t, initImage, 1)
		chartURL = "oci://" + ocitest.Repo(reg, "charts/podinfo")
		ocitest.PushChart(t, oci.TrimScheme(chartURL), "6.14.1", "podinfo", "6.14.1", ocitest.PodinfoChart(t))
	})
	if chartURL == "" {
		t.Fatal("the source registry did not start")
	}
}

// fixture is one namespace with the Environments staging (one cluster) and prod (two clusters)
// requiring staging, an AppProject admitting the namespace, and a Product per stage.
type fixture struct {
	t   *testing.T
	ctx context.Context
	ns  string
}

var fixtures int

func newFixture(t *testing.T, soak time.Duration) *fixture {
	t.Helper()
	source(t)
	fixtures++
	f := &fixture{t: t, ctx: context.Background(), ns: fmt.Sprintf("pipeline-%d", fixtures)}
	must(t, env.CreateNamespace(f.ctx, f.ns))
	project := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"sourceNamespaces": []any{f.ns}, "destinations": []any{map[string]any{"server": "*", "namespace": "*"}}, "sourceRepos": []any{"*"},
	}}}
	project.SetGroupVersionKind(argocd.AppProjectGVK)
	project.SetName("proj-" + f.ns)
	project.SetNamespace(cfg.ArgoCDNamespace)
	must(t, env.Client.Create(f.ctx, project))
	f.cluster("staging-1", "staging")
	f.cluster("prod-1", "prod")
	f.cluster("prod-2", "prod")
	f.environment("staging", nil)
	f.environment("prod", []v1.StageRequirement{{Environment: "staging", Soak: &metav1.Duration{Duration: soak}}})
	f.product("podinfo-staging", "6.14.1")
	f.product("podinfo-prod", "6.14.1")
	return f
}

// must is harness.Must: the test stops at an error.
var must = harness.Must

func (f *fixture) clusterName(name string) string { return f.ns + "-" + name }

func (f *fixture) cluster(name, tier string) {
	c := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: f.clusterName(name), Labels: map[string]string{"tier": f.ns + "-" + tier}},
		Spec:       v1.ClusterSpec{Server: "https://" + f.clusterName(name) + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: name}},
	}
	must(f.t, env.Client.Create(f.ctx, c))
	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonConnected, Message: "v1.37.2"})
	must(f.t, env.Client.Status().Update(f.ctx, c))
}

func (f *fixture) environment(name string, requires []v1.StageRequirement) {
	must(f.t, env.Client.Create(f.ctx, &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": f.ns + "-" + name}},
			Project: "proj-" + f.ns, Requires: requires},
	}))
}

func (f *fixture) product(name, tag string) { f.productWith(name, tag, "") }

// productWith creates or updates the Product with the image tag and more values, such as
// `"replicaCount":0` (JSON members, without braces).
func (f *fixture) productWith(name, tag, more string) {
	values := fmt.Sprintf(`{"image":{"repository":%q,"tag":%q},"initImage":%q}`, imageRepo, tag, initImage)
	if more != "" {
		values = strings.TrimSuffix(values, "}") + "," + more + "}"
	}
	p := &v1.Product{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(p), p); apierrors.IsNotFound(err) {
			p.Spec = productSpec(values)
			return env.Client.Create(f.ctx, p)
		} else if err != nil {
			return err
		}
		p.Spec = productSpec(values)
		return env.Client.Update(f.ctx, p)
	})
	must(f.t, err)
}

func productSpec(values string) v1.ProductSpec {
	return v1.ProductSpec{
		Source: v1.ProductSource{URL: chartURL, Version: "6.14.1"}, TargetNamespace: "podinfo",
		Render: &v1.RenderSpec{Helm: &v1.HelmRender{Values: &apiextensionsv1.JSON{Raw: []byte(values)}}},
		Images: v1.ImageSpec{Policy: v1.ImagePolicyPin},
	}
}

// order creates the Order app-<environment> of the Product podinfo-<environment>.
func (f *fixture) order(environment string, mode v1.PromotionMode) {
	name := "app-" + environment
	must(f.t, env.Client.Create(f.ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo-" + environment}, EnvironmentRef: v1.LocalObjectReference{Name: environment},
		Promotion: v1.Promotion{Mode: mode},
	}}))
}

func (f *fixture) eventually(what string, check func() error) {
	f.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (f *fixture) get(name string, obj client.Object) {
	f.t.Helper()
	must(f.t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, obj))
}

func (f *fixture) serving(name string) *v1.Serving {
	f.t.Helper()
	var s v1.Serving
	f.get(name, &s)
	return &s
}

// orderReady waits for the Order's Ready reason and a message containing each of msgs.
func (f *fixture) orderReady(name, reason string, msgs ...string) {
	f.t.Helper()
	f.eventually("Order "+name+" Ready "+reason, func() error {
		var o v1.Order
		f.get(name, &o)
		return hasCondition(o.Status.Conditions, reason, msgs)
	})
}

// servingReady waits for the Serving's Ready reason and a message containing each of msgs.
func (f *fixture) servingReady(name, reason string, msgs ...string) *v1.Serving {
	f.t.Helper()
	var s *v1.Serving
	f.eventually("Serving "+name+" Ready "+reason, func() error {
		s = &v1.Serving{}
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, s); err != nil {
			return err
		}
		if s.Status.ObservedGeneration != s.Generation {
			return fmt.Errorf("generation %d not observed yet", s.Generation)
		}
		return hasCondition(s.Status.Conditions, reason, msgs)
	})
	return s
}

func hasCondition(conds []metav1.Condition, reason string, msgs []string) error {
	c := apimeta.FindStatusCondition(conds, v1.ConditionReady)
	if c == nil || c.Reason != reason {
		return fmt.Errorf("Ready is %+v, want reason %s", c, reason)
	}
	for _, m := range msgs {
		if !strings.Contains(c.Message, m) {
			return fmt.Errorf("Ready message %q does not say %q", c.Message, m)
		}
	}
	return nil
}

// latest waits for the Order's first Preparation and returns it. After a change of what the
// Order renders, its status.latestPreparation may still name the Preparation before for a
// moment (the Order promotes its Serving before it writes its own status): to learn what a
// Serving was promoted to, read the Serving's spec (promoted).
func (f *fixture) latest(order string) *v1.Preparation {
	f.t.Helper()
	var name string
	f.eventually("Order "+order+" renders", func() error {
		var o v1.Order
		f.get(order, &o)
		if name = o.Status.LatestPreparation; name == "" {
			return fmt.Errorf("no Preparation yet")
		}
		return nil
	})
	var p v1.Preparation
	f.get(name, &p)
	return &p
}

// promoted waits for the Serving's spec.preparationName to name a Preparation other than
// those in before, and returns that Preparation.
func (f *fixture) promoted(serving string, before ...string) *v1.Preparation {
	f.t.Helper()
	var name string
	f.eventually("Serving "+serving+" promoted", func() error {
		name = f.serving(serving).Spec.PreparationName
		if name == "" || slices.Contains(before, name) {
			return fmt.Errorf("it runs %q", name)
		}
		return nil
	})
	var p v1.Preparation
	f.get(name, &p)
	return &p
}

// playArgoCD reports every Application of the Serving as Argo CD would once it synced what the
// Serving runs: it waits for each Application to ask for the artifact of the Preparation the
// Serving's spec names, then reports it synced at that revision, with health. The Serving's
// controller writes the Applications a moment after a promotion: reporting what an
// Application asked for before would report the release before, and nothing reports again.
func (f *fixture) playArgoCD(serving string, clusters []string, health string) {
	f.t.Helper()
	want := f.promoted(serving).Spec.Artifact.Digest
	for _, c := range clusters {
		name := fleet.ApplicationName(f.ns, serving, f.clusterName(c))
		f.eventually("Application "+name+" reported", func() error {
			app := &unstructured.Unstructured{}
			app.SetGroupVersionKind(argocd.ApplicationGVK)
			if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: cfg.ArgoCDNamespace, Name: name}, app); err != nil {
				return err
			}
			revision, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
			if revision != want {
				return fmt.Errorf("it asks for %q, the Serving runs %s", revision, want)
			}
			app.Object["status"] = map[string]any{
				"sync":   map[string]any{"status": "Synced", "revision": revision},
				"health": map[string]any{"status": health},
			}
			return env.Client.Update(f.ctx, app)
		})
	}
}

// applications counts the Serving's Applications.
func (f *fixture) applications(serving string) int {
	f.t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	must(f.t, env.Client.List(f.ctx, list, client.InNamespace(cfg.ArgoCDNamespace),
		client.MatchingLabels{argocd.LabelServing: serving, argocd.LabelServingNamespace: f.ns}))
	return len(list.Items)
}

// promote points a Serving at a Preparation, as a person would with kubectl patch.
func (f *fixture) promote(serving, preparation string) {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := f.serving(serving)
		s.Spec.PreparationName, s.Spec.PromotedBy = preparation, env.AdminName
		return env.Client.Update(f.ctx, s)
	}))
}

// poke makes the Serving reconcile, standing in for the requeue at a soak's end that the fake
// clock does not reach.
func (f *fixture) poke(serving string) {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := f.serving(serving)
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations["test.kokumi.dev/poke"] = clock.Now().String()
		return env.Client.Update(f.ctx, s)
	}))
}

// records waits for n deployment records in the Preparation's status and returns them.
func (f *fixture) records(prep string, n int) []v1.DeploymentRecord {
	f.t.Helper()
	var p v1.Preparation
	f.eventually(fmt.Sprintf("%d deployment records of %s", n, prep), func() error {
		f.get(prep, &p)
		if len(p.Status.DeploymentRecords) != n {
			return fmt.Errorf("%d records: %+v", len(p.Status.DeploymentRecords), p.Status.DeploymentRecords)
		}
		return nil
	})
	return p.Status.DeploymentRecords
}

// attached reads and verifies the records attached to the Preparation's artifact.
func (f *fixture) attached(prep *v1.Preparation) []record.Record {
	f.t.Helper()
	keys, err := pipeline.Keys.Trusted(f.ctx)
	must(f.t, err)
	repository, _, _ := strings.Cut(oci.TrimScheme(prep.Spec.Artifact.Ref), "@")
	recs, err := pipeline.Records.Records(f.ctx, repository, prep.Spec.Artifact.Digest, keys)
	must(f.t, err)
	return recs
}

// statusWrites fails the controller's writes of the status of the Servings it names, as a
// controller that crashes (or loses a conflict) between the Application writes and the
// status write would leave them: the Applications written, the status not.
type statusWrites struct {
	next    http.RoundTripper
	blocked sync.Map // "<namespace>/<serving>" → struct{}
}

// block fails the writes of the Serving's status until unblock.
func (w *statusWrites) block(namespace, serving string) {
	w.blocked.Store(namespace+"/"+serving, struct{}{})
}

func (w *statusWrites) unblock(namespace, serving string) {
	w.blocked.Delete(namespace + "/" + serving)
}

// RoundTrip answers a blocked status write with 500, and passes everything else.
func (w *statusWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		// …/namespaces/<ns>/servings/<name>/status
		parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
		if n := len(parts); n >= 5 && parts[n-1] == "status" && parts[n-3] == "servings" && parts[n-5] == "namespaces" {
			if _, ok := w.blocked.Load(parts[n-4] + "/" + parts[n-2]); ok {
				if req.Body != nil {
					_ = req.Body.Close()
				}
				return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error", Request: req,
					Header: http.Header{"Content-Type": []string{"application/json"}},
					Body:   io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the test blocks this status write","reason":"InternalError","code":500}`))}, nil
			}
		}
	}
	return w.next.RoundTrip(req)
}
