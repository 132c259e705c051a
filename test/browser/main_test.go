// Package browser tests Kokumi's web UI in a real browser: a headless Chromium (Debian's
// /usr/bin/chromium) driven by playwright-core from Node.js (test/browser/node_modules), against
// the real server running in-process on loopback over a real API server (test/harness), with
// the objects each scenario needs written directly (no controller runs). Each test runs one
// scenario of scenarios.mjs and fails with its output when the script exits non-zero; the
// script saves a screenshot of each step into screenshots/.
//
// Install what it needs with `make browser-deps` (npm ci --prefix test/browser, and
// apt-get install -y chromium). Without it every test fails and says so.
package browser

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ociregistry "github.com/kokumi-dev/kokumi/internal/oci/registry"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/server"
	"github.com/kokumi-dev/kokumi/test/harness"
)

const (
	// token is the server's opt-in admin token, which the scenarios sign in with.
	token    = "browser-test-token-0123456789"
	argoNS   = "argocd"
	kokumiNS = "kokumi-system"
	chromium = "/usr/bin/chromium"
	// installHint is the command that installs what the tests need.
	installHint = "run `make browser-deps` (npm ci --prefix test/browser, and apt-get install -y chromium)"
)

var (
	env *harness.Env
	// base is where the server listens; gate lets a test stop it and start it again there.
	base string
	gate *gateListener
	// control is where scenarios.mjs asks the test to act (control.go).
	control string
	// registry holds the Preparations' artifacts.
	registry *ociregistry.Registry
	// missing says what is not installed; every test then fails with it.
	missing error
)

func TestMain(m *testing.M) {
	harness.QuietLogs()
	if missing = dependencies(); missing != nil {
		os.Exit(m.Run()) // each test fails, naming what to install
	}
	harness.Main(runWithServer{m}, &env)
}

// dependencies reports what the browser tests need and do not find.
func dependencies() error {
	var errs []string
	if _, err := exec.LookPath("node"); err != nil {
		errs = append(errs, "node (Node.js 18 or newer) is not on PATH")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "playwright-core", "package.json")); err != nil {
		errs = append(errs, "test/browser/node_modules/playwright-core is missing")
	}
	if _, err := os.Stat(chromium); err != nil {
		errs = append(errs, chromium+" is missing")
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("the browser tests cannot run: %s: %s", strings.Join(errs, "; "), installHint)
}

// runWithServer runs the server in a manager around the tests, on a loopback port it can stop
// and reopen.
type runWithServer struct{ m *testing.M }

func (r runWithServer) Run() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	for _, ns := range []string{argoNS, kokumiNS} {
		if err := env.CreateNamespace(ctx, ns); err != nil {
			return fail(err)
		}
	}
	dir, err := os.MkdirTemp("", "kokumi-browser-registry-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	if registry, err = ociregistry.Start("127.0.0.1:0", dir, false); err != nil {
		return fail(err)
	}
	defer func() { _ = registry.Stop() }()
	if gate, err = newGateListener("127.0.0.1:0"); err != nil {
		return fail(err)
	}
	base = "http://" + gate.Addr().String()
	stopControl, err := startControl()
	if err != nil {
		return fail(err)
	}
	defer stopControl()
	setup := func(mgr ctrl.Manager, shared controller.Shared) error {
		c := shared.Config
		o := server.Options{AdminToken: token, ArgoCDNamespace: c.ArgoCDNamespace, ArgoCDURL: "https://argocd.example",
			Namespace: c.Namespace, BundledRegistry: registry.Addr}
		return server.AddToManager(mgr, shared.ArgoCD, o, gate)
	}
	cfg := config.Config{ArgoCDNamespace: argoNS, Namespace: kokumiNS, BundledRegistry: registry.Addr}
	mgr, err := controller.NewManager(env.Config, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg}, setup)
	if err != nil {
		return fail(err)
	}
	code := harness.RunWithManager(ctx, mgr, func() int {
		if err := fixtures(ctx); err != nil {
			return fail(fmt.Errorf("create the scenarios' objects: %w", err))
		}
		if err := waitForServer(ctx); err != nil {
			return fail(err)
		}
		return r.m.Run()
	})
	_ = gate.Close()
	return code
}

// waitForServer waits until the server answers and its cache holds the fixtures.
func waitForServer(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/namespaces/"+teamNS+"/servings/web", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server at %s does not answer: %w", base, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scenario runs one scenario of scenarios.mjs and fails the test with its output when it fails.
func scenario(t *testing.T, name string) {
	t.Helper()
	if missing != nil {
		t.Fatal(missing)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	shots, err := filepath.Abs("screenshots")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "node", "scenarios.mjs", name)
	cmd.Env = append(os.Environ(), "KOKUMI_BASE="+base, "KOKUMI_TOKEN="+token, "KOKUMI_CONTROL="+control,
		"KOKUMI_SCREENSHOTS="+shots, "KOKUMI_CHROMIUM="+chromium, "KOKUMI_VIEWER_TOKEN="+viewerToken)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("scenario %s did not finish in time:\n%s", name, out)
	}
	if err != nil {
		t.Fatalf("scenario %s failed (%v):\n%s", name, err, out)
	}
	t.Logf("scenario %s:\n%s", name, strings.TrimSpace(string(out)))
}

// gateListener is a loopback listener that Stop closes (its port refuses connections, and the
// connections it accepted are cut, as when the server stops) and Start opens again on the same
// port; the server behind it does not notice, and keeps its sessions.
type gateListener struct {
	addr string
	mu   sync.Mutex
	ln   net.Listener
	// open is closed while the gate is open; a stopped gate waits for the next one.
	open   chan struct{}
	conns  map[net.Conn]struct{}
	closed bool
}

func newGateListener(addr string) (*gateListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	return &gateListener{addr: ln.Addr().String(), ln: ln, open: open, conns: map[net.Conn]struct{}{}}, nil
}

func (g *gateListener) Accept() (net.Conn, error) {
	for {
		g.mu.Lock()
		ln, open, closed := g.ln, g.open, g.closed
		g.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		<-open
		if ln == nil {
			continue
		}
		c, err := ln.Accept()
		if err != nil {
			g.mu.Lock()
			stopped := g.ln != ln || g.closed
			g.mu.Unlock()
			if stopped {
				continue // stopped, or closed: look again
			}
			return nil, err
		}
		g.mu.Lock()
		g.conns[c] = struct{}{}
		g.mu.Unlock()
		return &trackedConn{Conn: c, g: g}, nil
	}
}

// Stop closes the port and every connection it accepted.
func (g *gateListener) Stop() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
	if g.ln != nil {
		_ = g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		_ = c.Close()
	}
	g.conns = map[net.Conn]struct{}{}
	return nil
}

// Start opens the same port again.
func (g *gateListener) Start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		return nil
	}
	var ln net.Listener
	var err error
	for range 50 { // the port may linger a moment
		if ln, err = net.Listen("tcp", g.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("listen on %s again: %w", g.addr, err)
	}
	g.ln = ln
	close(g.open)
	return nil
}

func (g *gateListener) Close() error {
	g.mu.Lock()
	g.closed = true
	ln := g.ln
	g.ln = nil
	select {
	case <-g.open:
	default:
		close(g.open)
	}
	g.mu.Unlock()
	if ln != nil {
		return ln.Close()
	}
	return nil
}

func (g *gateListener) Addr() net.Addr {
	addr, _ := net.ResolveTCPAddr("tcp", g.addr)
	return addr
}

type trackedConn struct {
	net.Conn
	g    *gateListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.g.mu.Lock()
		delete(c.g.conns, c.Conn)
		c.g.mu.Unlock()
	})
	err := c.Conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// startControl serves the actions scenarios.mjs asks for: POST /<action>, answered 200 once
// done, or 500 with the error.
func startControl() (func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	control = "http://" + ln.Addr().String()
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		act, ok := actions[name]
		if !ok {
			http.Error(w, "no action "+name, http.StatusNotFound)
			return
		}
		if err := act(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}
