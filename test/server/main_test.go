// Package server tests Kokumi's API and UI server against a real API server with Argo CD's
// real CRDs: the server reads through a manager's cache, as it does when deployed, and runs as
// a user holding exactly the shipped role (config/server/role.yaml), so that a missing or extra
// verb of its own fails a test. Two servers run: one with the opt-in admin token (base), which
// most tests sign in with, and one without (k8sBase), where only Kubernetes identities sign in.
package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/server"
	"github.com/kokumi-dev/kokumi/test/harness"
)

const (
	// token is the admin token of the server at base; the server at k8sBase has none.
	token = "test-token-0123456789"
	// serverUser is the identity the servers run as, bound to the shipped role.
	serverUser = "kokumi-server"
	argoURL    = "https://argocd.example"
	argoNS     = "argocd"
	kokumiNS   = "kokumi-system"
	waitFor    = 30 * time.Second
	pollStep   = 100 * time.Millisecond
)

var (
	env *harness.Env
	// base is the server with the opt-in admin token; k8sBase the one without.
	base, k8sBase string
	// hardBase is a server with the admin token and short timeouts, which the attacker tests
	// hold connections to (attackers_test.go).
	hardBase string
	// serverConfig reaches the API server as serverUser.
	serverConfig *rest.Config
)

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(runWithServer{m}, &env)
}

// runWithServer runs the server alone in a manager around the tests, on a loopback port.
type runWithServer struct{ m *testing.M }

func (r runWithServer) Run() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := env.CreateNamespaces(ctx, argoNS, kokumiNS); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var err error
	if serverConfig, err = asShippedServerRole(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := env.AggregateTenantRoles(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	withAdmin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	withoutAdmin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	hardened, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	base, k8sBase = "http://"+withAdmin.Addr().String(), "http://"+withoutAdmin.Addr().String()
	hardBase = "http://" + hardened.Addr().String()
	setup := func(mgr ctrl.Manager, shared controller.Shared) error {
		c := shared.Config
		o := server.Options{AdminToken: token, ArgoCDNamespace: c.ArgoCDNamespace, ArgoCDURL: argoURL, Namespace: c.Namespace}
		if err := server.AddToManager(mgr, shared.ArgoCD, withShortTimeouts(o), hardened); err != nil {
			return err
		}
		if err := server.AddToManager(mgr, shared.ArgoCD, o, withAdmin); err != nil {
			return err
		}
		o.AdminToken = ""
		return server.AddToManager(mgr, shared.ArgoCD, o, withoutAdmin)
	}
	cfg := config.Config{ArgoCDNamespace: argoNS, Namespace: kokumiNS}
	mgr, err := controller.NewManager(serverConfig, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg}, setup)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return harness.RunWithManager(ctx, mgr, r.m.Run)
}

// asShippedServerRole applies the server's shipped role (config/server/role.yaml) and binds it
// to serverUser, as config/server binds it to the ServiceAccount kokumi-server, and returns a
// config for that user.
func asShippedServerRole(ctx context.Context) (*rest.Config, error) {
	if _, err := env.Kubectl(ctx, "apply", "-f", filepath.Join(env.Assets.Root, "config", "server", "role.yaml")); err != nil {
		return nil, fmt.Errorf("apply the server's role: %w", err)
	}
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: serverUser}}
	bindings := []client.Object{&rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: serverUser}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kokumi-server"},
	}}
	for _, ns := range []string{argoNS, kokumiNS} {
		bindings = append(bindings, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: serverUser}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kokumi-server"},
		})
	}
	for _, b := range bindings {
		if err := env.Client.Create(ctx, b); err != nil {
			return nil, fmt.Errorf("bind the server's role: %w", err)
		}
	}
	return env.AddUser(serverUser)
}

// serviceAccountToken creates a ServiceAccount in ns and returns a token of it, as
// `kubectl create token` does.
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	must(t, env.CreateNamespace(ctx, ns))
	must(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
	cs, err := kubernetes.NewForConfig(env.Config)
	must(t, err)
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	must(t, err)
	return tr.Status.Token
}

// bindClusterRole binds a ClusterRole in ns to the ServiceAccount saNS/sa.
func bindClusterRole(t *testing.T, ns, role, saNS, sa string) {
	t.Helper()
	must(t, env.Client.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa + "-" + role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNS, Name: sa}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
	}))
}

// call sends a request to a server (base unless server is set) with a bearer token, or with
// the given cookie, and decodes a JSON answer into out when out is not nil.
type call struct {
	server       string
	method, path string
	body         any
	bearer       string
	cookie       *http.Cookie
	contentType  string
	// header is sent as well, as a browser's Origin and Sec-Fetch-Site.
	header http.Header
}

func do(t testing.TB, c call, out any) *http.Response {
	t.Helper()
	var body io.Reader
	if c.body != nil {
		data, err := json.Marshal(c.body)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(data)
	}
	if c.method == "" {
		c.method = http.MethodGet
	}
	if c.server == "" {
		c.server = base
	}
	req, err := http.NewRequest(c.method, c.server+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	} else if c.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", c.method, c.path, data, err)
		}
	}
	return res
}

// get reads path as the admin until check passes: the server reads through a cache that
// catches up with the API server shortly after a write.
func get[T any](t *testing.T, path string, check func(T) error) T {
	t.Helper()
	return getAs(t, call{path: path, bearer: token}, check)
}

// getAs sends c (a GET) until check passes on a 200 answer.
func getAs[T any](t *testing.T, c call, check func(T) error) T {
	t.Helper()
	path := c.path
	deadline := time.Now().Add(waitFor)
	for {
		var v T
		res := do(t, c, &v)
		err := fmt.Errorf("status %d", res.StatusCode)
		if res.StatusCode == http.StatusOK {
			err = check(v)
		}
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", path, err)
		}
		time.Sleep(pollStep)
	}
}

// nextEvent reads server-sent events until a change whose data contains want.
func nextEvent(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	eventsUntil(t, r, "change", want)
}

// eventsUntil reads server-sent events until one of the given kind whose data contains want,
// and returns the data of every event of that kind it read, that one last.
func eventsUntil(t *testing.T, r *bufio.Reader, kind, want string) []string {
	t.Helper()
	type result struct {
		seen []string
		err  error
	}
	found := make(chan result, 1)
	go func() {
		var seen []string
		event := ""
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				found <- result{seen, err}
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == kind:
				seen = append(seen, strings.TrimPrefix(line, "data: "))
				if strings.Contains(line, want) {
					found <- result{seen, nil}
					return
				}
			case line == "":
				event = ""
			}
		}
	}()
	select {
	case res := <-found:
		if res.err != nil {
			t.Fatalf("read events: %v", res.err)
		}
		return res.seen
	case <-time.After(waitFor):
		t.Fatalf("no %s event naming %s", kind, want)
	}
	return nil
}
