package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/view"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/server"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// must is harness.Must: the test stops at an error.
var must = harness.Must

type list[T any] struct {
	Items   []T `json:"items"`
	Omitted int `json:"omitted"`
}

func TestNothingWithoutTheToken(t *testing.T) {
	for _, c := range []call{
		{path: "/api/v1/servings"},
		{path: "/api/v1/servings", bearer: "not-the-token"},
		{path: "/api/v1/clusters", cookie: &http.Cookie{Name: server.SessionCookie, Value: "made-up"}},
		{method: http.MethodPost, path: "/api/v1/namespaces/default/orders", body: server.OrderRequest{Name: "x", Product: "p", Environment: "e"}},
		{path: "/api/v1/events"},
	} {
		var out map[string]string
		if res := do(t, c, &out); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s: status %d, want 401", c.method, c.path, res.StatusCode)
		} else if !strings.Contains(out["error"], "log in") {
			t.Errorf("%s %s: error %q does not say to log in", c.method, c.path, out["error"])
		}
	}
	// The page itself and the health check are public; what they show is not.
	if res := do(t, call{path: "/"}, nil); res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("GET /: status %d, CSP %q", res.StatusCode, res.Header.Get("Content-Security-Policy"))
	}
	if res := do(t, call{path: "/healthz"}, nil); res.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: status %d", res.StatusCode)
	}
}

func TestLoginOpensASessionAndLogoutEndsIt(t *testing.T) {
	var out map[string]any
	if res := do(t, call{method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": "wrong"}}, &out); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("login with a wrong token: status %d", res.StatusCode)
	}
	// A cross-site form cannot sign the browser in as someone else: a login must be JSON.
	if res := do(t, call{method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": token}, contentType: "text/plain"}, nil); res.StatusCode != http.StatusUnsupportedMediaType || len(res.Cookies()) > 0 {
		t.Fatalf("form-encoded login: status %d, cookies %v; want 415 and none", res.StatusCode, res.Cookies())
	}
	res := do(t, call{method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": token}}, &out)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("login: status %d %v", res.StatusCode, out)
	}
	var session *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == server.SessionCookie {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login set no HttpOnly, SameSite=Strict session cookie: %+v", res.Cookies())
	}
	if res := do(t, call{path: "/api/v1/clusters", cookie: session}, nil); res.StatusCode != http.StatusOK {
		t.Fatalf("GET with the session: status %d", res.StatusCode)
	}
	if res := do(t, call{path: "/api/v1/me", cookie: session}, &out); res.StatusCode != http.StatusOK || out["authenticated"] != true {
		t.Fatalf("GET /me with the session: %d %v", res.StatusCode, out)
	}
	// A write by cookie must be JSON: a cross-site form cannot send that without asking.
	res = do(t, call{method: http.MethodPost, path: "/api/v1/namespaces/default/orders", cookie: session, body: "x", contentType: "text/plain"}, &out)
	if res.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("form-encoded write by cookie: status %d, want 415", res.StatusCode)
	}
	do(t, call{method: http.MethodPost, path: "/api/v1/logout", cookie: session, body: map[string]string{}}, nil)
	if res := do(t, call{path: "/api/v1/clusters", cookie: session}, nil); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET after logout: status %d, want 401", res.StatusCode)
	}
}

// serving creates a Serving with the status the Serving reconciler would write: edge-1
// healthy, edge-2 degraded, edge-3 held because its Cluster is not Ready.
func serving(t *testing.T, ns string) *v1.Serving {
	t.Helper()
	ctx := context.Background()
	must(t, env.CreateNamespace(ctx, ns))
	s := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo-edge"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "podinfo-edge"}, PreparationName: "podinfo-edge-abc", PromotedBy: env.AdminName,
	}}
	must(t, env.Client.Create(ctx, s))
	held := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	s.Status = v1.ServingStatus{
		Revision: "sha256:" + strings.Repeat("a", 64),
		Clusters: v1.ClusterCounts{Selected: 3, Healthy: 1, Degraded: 1, Held: 1},
		Targets: []v1.Target{
			{Cluster: "edge-3", Since: held, Conditions: []v1.TargetCondition{{Type: "Held", Reason: v1.ReasonClusterNotReady, Message: "Cluster edge-3 is not Ready: Unreachable"}}},
			{Cluster: "edge-2", Application: ns + "-podinfo-edge-edge-2", Revision: "sha256:" + strings.Repeat("a", 64), Conditions: []v1.TargetCondition{{Type: "Degraded", Reason: v1.ReasonDegraded, Message: "Deployment podinfo: progress deadline exceeded"}}},
		},
	}
	apimeta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonDeploymentFailed, Message: "1 of 3 clusters degraded: edge-2"})
	must(t, env.Client.Status().Update(ctx, s))
	return s
}

func TestServingPageListsEveryClusterTroubledFirst(t *testing.T) {
	ns := "team-serving"
	s := serving(t, ns)
	rev := s.Status.Revision
	healthySince := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	healthyApp := app(t, ns, s.Name, "edge-1", "Healthy", "Synced", rev, "", healthySince)
	app(t, ns, s.Name, "edge-2", "Degraded", "Synced", rev, "Deployment podinfo: progress deadline exceeded", time.Now())

	d := get(t, "/api/v1/namespaces/"+ns+"/servings/podinfo-edge", func(d view.ServingDetail) error {
		if len(d.Rows) != 3 {
			return fmt.Errorf("%d rows, want 3", len(d.Rows))
		}
		// The cache may hold an Application before the status Argo CD wrote on it.
		for _, r := range d.Rows {
			if r.Application != "" && r.Health == "" {
				return fmt.Errorf("no health yet on %s", r.Cluster)
			}
		}
		return nil
	})
	if d.Clusters.Selected != 3 || d.Clusters.Healthy != 1 || d.Ready.Reason != v1.ReasonDeploymentFailed {
		t.Errorf("counts %+v, ready %+v", d.Clusters, d.Ready)
	}
	held, degraded, healthy := d.Rows[0], d.Rows[1], d.Rows[2]
	if held.Cluster != "edge-3" || held.State != "Held" || held.Reason != v1.ReasonClusterNotReady || !strings.Contains(held.Message, "not Ready") || held.Application != "" || held.Since == nil {
		t.Errorf("first row is not the held edge-3 with its reason and since: %+v", held)
	}
	if degraded.Cluster != "edge-2" || degraded.State != "Degraded" || degraded.Health != "Degraded" || degraded.Reason != v1.ReasonDegraded {
		t.Errorf("second row is not the degraded edge-2: %+v", degraded)
	}
	wantLink := argoURL + "/applications/" + argoNS + "/" + healthyApp
	if healthy.Cluster != "edge-1" || healthy.State != "Healthy" || healthy.Health != "Healthy" || healthy.Sync != "Synced" || healthy.Revision != rev ||
		healthy.Link != wantLink || healthy.Since == nil || !healthy.Since.Equal(healthySince) {
		t.Errorf("third row is not edge-1 healthy at %s since %s, linked to %s: %+v", rev, healthySince, wantLink, healthy)
	}

	all := get(t, "/api/v1/servings?namespace="+ns, func(l list[view.ServingSummary]) error {
		if len(l.Items) != 1 {
			return fmt.Errorf("%d Servings", len(l.Items))
		}
		return nil
	})
	if got := all.Items[0]; got.Name != "podinfo-edge" || got.Order != "podinfo-edge" || got.Preparation != "podinfo-edge-abc" {
		t.Errorf("Serving row %+v", got)
	}
	if res := do(t, call{path: "/api/v1/namespaces/" + ns + "/servings/nope", bearer: token}, nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("a missing Serving: status %d, want 404", res.StatusCode)
	}
}

func TestClusterPageListsWhatRunsThere(t *testing.T) {
	ctx := context.Background()
	c := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-9", Labels: map[string]string{"env": "edge"}},
		Spec:       v1.ClusterSpec{Server: "https://edge-9.example:6443", CredentialsRef: v1.LocalObjectReference{Name: "edge-9"}},
	}
	must(t, env.Client.Create(ctx, c))
	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonConnected, Message: "v1.35.0"})
	c.Status.Version = "v1.35.0"
	must(t, env.Client.Status().Update(ctx, c))
	for _, ns := range []string{"team-b", "team-a"} {
		must(t, env.CreateNamespace(ctx, ns))
		app(t, ns, "podinfo-edge", "edge-9", "Healthy", "Synced", "sha256:"+strings.Repeat("b", 64), "", time.Now())
	}
	app(t, "team-a", "podinfo-edge", "edge-8", "Healthy", "Synced", "sha256:"+strings.Repeat("b", 64), "", time.Now())

	d := get(t, "/api/v1/clusters/edge-9", func(d view.ClusterDetail) error {
		if len(d.Deployments) != 2 {
			return fmt.Errorf("%d deployments, want 2", len(d.Deployments))
		}
		for _, dep := range d.Deployments {
			if dep.Health == "" {
				return fmt.Errorf("no health yet on %s/%s", dep.Namespace, dep.Serving)
			}
		}
		return nil
	})
	if d.Ready.Status != "True" || d.Version != "v1.35.0" || d.Server != c.Spec.Server {
		t.Errorf("cluster %+v", d.ClusterSummary)
	}
	if d.Deployments[0].Namespace != "team-a" || d.Deployments[1].Namespace != "team-b" || d.Deployments[0].Serving != "podinfo-edge" ||
		d.Deployments[0].Health != "Healthy" || !strings.HasPrefix(d.Deployments[0].Link, argoURL+"/applications/argocd/") {
		t.Errorf("deployments %+v", d.Deployments)
	}
	get(t, "/api/v1/clusters", func(l list[view.ClusterSummary]) error {
		for _, c := range l.Items {
			if c.Name == "edge-9" && c.Ready.Reason == v1.ReasonConnected && c.Labels["env"] == "edge" {
				return nil
			}
		}
		return fmt.Errorf("edge-9 not listed Ready: %+v", l.Items)
	})
}

func TestOrderFormCreatesAnOrderAndNamesTheWrongField(t *testing.T) {
	ctx := context.Background()
	ns := "team-order"
	must(t, env.CreateNamespace(ctx, ns))
	must(t, env.Client.Create(ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "edge"}}, Project: "edge",
	}}))
	must(t, env.Client.Create(ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo"}, Spec: v1.ProductSpec{
		Source: v1.ProductSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1"},
	}}))
	get(t, "/api/v1/namespaces/"+ns+"/environments", func(l list[view.EnvironmentSummary]) error {
		if len(l.Items) != 1 || l.Items[0].Name != "edge" {
			return fmt.Errorf("environments %+v", l.Items)
		}
		return nil
	})
	get(t, "/api/v1/namespaces/"+ns+"/products", func(l list[server.ProductSummary]) error {
		if len(l.Items) != 1 || l.Items[0].Source != "oci://ghcr.io/stefanprodan/charts/podinfo" {
			return fmt.Errorf("products %+v", l.Items)
		}
		return nil
	})

	// The Environment is left empty: the namespace has only one, and the form picks it.
	var created map[string]string
	path := "/api/v1/namespaces/" + ns + "/orders"
	req := server.OrderRequest{Name: "podinfo-edge", Product: "podinfo", TargetNamespace: "podinfo", Promotion: "Manual"}
	if res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: req}, &created); res.StatusCode != http.StatusCreated {
		t.Fatalf("create Order: status %d %v", res.StatusCode, created)
	}
	var o v1.Order
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "podinfo-edge"}, &o))
	if o.Spec.EnvironmentRef.Name != "edge" || o.Spec.ProductRef.Name != "podinfo" || o.Spec.TargetNamespace != "podinfo" || o.Spec.Promotion.Mode != v1.PromotionManual {
		t.Errorf("Order spec %+v", o.Spec)
	}
	if res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: req}, nil); res.StatusCode != http.StatusConflict {
		t.Errorf("same Order again: status %d, want 409", res.StatusCode)
	}

	for _, c := range []struct {
		req   server.OrderRequest
		field string
	}{
		{server.OrderRequest{Name: "Bad_Name", Product: "podinfo"}, "name"},
		{server.OrderRequest{Name: "ok", Product: ""}, "product"},
		{server.OrderRequest{Name: "ok", Product: "podinfo", TargetNamespace: "Not A Namespace"}, "targetNamespace"},
		{server.OrderRequest{Name: "ok", Product: "podinfo", Promotion: "Sometimes"}, "promotion"},
	} {
		var out struct {
			Error  string              `json:"error"`
			Fields []server.FieldError `json:"fields"`
		}
		res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: c.req}, &out)
		if res.StatusCode != http.StatusUnprocessableEntity || len(out.Fields) == 0 || out.Fields[0].Field != c.field || !strings.HasPrefix(out.Error, c.field+": ") {
			t.Errorf("%+v: status %d, %+v; want 422 naming %s", c.req, res.StatusCode, out, c.field)
		}
	}
	if res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: map[string]string{"name": "x", "colour": "red"}}, nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown field: status %d, want 400", res.StatusCode)
	}
	var orders v1.OrderList
	must(t, env.Client.List(ctx, &orders, client.InNamespace(ns)))
	if len(orders.Items) != 1 {
		t.Errorf("%d Orders in %s after the bad requests, want 1", len(orders.Items), ns)
	}
}

// An environment-less namespace cannot pick one for the form.
func TestOrderNeedsAnEnvironmentWhenTheNamespaceHasNone(t *testing.T) {
	must(t, env.CreateNamespace(context.Background(), "team-empty"))
	var out struct {
		Fields []server.FieldError `json:"fields"`
	}
	res := do(t, call{method: http.MethodPost, path: "/api/v1/namespaces/team-empty/orders", bearer: token, body: server.OrderRequest{Name: "a", Product: "b"}}, &out)
	// The Product is missing too: every wrong field is named at once.
	if res.StatusCode != http.StatusUnprocessableEntity || len(out.Fields) != 2 || out.Fields[0].Field != "product" ||
		out.Fields[1].Field != "environment" || out.Fields[1].Message != "team-empty has no Environment: an admin sets one up for it" {
		t.Errorf("status %d, %+v; want 422 naming the product and the environment", res.StatusCode, out)
	}
}

func TestEventsTellTheUIWhatChanged(t *testing.T) {
	ns := "team-events"
	s := serving(t, ns)
	req, err := http.NewRequest(http.MethodGet, base+"/api/v1/events", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	must(t, err)
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(res.Body)

	// A Serving's status changes.
	s.Status.Clusters.Healthy = 2
	must(t, env.Client.Status().Update(context.Background(), s))
	nextEvent(t, r, `"namespace":"team-events","name":"podinfo-edge"`)

	// Argo CD reports on one of its Applications: the change names the Serving and cluster.
	app(t, ns, s.Name, "edge-5", "Progressing", "OutOfSync", s.Status.Revision, "", time.Now())
	nextEvent(t, r, `"kind":"Serving","namespace":"team-events","name":"podinfo-edge","cluster":"edge-5"`)
}

// preparationOf creates a Preparation of order, Ready or not.
func preparationOf(t *testing.T, ns, name, order string, ready bool) {
	t.Helper()
	ctx := context.Background()
	d := "sha256:" + fmt.Sprintf("%064x", []byte(name))[:64]
	p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: order}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: d},
		TargetNamespace: "podinfo", Artifact: v1.Artifact{Ref: "oci://127.0.0.1:5000/" + ns + "/" + order + "@" + d, Digest: d},
		ConfigHash: name,
	}}
	must(t, env.Client.Create(ctx, p))
	cond := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonRendered, Message: "pushed"}
	if !ready {
		cond = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonPushFailed, Message: "the registry refused the artifact"}
	}
	apimeta.SetStatusCondition(&p.Status.Conditions, cond)
	must(t, env.Client.Status().Update(ctx, p))
}

func TestAPersonPromotesAReadyPreparationOfAManualOrder(t *testing.T) {
	ctx := context.Background()
	ns := "team-promote"
	must(t, env.CreateNamespace(ctx, ns))
	for _, o := range []struct {
		name string
		mode v1.PromotionMode
	}{{"manual", v1.PromotionManual}, {"auto", v1.PromotionAutomatic}} {
		must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.name}, Spec: v1.OrderSpec{
			ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"},
			Promotion: v1.Promotion{Mode: o.mode},
		}}))
		must(t, env.Client.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.name}, Spec: v1.ServingSpec{
			OrderRef: v1.LocalObjectReference{Name: o.name},
		}}))
	}
	preparationOf(t, ns, "manual-ready", "manual", true)
	preparationOf(t, ns, "manual-broken", "manual", false)
	preparationOf(t, ns, "auto-ready", "auto", true)

	d := get(t, "/api/v1/namespaces/"+ns+"/servings/manual", func(d view.ServingDetail) error {
		if d.Promotion == nil || len(d.Promotion.Preparations) != 2 {
			return fmt.Errorf("promotion %+v, want the Order's two Preparations", d.Promotion)
		}
		for _, p := range d.Promotion.Preparations {
			if p.Ready.Status == "Unknown" {
				return fmt.Errorf("no Ready condition yet on %s", p.Name)
			}
		}
		return nil
	})
	if d.Promotion.Mode != "Manual" {
		t.Errorf("mode %q, want Manual", d.Promotion.Mode)
	}

	path := "/api/v1/namespaces/" + ns + "/servings/manual/promotion"
	for _, c := range []struct {
		prep, want string
	}{
		{"", "preparation: name one"},
		{"nope", `preparation: no Preparation "nope"`},
		{"auto-ready", "preparation: auto-ready belongs to Order auto"},
		{"manual-broken", "preparation: manual-broken is not Ready (PushFailed: the registry refused the artifact)"},
	} {
		var out map[string]any
		res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: server.PromoteRequest{Preparation: c.prep}}, &out)
		if res.StatusCode != http.StatusUnprocessableEntity || !strings.HasPrefix(fmt.Sprint(out["error"]), c.want) {
			t.Errorf("promote %q: %d %v, want 422 %q", c.prep, res.StatusCode, out["error"], c.want)
		}
	}
	var out map[string]any
	if res := do(t, call{method: http.MethodPost, path: "/api/v1/namespaces/" + ns + "/servings/auto/promotion", bearer: token, body: server.PromoteRequest{Preparation: "auto-ready"}}, &out); res.StatusCode != http.StatusConflict || !strings.Contains(fmt.Sprint(out["error"]), "spec.promotion.mode to Manual") {
		t.Errorf("promote in an Automatic Order: %d %v, want 409 naming spec.promotion.mode", res.StatusCode, out)
	}
	var sv v1.Serving
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "manual"}, &sv))
	if sv.Spec.PreparationName != "" {
		t.Fatalf("a refused promotion changed the Serving: %q", sv.Spec.PreparationName)
	}

	if res := do(t, call{method: http.MethodPost, path: path, bearer: token, body: server.PromoteRequest{Preparation: "manual-ready"}}, &out); res.StatusCode != http.StatusOK {
		t.Fatalf("promote manual-ready: %d %v", res.StatusCode, out)
	}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "manual"}, &sv))
	if sv.Spec.PreparationName != "manual-ready" {
		t.Fatalf("the Serving deploys %q after the promotion, want manual-ready", sv.Spec.PreparationName)
	}
	get(t, "/api/v1/namespaces/"+ns+"/servings/manual", func(d view.ServingDetail) error {
		for _, p := range d.Promotion.Preparations {
			if p.Name == "manual-ready" && p.Promoted {
				return nil
			}
		}
		return fmt.Errorf("manual-ready not shown as deployed: %+v", d.Promotion.Preparations)
	})
}

// app creates the Application Kokumi would keep for a Serving on cluster, with the status
// Argo CD would write.
func app(t *testing.T, ns, serving, cluster, health, sync, revision, message string, since time.Time) string {
	t.Helper()
	name, err := env.CreateApplication(context.Background(), argoNS, ns, serving, cluster,
		harness.AppStatus{Health: health, Sync: sync, Revision: revision, Message: message, Since: since})
	must(t, err)
	return name
}
