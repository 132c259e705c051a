package badinput

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// setUpTimeout bounds the waits of a case's set-up (a working Serving, say): generous, for a
// loaded machine running every case at once. The deadline of the bad input itself is the row's.
const setUpTimeout = 3 * time.Minute

func pemCertificate(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// The content of the sources registry, pushed once.
var (
	sourcesOnce sync.Once
	// webChart is oci://… of the chart web, version 1.0.0: a Deployment of .Values.image, an
	// Ingress that requires a host when enabled, a template that fails with .Values.failWith,
	// a values schema that wants an integer replicaCount.
	webChart string
	// webImage and webImage2 are images of the sources registry.
	webImage, webImage2 string
	// manyChart renders .Values.count ConfigMaps.
	manyChart string
	// webBundle is a manifest bundle (no chart) with a ConfigMap; brokenBundle's YAML does not
	// parse; emptySource holds one layer that is neither a chart nor YAML.
	webBundle, brokenBundle, emptySource string
)

var webFiles = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: web\nversion: 1.0.0\n",
	"values.yaml": "replicaCount: 1\nimage: \"\"\nmessage: hello\ningress:\n  enabled: false\n  host: \"\"\nfailWith: \"\"\n",
	"values.schema.json": `{"$schema": "https://json-schema.org/draft-07/schema#", "type": "object",
  "properties": {"replicaCount": {"type": "integer", "minimum": 0}}}`,
	"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: {{ .Values.replicaCount }}
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: {{ .Values.image }}
        env:
        - name: MESSAGE
          value: {{ .Values.message | quote }}
`,
	"templates/ingress.yaml": `{{- if .Values.ingress.enabled }}
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {{ .Release.Name }}
spec:
  rules:
  - host: {{ required "ingress.host is required when ingress.enabled is true" .Values.ingress.host }}
{{- end }}
`,
	"templates/fail.yaml": `{{- if .Values.failWith }}{{ fail .Values.failWith }}{{ end }}
`,
}

// pushSources fills the sources registry, once for every case.
func pushSources(t *testing.T) {
	sourcesOnce.Do(func() {
		webImage = ocitest.Repo(sources, "team/web:1.0")
		ocitest.PushImage(t, webImage, 1)
		webImage2 = ocitest.Repo(sources, "team/web:2.0")
		ocitest.PushImage(t, webImage2, 1)
		webChart = "oci://" + ocitest.Repo(sources, "charts/web")
		ocitest.PushChart(t, oci.TrimScheme(webChart), "1.0.0", "web", "1.0.0", ocitest.Chart(t, "web", webFiles))
		manyChart = "oci://" + ocitest.Repo(sources, "charts/many")
		ocitest.PushChart(t, oci.TrimScheme(manyChart), "1.0.0", "many", "1.0.0", ocitest.Chart(t, "many", map[string]string{
			"Chart.yaml":  "apiVersion: v2\nname: many\nversion: 1.0.0\n",
			"values.yaml": "count: 1\n",
			"templates/many.yaml": "{{- range until (int .Values.count) }}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n" +
				"  name: cm-{{ . }}\n{{- end }}\n",
		}))
		webBundle = "oci://" + ocitest.Repo(sources, "bundles/web")
		ocitest.PushBundle(t, oci.TrimScheme(webBundle), "v1", map[string]string{
			"config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  a: b\n",
		})
		brokenBundle = "oci://" + ocitest.Repo(sources, "bundles/broken")
		ocitest.PushBundle(t, oci.TrimScheme(brokenBundle), "v1", map[string]string{
			"config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [web\n  labels: {a: b\n",
		})
		emptySource = "oci://" + ocitest.Repo(sources, "bundles/empty")
		ocitest.PushRaw(t, oci.TrimScheme(emptySource), "v1", "application/octet-stream", []byte("no manifests here"))
	})
	if emptySource == "" {
		t.Fatal("the sources registry was not filled")
	}
}

// fixture is one case's namespace, with an AppProject admitting it; its Clusters carry the
// label tier=<namespace>.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	ns      string
	project string
}

func newFixture(t *testing.T, ns string) *fixture {
	t.Helper()
	pushSources(t)
	f := &fixture{t: t, ctx: context.Background(), ns: ns, project: "proj-" + ns}
	f.must(env.CreateNamespace(f.ctx, ns))
	f.createProject()
	return f
}

func (f *fixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) createProject() {
	f.t.Helper()
	p := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"sourceNamespaces": []any{f.ns}, "destinations": []any{map[string]any{"server": "*", "namespace": "*"}}, "sourceRepos": []any{"*"},
	}}}
	p.SetGroupVersionKind(argocd.AppProjectGVK)
	p.SetName(f.project)
	p.SetNamespace(cfg.ArgoCDNamespace)
	f.must(env.Client.Create(f.ctx, p))
}

func (f *fixture) deleteProject() {
	f.t.Helper()
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(argocd.AppProjectGVK)
	p.SetName(f.project)
	p.SetNamespace(cfg.ArgoCDNamespace)
	f.must(env.Client.Delete(f.ctx, p))
}

// putSecret creates or replaces a Secret.
func (f *fixture) putSecret(namespace, name string, typ corev1.SecretType, data map[string][]byte) {
	f.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Type: typ, Data: data}
	err := env.Client.Create(f.ctx, s)
	if apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var have corev1.Secret
			if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(s), &have); err != nil {
				return err
			}
			have.Data = data
			return env.Client.Update(f.ctx, &have)
		})
	}
	f.must(err)
}

// cluster registers a Cluster name of the fixture's tier whose server is a new member, with a
// token and the member's CA in its credentials Secret (of the same name).
func (f *fixture) cluster(name string) {
	f.t.Helper()
	m := newMember()
	clusterMembers.Store(name, m)
	f.putSecret(cfg.Namespace, name, corev1.SecretTypeOpaque, map[string][]byte{cluster.KeyToken: []byte(memberToken), cluster.KeyCA: m.CA()})
	f.clusterAt(name, m.URL(), map[string]string{"tier": f.ns})
}

// clusterMembers are the members of the Clusters fixtures registered, by Cluster name.
var clusterMembers sync.Map

// memberOf returns the member that plays the server of the Cluster name.
func memberOf(t *testing.T, name string) *member {
	m, ok := clusterMembers.Load(name)
	if !ok {
		t.Fatalf("no member plays the server of Cluster %s", name)
	}
	return m.(*member)
}

// findApp finds the Application name among apps.
func findApp(apps []unstructured.Unstructured, name string) (*unstructured.Unstructured, bool) {
	for i := range apps {
		if apps[i].GetName() == name {
			return &apps[i], true
		}
	}
	return nil, false
}

// clusterAt registers a Cluster name of server, whose credentials Secret has the same name.
func (f *fixture) clusterAt(name, server string, labels map[string]string) {
	f.t.Helper()
	f.must(env.Client.Create(f.ctx, &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       v1.ClusterSpec{Server: server, CredentialsRef: v1.LocalObjectReference{Name: name}},
	}))
}

// environment creates an Environment name selecting the fixture's tier.
func (f *fixture) environment(name string) {
	f.t.Helper()
	f.must(env.Client.Create(f.ctx, &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": f.ns}}, Project: f.project},
	}))
}

// editEnvironment edits the fixture's Environment edge.
func (f *fixture) editEnvironment(edit func(*v1.Environment)) {
	f.t.Helper()
	f.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e v1.Environment
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e); err != nil {
			return err
		}
		edit(&e)
		return env.Client.Update(f.ctx, &e)
	}))
}

func rawJSON(v any) *apiextensionsv1.JSON {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return &apiextensionsv1.JSON{Raw: raw}
}

// webValues are the chart web's values with the image of the sources registry.
func webValues() map[string]any {
	return map[string]any{"image": webImage, "message": "hello"}
}

// webProduct is a Product of the chart web with values, images pinned.
func (f *fixture) webProduct(name string, values map[string]any) *v1.Product {
	return &v1.Product{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: v1.ProductSpec{
			Source: v1.ProductSource{URL: webChart, Version: "1.0.0"},
			Render: &v1.RenderSpec{Helm: &v1.HelmRender{Values: rawJSON(values)}},
			Images: v1.ImageSpec{Policy: v1.ImagePolicyPin},
		},
	}
}

func (f *fixture) create(obj client.Object) {
	f.t.Helper()
	f.must(env.Client.Create(f.ctx, obj))
}

func (f *fixture) editProduct(name string, edit func(*v1.Product)) {
	f.t.Helper()
	f.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p v1.Product
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &p); err != nil {
			return err
		}
		edit(&p)
		return env.Client.Update(f.ctx, &p)
	}))
}

// order creates an Order of product to environment.
func (f *fixture) order(name, product, environment string, mode v1.PromotionMode) {
	f.t.Helper()
	f.create(&v1.Order{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: v1.OrderSpec{ProductRef: v1.LocalObjectReference{Name: product}, EnvironmentRef: v1.LocalObjectReference{Name: environment},
			Promotion: v1.Promotion{Mode: mode}},
	})
}

func (f *fixture) serving(name string) *v1.Serving {
	f.t.Helper()
	var s v1.Serving
	f.must(env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &s))
	return &s
}

// promote points the Serving at a Preparation, as a person would.
func (f *fixture) promote(serving, preparation string) {
	f.t.Helper()
	f.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := f.serving(serving)
		s.Spec.PreparationName, s.Spec.PromotedBy = preparation, env.AdminName
		return env.Client.Update(f.ctx, s)
	}))
}

// apps lists the Serving's Applications.
func (f *fixture) apps(serving string) []unstructured.Unstructured {
	f.t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	f.must(env.Client.List(f.ctx, list, client.InNamespace(cfg.ArgoCDNamespace),
		client.MatchingLabels{argocd.LabelServing: serving, argocd.LabelServingNamespace: f.ns}))
	return list.Items
}

// playArgoCD writes on every Application of the Serving the status Argo CD writes once it has
// synced the Application's revision and the workloads are healthy.
func (f *fixture) playArgoCD(serving string) {
	f.t.Helper()
	for _, app := range f.apps(serving) {
		f.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			a := &unstructured.Unstructured{}
			a.SetGroupVersionKind(argocd.ApplicationGVK)
			if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(&app), a); err != nil {
				return err
			}
			revision, _, _ := unstructured.NestedString(a.Object, "spec", "source", "targetRevision")
			synced, _, _ := unstructured.NestedString(a.Object, "status", "sync", "revision")
			health, _, _ := unstructured.NestedString(a.Object, "status", "health", "status")
			if synced == revision && health == "Healthy" {
				return nil // Argo CD reports it already
			}
			a.Object["status"] = map[string]any{
				"sync":   map[string]any{"status": "Synced", "revision": revision},
				"health": map[string]any{"status": "Healthy"},
			}
			return env.Client.Update(f.ctx, a)
		}))
	}
}

// ready returns the Ready condition of obj, read from the API server.
func ready(ctx context.Context, obj client.Object) (*metav1.Condition, error) {
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil, err
	}
	var conds []metav1.Condition
	switch o := obj.(type) {
	case *v1.Order:
		conds = o.Status.Conditions
	case *v1.Serving:
		conds = o.Status.Conditions
	case *v1.Environment:
		conds = o.Status.Conditions
	case *v1.Cluster:
		conds = o.Status.Conditions
	case *v1.Preparation:
		conds = o.Status.Conditions
	default:
		return nil, fmt.Errorf("%T has no Ready condition here", obj)
	}
	c := apimeta.FindStatusCondition(conds, v1.ConditionReady)
	if c == nil {
		return nil, fmt.Errorf("%s has no Ready condition yet", obj.GetName())
	}
	return c, nil
}

// waitFor polls check every 100 ms until it passes, failing the test once deadline passes.
func waitFor(t *testing.T, what string, deadline time.Time, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not by the deadline: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReason waits, for setUpTimeout, until obj's Ready condition has reason.
func (f *fixture) waitReason(obj client.Object, reason string) {
	f.t.Helper()
	waitFor(f.t, fmt.Sprintf("%T %s Ready reason %s", obj, obj.GetName(), reason), time.Now().Add(setUpTimeout), func() error {
		c, err := ready(f.ctx, obj)
		if err != nil {
			return err
		}
		if c.Reason != reason {
			return fmt.Errorf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})
}

func order(ns, name string) *v1.Order {
	return &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func serving(ns, name string) *v1.Serving {
	return &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func environment(ns, name string) *v1.Environment {
	return &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func clusterNamed(name string) *v1.Cluster {
	return &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// running is what a working Serving runs: the Preparation it deploys, its revision, and its
// Applications by name (their UIDs, so that a replaced one shows).
type running struct {
	serving     string
	preparation string
	revision    string
	apps        map[string]types.UID
}

// working sets up a working delivery in the fixture: clusters (names given) of its tier, the
// Environment edge, the Product web of the chart web and the Order web to edge in mode, the
// Serving Deployed on every cluster. In Manual mode the test promotes the first Preparation.
func (f *fixture) working(mode v1.PromotionMode, clusters ...string) running {
	f.t.Helper()
	for _, c := range clusters {
		f.cluster(c)
	}
	f.environment("edge")
	f.create(f.webProduct("web", webValues()))
	f.order("web", "web", "edge", mode)
	return f.deployed("web")
}

// deployed waits for the Order to render, promotes its Preparation in Manual mode, plays Argo
// CD on its Applications and waits for the Serving to be Deployed; it returns what runs.
func (f *fixture) deployed(name string) running {
	f.t.Helper()
	o := order(f.ns, name)
	f.waitReason(o, v1.ReasonRendered)
	prep := o.Status.LatestPreparation
	if o.Spec.Promotion.Mode == v1.PromotionManual {
		waitFor(f.t, "the Serving of "+name, time.Now().Add(setUpTimeout), func() error {
			return env.Client.Get(f.ctx, client.ObjectKeyFromObject(serving(f.ns, name)), &v1.Serving{})
		})
		f.promote(name, prep)
	}
	var p v1.Preparation
	f.must(env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: prep}, &p))
	r := running{serving: name, preparation: prep, revision: p.Spec.Artifact.Digest}
	waitFor(f.t, "the Serving "+name+" Deployed", time.Now().Add(setUpTimeout), func() error {
		f.playArgoCD(name)
		c, err := ready(f.ctx, serving(f.ns, name))
		if err != nil {
			return err
		}
		if c.Reason != v1.ReasonDeployed {
			return fmt.Errorf("%s: %s", c.Reason, c.Message)
		}
		return nil
	})
	r.apps = map[string]types.UID{}
	for _, app := range f.apps(name) {
		if len(app.GetFinalizers()) > 0 {
			f.t.Errorf("Application %s carries finalizers %v: deleting it would delete what runs", app.GetName(), app.GetFinalizers())
		}
		r.apps[app.GetName()] = app.GetUID()
	}
	return r
}

// stillRuns checks that what ran still runs: the Serving deploys the same Preparation at the
// same revision, which exists, through the same Applications (not replaced) at that revision.
func (f *fixture) stillRuns(r running) {
	f.t.Helper()
	s := f.serving(r.serving)
	if s.Spec.PreparationName != r.preparation {
		f.t.Errorf("the Serving moved from Preparation %s to %s", r.preparation, s.Spec.PreparationName)
	}
	if s.Status.Revision != r.revision {
		f.t.Errorf("the Serving runs revision %s, was %s", s.Status.Revision, r.revision)
	}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: r.preparation}, &v1.Preparation{}); err != nil {
		f.t.Errorf("Preparation %s that runs: %v", r.preparation, err)
	}
	f.sameApps(r)
}

// sameApps checks that the Serving's Applications are those that ran, unchanged.
func (f *fixture) sameApps(r running) {
	f.t.Helper()
	have := map[string]unstructured.Unstructured{}
	for _, app := range f.apps(r.serving) {
		have[app.GetName()] = app
	}
	for name, uid := range r.apps {
		app, ok := have[name]
		if !ok {
			f.t.Errorf("Application %s was deleted", name)
			continue
		}
		if app.GetUID() != uid {
			f.t.Errorf("Application %s was replaced", name)
		}
		if rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision"); rev != r.revision {
			f.t.Errorf("Application %s moved to revision %s, was %s", name, rev, r.revision)
		}
	}
}

// restored waits until the Serving's Applications are back on the same clusters at the same
// revision, and plays Argo CD there until the Serving is Deployed again.
func (f *fixture) restored(r running) {
	f.t.Helper()
	waitFor(f.t, "the Serving "+r.serving+" Deployed again at "+r.revision, time.Now().Add(setUpTimeout), func() error {
		have := map[string]string{}
		for _, app := range f.apps(r.serving) {
			have[app.GetName()], _, _ = unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
		}
		for name := range r.apps {
			if have[name] != r.revision {
				return fmt.Errorf("Application %s at %q", name, have[name])
			}
		}
		f.playArgoCD(r.serving)
		c, err := ready(f.ctx, serving(f.ns, r.serving))
		if err != nil {
			return err
		}
		if c.Reason != v1.ReasonDeployed {
			return fmt.Errorf("%s: %s", c.Reason, c.Message)
		}
		return nil
	})
}

// preparations lists the Preparations of the fixture's Order, by name.
func (f *fixture) preparations(order string) []string {
	f.t.Helper()
	var list v1.PreparationList
	f.must(env.Client.List(f.ctx, &list, client.InNamespace(f.ns)))
	var out []string
	for _, p := range list.Items {
		if p.Spec.OrderRef.Name == order {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// target returns the Serving's target of cluster, if it lists one.
func target(s *v1.Serving, cluster string) *v1.Target {
	for i := range s.Status.Targets {
		if s.Status.Targets[i].Cluster == cluster {
			return &s.Status.Targets[i]
		}
	}
	return nil
}

// readable checks what a person reads of a message: valid UTF-8, no character lost to a cut in
// the middle of one, short enough for a condition.
func readable(msg string) error {
	switch {
	case !utf8.ValidString(msg):
		return fmt.Errorf("the message is not valid UTF-8: %q", msg)
	case strings.ContainsRune(msg, utf8.RuneError):
		return fmt.Errorf("the message holds a broken character (U+FFFD): %q", msg)
	case len(msg) > 2048:
		return fmt.Errorf("the message is %d bytes long", len(msg))
	}
	return nil
}
