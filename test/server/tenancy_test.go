package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/view"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/server"
)

// These tests play the attacker against the server: people sign in with Kubernetes tokens,
// and the server must show and do only what RBAC lets each of them.

// login signs in to the server at url with tok and returns the session cookie.
func login(t *testing.T, url, tok string) *http.Cookie {
	t.Helper()
	var out map[string]any
	res := do(t, call{server: url, method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": tok}}, &out)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("login: status %d %v", res.StatusCode, out)
	}
	for _, c := range res.Cookies() {
		if c.Name == server.SessionCookie {
			return c
		}
	}
	t.Fatalf("login set no session cookie: %+v", res.Cookies())
	return nil
}

// at returns c for another path (and method, and body).
func (c call) at(method, path string, body any) call {
	c.method, c.path, c.body = method, path, body
	return c
}

// delivering sets up a namespace as a team delivers there: the Environment edge, the Product
// podinfo, and the Manual Order podinfo-edge whose Serving deploys podinfo-edge-abc, with a
// Ready Preparation podinfo-edge-v2 to promote.
func delivering(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	serving(t, ns)
	environment(t, ns, "edge")
	must(t, env.Client.Create(ctx, &v1.Product{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo"}, Spec: v1.ProductSpec{
		Source: v1.ProductSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1"},
	}}))
	must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo-edge"}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: "edge"},
		Promotion: v1.Promotion{Mode: v1.PromotionManual},
	}}))
	preparationOf(t, ns, "podinfo-edge-v2", "podinfo-edge", true)
	// The admin sees it all once the server's cache has it.
	get(t, "/api/v1/namespaces/"+ns+"/servings/podinfo-edge", func(d view.ServingDetail) error {
		if d.Promotion == nil || len(d.Promotion.Preparations) != 1 || d.Promotion.Preparations[0].Ready.Status != "True" {
			return fmt.Errorf("promotion %+v", d.Promotion)
		}
		return nil
	})
}

// stream opens the event stream as c and returns its reader; it closes with the test.
func stream(t *testing.T, c call) *bufio.Reader {
	t.Helper()
	if c.server == "" {
		c.server = base
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.server+"/api/v1/events", nil)
	must(t, err)
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	t.Cleanup(func() { _ = res.Body.Close() })
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/events: status %d", res.StatusCode)
	}
	return bufio.NewReader(res.Body)
}

// touch changes a Serving's status, which the event stream reports.
func touch(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	var s v1.Serving
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s))
	s.Status.Clusters.Progressing++
	must(t, env.Client.Status().Update(ctx, &s))
}

func status(t *testing.T, c call, out any) int {
	t.Helper()
	return do(t, c, out).StatusCode
}

func TestATenantSeesAndOrdersOnlyInItsNamespace(t *testing.T) {
	ctx := context.Background()
	const mine, theirs = "team-a", "team-b"
	tenant := serviceAccountToken(t, mine, "tenant")
	bindClusterRole(t, mine, "edit", mine, "tenant")
	delivering(t, mine)
	delivering(t, theirs)

	as := call{server: k8sBase, cookie: login(t, k8sBase, tenant)}
	var me server.Me
	if code := status(t, as.at("", "/api/v1/me", nil), &me); code != http.StatusOK || me.User != "system:serviceaccount:team-a:tenant" || me.Admin {
		t.Fatalf("me: %d %+v", code, me)
	}

	// Reads: its own namespace, nothing of team-b's.
	servings := getAs(t, as.at("", "/api/v1/servings", nil), func(l list[view.ServingSummary]) error {
		for _, s := range l.Items {
			if s.Namespace == mine {
				return nil
			}
		}
		return fmt.Errorf("team-a's Serving not listed: %+v", l.Items)
	})
	for _, s := range servings.Items {
		if s.Namespace != mine {
			t.Errorf("the tenant of team-a is shown the Serving %s/%s", s.Namespace, s.Name)
		}
	}
	getAs(t, as.at("", "/api/v1/namespaces/"+mine+"/servings/podinfo-edge", nil), func(d view.ServingDetail) error {
		if d.Promotion == nil || len(d.Promotion.Preparations) != 1 {
			return fmt.Errorf("its own Serving page lacks the promotion: %+v", d.Promotion)
		}
		return nil
	})
	for _, path := range []string{
		"/api/v1/servings?namespace=" + theirs,
		"/api/v1/namespaces/" + theirs + "/servings/podinfo-edge",
		"/api/v1/namespaces/" + theirs + "/servings/no-such-serving", // the same answer: no oracle
		"/api/v1/namespaces/" + theirs + "/environments",
		"/api/v1/namespaces/" + theirs + "/products",
		"/api/v1/clusters",
		"/api/v1/clusters/edge-9",
	} {
		var out map[string]any
		if code := status(t, as.at("", path, nil), &out); code != http.StatusForbidden {
			t.Errorf("GET %s as team-a's tenant: %d %v, want 403", path, code, out)
		}
	}
	// A script sends the same token as a bearer token, and gets the same answers.
	script := call{server: k8sBase, bearer: tenant}
	if code := status(t, script.at("", "/api/v1/namespaces/"+theirs+"/servings/podinfo-edge", nil), nil); code != http.StatusForbidden {
		t.Errorf("GET team-b's Serving with the tenant's bearer token: %d, want 403", code)
	}
	if code := status(t, script.at("", "/api/v1/namespaces/"+mine+"/servings/podinfo-edge", nil), nil); code != http.StatusOK {
		t.Errorf("GET team-a's Serving with the tenant's bearer token: %d, want 200", code)
	}

	// Writes: in team-a, not in team-b.
	order := server.OrderRequest{Name: "stolen", Product: "podinfo", Environment: "edge", TargetNamespace: "podinfo"}
	var out map[string]any
	if code := status(t, as.at(http.MethodPost, "/api/v1/namespaces/"+theirs+"/orders", order), &out); code != http.StatusForbidden {
		t.Errorf("create an Order in team-b as team-a's tenant: %d %v, want 403", code, out)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: theirs, Name: "stolen"}, &v1.Order{}); !apierrors.IsNotFound(err) {
		t.Errorf("an Order stolen exists in team-b: %v", err)
	}
	order.Name = "mine"
	if code := status(t, as.at(http.MethodPost, "/api/v1/namespaces/"+mine+"/orders", order), &out); code != http.StatusCreated {
		t.Errorf("create an Order in team-a as its tenant: %d %v, want 201", code, out)
	}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: mine, Name: "mine"}, &v1.Order{}))

	promote := server.PromoteRequest{Preparation: "podinfo-edge-v2"}
	if code := status(t, as.at(http.MethodPost, "/api/v1/namespaces/"+theirs+"/servings/podinfo-edge/promotion", promote), &out); code != http.StatusForbidden {
		t.Errorf("promote in team-b as team-a's tenant: %d %v, want 403", code, out)
	}
	var sv v1.Serving
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: theirs, Name: "podinfo-edge"}, &sv))
	if sv.Spec.PreparationName != "podinfo-edge-abc" {
		t.Errorf("team-b's Serving deploys %q after team-a's tenant promoted", sv.Spec.PreparationName)
	}
	if code := status(t, as.at(http.MethodPost, "/api/v1/namespaces/"+mine+"/servings/podinfo-edge/promotion", promote), &out); code != http.StatusOK {
		t.Errorf("promote in team-a as its tenant: %d %v, want 200", code, out)
	}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: mine, Name: "podinfo-edge"}, &sv))
	if sv.Spec.PreparationName != "podinfo-edge-v2" {
		t.Errorf("team-a's Serving deploys %q after its tenant promoted podinfo-edge-v2", sv.Spec.PreparationName)
	}

	// Events: team-b's change reaches the admin, not the tenant. A Serving created in team-a
	// after it marks where the tenant's stream has got to (one informer: the same order).
	tenantEvents := stream(t, as)
	adminEvents := stream(t, call{bearer: token})
	touch(t, theirs, "podinfo-edge")
	nextEvent(t, adminEvents, `"namespace":"team-b","name":"podinfo-edge"`)
	must(t, env.Client.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: mine, Name: "marker"}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: "marker"},
	}}))
	for _, data := range eventsUntil(t, tenantEvents, "change", `"namespace":"team-a","name":"marker"`) {
		if strings.Contains(data, `"namespace":"team-b"`) {
			t.Errorf("team-a's tenant is told of team-b: %s", data)
		}
	}
}

func TestStrangersAreRefusedAndTheUnboundSeeNothing(t *testing.T) {
	const ns = "team-stranger"
	delivering(t, ns)
	for _, tok := range []string{"garbage", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6a3ViZS1zeXN0ZW06ZGVmYXVsdCJ9.c2ln"} {
		var out map[string]string
		if code := status(t, call{server: k8sBase, method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": tok}}, &out); code != http.StatusUnauthorized {
			t.Errorf("login with %q: %d %v, want 401", tok, code, out)
		}
		if code := status(t, call{server: k8sBase, path: "/api/v1/servings", bearer: tok}, nil); code != http.StatusUnauthorized {
			t.Errorf("GET /api/v1/servings with %q: %d, want 401", tok, code)
		}
	}

	// A ServiceAccount with no binding signs in, and sees and does nothing.
	nobody := serviceAccountToken(t, ns, "nobody")
	as := call{server: k8sBase, cookie: login(t, k8sBase, nobody)}
	var l list[view.ServingSummary]
	if code := status(t, as.at("", "/api/v1/servings", nil), &l); code != http.StatusOK || len(l.Items) != 0 || l.Omitted != 0 {
		t.Errorf("GET /api/v1/servings as an unbound ServiceAccount: %d %+v, want 200 and nothing", code, l)
	}
	for _, path := range []string{"/api/v1/namespaces/" + ns + "/servings/podinfo-edge", "/api/v1/namespaces/" + ns + "/environments", "/api/v1/clusters"} {
		if code := status(t, as.at("", path, nil), nil); code != http.StatusForbidden {
			t.Errorf("GET %s as an unbound ServiceAccount: %d, want 403", path, code)
		}
	}
	order := server.OrderRequest{Name: "nobodys", Product: "podinfo", Environment: "edge"}
	if code := status(t, as.at(http.MethodPost, "/api/v1/namespaces/"+ns+"/orders", order), nil); code != http.StatusForbidden {
		t.Errorf("create an Order as an unbound ServiceAccount: %d, want 403", code)
	}
	// The public keys are for everyone signed in.
	if code := status(t, as.at("", "/api/v1/public-keys", nil), nil); code != http.StatusOK {
		t.Errorf("GET /api/v1/public-keys as an unbound ServiceAccount: %d, want 200", code)
	}
	// Its event stream says nothing of what changes in its own namespace.
	events, adminEvents := stream(t, as), stream(t, call{bearer: token})
	got := make(chan string, 1)
	go func() {
		for {
			line, err := events.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "data: ") {
				got <- line
				return
			}
		}
	}()
	touch(t, ns, "podinfo-edge")
	nextEvent(t, adminEvents, `"namespace":"team-stranger"`)
	select {
	case line := <-got:
		t.Errorf("an unbound ServiceAccount is told: %s", line)
	case <-time.After(2 * time.Second):
	}
}

func TestTheSharedTokenIsOptIn(t *testing.T) {
	var out map[string]string
	if code := status(t, call{server: k8sBase, method: http.MethodPost, path: "/api/v1/login", body: map[string]string{"token": token}}, &out); code != http.StatusUnauthorized {
		t.Errorf("login with the admin token on a server without --admin-token-file: %d %v, want 401", code, out)
	}
	if code := status(t, call{server: k8sBase, path: "/api/v1/servings", bearer: token}, nil); code != http.StatusUnauthorized {
		t.Errorf("the admin token as a bearer token on a server without --admin-token-file: %d, want 401", code)
	}
	var me server.Me
	if code := status(t, call{path: "/api/v1/me", bearer: token}, &me); code != http.StatusOK || !me.Admin || me.User != server.AdminUser {
		t.Errorf("the admin token on a server with it: %d %+v", code, me)
	}
}

func TestTheSessionCookieIsSecureOffLoopback(t *testing.T) {
	secureOf := func(url, tok string) bool { return login(t, url, tok).Secure }
	if secureOf(base, token) || secureOf(k8sBase, serviceAccountToken(t, "team-cookies", "someone")) {
		t.Error("a server on loopback marks its cookie Secure: a browser would not send it over plain HTTP")
	}
	c, err := client.New(serverConfig, client.Options{Scheme: env.Scheme})
	must(t, err)
	on := true
	for _, o := range []server.Options{
		{Addr: ":8090", AdminToken: token},                              // off loopback, as in a Pod behind an ingress
		{Addr: "127.0.0.1:8090", AdminToken: token, SecureCookies: &on}, // --secure-cookies
	} {
		srv, err := server.New(serverConfig, c, c, nil, o)
		must(t, err)
		ts := httptest.NewServer(srv.Handler())
		if !secureOf(ts.URL, token) {
			t.Errorf("%+v: the session cookie is not Secure", o)
		}
		res := do(t, call{server: ts.URL, method: http.MethodPost, path: "/api/v1/logout", body: map[string]string{}}, nil)
		for _, ck := range res.Cookies() {
			if ck.Name == server.SessionCookie && !ck.Secure {
				t.Errorf("%+v: the logout cookie is not Secure", o)
			}
		}
		ts.Close()
	}
}
