// Package metrics tests Kokumi's metrics endpoint as `kokumi controller` serves it: the whole
// controller manager, run as the controller's ServiceAccount with the shipped RBAC against a real
// kube-apiserver, serving its metrics over HTTPS behind the API server's authentication and
// authorization; and the Prometheus rules and Grafana dashboard of config/prometheus against
// what it serves.
package metrics

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	ociregistry "github.com/kokumi-dev/kokumi/internal/oci/registry"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var (
	env *harness.Env
	// metricsURL is where the manager serves its metrics; pprofURL, Go's profiles.
	metricsURL, pprofURL string
	// registry holds the artifacts of the Preparations the tests deploy.
	registry *ociregistry.Registry
	cfg      = config.Config{
		Namespace:       "kokumi-system",
		ArgoCDNamespace: "argocd",
		ProbePeriod:     2 * time.Second,
		SyncRetry:       argocd.DefaultSyncRetry,
		// A deleted Cluster stops waiting for its Applications soon after its server is gone.
		UnreachableClusterDeletion: 6 * time.Second,
		ApplicationWriters:         4,
	}
)

// waitTimeout bounds every wait: generous, for a loaded machine.
const waitTimeout = 60 * time.Second

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(suite{m}, &env)
}

// suite runs the tests with the whole manager started.
type suite struct{ m *testing.M }

func (s suite) Run() int {
	ctx := context.Background()
	mgr, err := setUp(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "set up:", err)
		return 1
	}
	defer func() { _ = registry.Stop() }()
	return harness.RunWithManager(ctx, mgr, func() int {
		if err := waitServing(); err != nil {
			fmt.Fprintln(os.Stderr, "set up:", err)
			return 1
		}
		return s.m.Run()
	})
}

// setUp installs config/rbac, starts a registry, and builds every reconciler, as
// `kokumi controller --metrics-secure` does, as the controller's ServiceAccount.
func setUp(ctx context.Context) (interface{ Start(context.Context) error }, error) {
	sa, err := env.ControllerConfig(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kokumi-metrics-registry-")
	if err != nil {
		return nil, fmt.Errorf("create the registry's directory: %w", err)
	}
	if registry, err = ociregistry.Start("127.0.0.1:0", dir, false); err != nil {
		return nil, fmt.Errorf("start a registry: %w", err)
	}
	cfg.BundledRegistry = registry.Addr
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metricsURL = "https://" + addr + "/metrics"
	pprofAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	pprofURL = "http://" + pprofAddr + "/debug/pprof/"
	mgr, err := controller.NewManager(sa, controller.Options{MetricsAddr: addr, MetricsSecure: true, ProbeAddr: "0", PprofAddr: pprofAddr, Config: cfg})
	if err != nil {
		_ = registry.Stop()
		return nil, err
	}
	return mgr, nil
}

// waitServing waits until the metrics endpoint answers (401 to a scrape without a token).
func waitServing() error {
	deadline := time.Now().Add(waitTimeout)
	for {
		code, _, err := scrape("")
		if err == nil && code == http.StatusUnauthorized {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the metrics endpoint %s does not answer: %d, %w", metricsURL, code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// scrape gets the metrics with a bearer token (none when empty). The certificate is the
// controller's self-signed one, as a ServiceMonitor with insecureSkipVerify sees it.
func scrape(token string) (int, string, error) {
	return scrapePath(metricsURL, token)
}

// scrapePath gets url of the metrics' server as scrape does.
func scrapePath(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the controller's certificate is self-signed
	}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// readerToken is a token of a ServiceAccount bound to the shipped kokumi-metrics-reader,
// as Prometheus' is.
func readerToken(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	const ns, name = "monitoring", "prometheus"
	tok, err := harness.IssueToken(ctx, env.Config, ns, name)
	must(t, err)
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-kokumi-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "kokumi-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}
	if err := env.Client.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return tok
}

// exposition is one scrape: the type of each metric family, and the value of each series
// (name and labels as the text format writes them).
type exposition struct {
	types  map[string]string
	series map[string]float64
}

func parse(t *testing.T, body string) exposition {
	t.Helper()
	e := exposition{types: map[string]string{}, series: map[string]float64{}}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			e.types[f[2]] = f[3]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		e.series[line[:i]] = v
	}
	return e
}

// scrapeAs scrapes with the reader's token and parses what it got.
func scrapeAs(t *testing.T, token string) exposition {
	t.Helper()
	code, body, err := scrape(token)
	must(t, err)
	if code != http.StatusOK {
		t.Fatalf("scrape: HTTP %d: %s", code, body)
	}
	return parse(t, body)
}

// value is the series' value and whether it is there.
func (e exposition) value(series string) (float64, bool) {
	v, ok := e.series[series]
	return v, ok
}

// metricEquals waits until the scrape shows series with value want.
func metricEquals(t *testing.T, token, series string, want float64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s = %v", series, want), func() error {
		got, ok := scrapeAs(t, token).value(series)
		if !ok {
			return fmt.Errorf("no series %s", series)
		}
		if got != want {
			return fmt.Errorf("%s = %v", series, got)
		}
		return nil
	})
}

// metricGone waits until no series of the scrape starts with prefix.
func metricGone(t *testing.T, token, prefix string) {
	t.Helper()
	eventually(t, "no series "+prefix+"…", func() error {
		for s := range scrapeAs(t, token).series {
			if strings.HasPrefix(s, prefix) {
				return fmt.Errorf("still %s", s)
			}
		}
		return nil
	})
}

// member is a fake member cluster's API server: it answers /version, over TLS.
type member struct {
	srv *httptest.Server
}

func startMember(t *testing.T) *member {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"major": "1", "minor": "37", "gitVersion": "v1.37.2-fake"})
	}))
	t.Cleanup(srv.Close)
	return &member{srv: srv}
}

// credentials are a token and the server's CA, as a credentials Secret holds them.
func (m *member) credentials() map[string][]byte {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.srv.Certificate().Raw})
	return map[string][]byte{"token": []byte("member-token"), "ca.crt": ca}
}

// createCluster registers a Cluster at server with credentials (none when nil), deleted when
// the test ends.
func createCluster(t *testing.T, name, server string, creds map[string][]byte, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	if creds != nil {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace}, Data: creds}
		must(t, env.Client.Create(ctx, s))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	}
	c := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: v1.ClusterSpec{Server: server, CredentialsRef: v1.LocalObjectReference{Name: name}}}
	must(t, env.Client.Create(ctx, c))
	t.Cleanup(func() { deleteAndWait(t, c) })
}

// deleteAndWait deletes obj and waits until it is gone.
func deleteAndWait(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
		t.Errorf("delete %s: %v", obj.GetName(), err)
		return
	}
	eventually(t, "deleted "+obj.GetName(), func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %w", err)
	})
}

// unreachable is an https URL nothing listens on.
func unreachable(t *testing.T) string {
	t.Helper()
	addr, err := freeAddr()
	must(t, err)
	return "https://" + addr
}

// eventually polls check every 200ms until it passes, failing the test with its last error
// once waitTimeout passes.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, waitTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// must is harness.Must: the test stops at an error.
var must = harness.Must
