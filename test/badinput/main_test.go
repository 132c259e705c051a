// Package badinput walks a table of bad inputs across Kokumi's six kinds and the Cluster
// credentials Secret, against a real kube-apiserver with Argo CD's real CRDs, every reconciler
// Kokumi ships running as its own ServiceAccount, and real registries on loopback: each bad input
// ends, within a deadline, in an API refusal or a Ready condition whose message names the field
// and the fix, and what ran before keeps running. The tests play Argo CD by writing the
// Applications' status. docs/bad-input.md is generated from the table.
package badinput

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var (
	env *harness.Env
	// cfg is the controller's configuration: the shipped defaults, the bundled registry on
	// loopback, and a shorter probe period so that a Cluster's fault shows within the deadlines.
	cfg config.Config
	// bundled plays the bundled registry, authentication on.
	bundled    *registry.Registry
	bundledDir string
	// sources holds the charts, bundles and images the Products name.
	sources *registry.Registry
	// failing answers every request with 500; hanging accepts every request and never answers.
	failing *httptest.Server
	hanging *stall
	// memberToken is a token of a ServiceAccount of the hub, which the Clusters sign in with:
	// each Cluster's server is a proxy in front of the hub's real API server.
	memberToken string
	// hub reaches the hub's API server for the proxies.
	hub     *url.URL
	hubConn http.RoundTripper
)

// probePeriod is how often each Cluster is probed here (30 s installed).
const probePeriod = 10 * time.Second

func TestMain(m *testing.M) {
	harness.QuietLogs()
	// The cases wait on the controller, not on the CPU: run them all at once (-parallel still
	// overrides this).
	if err := flag.Set("test.parallel", "64"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	harness.Main(suite{m}, &env)
}

type suite struct{ m *testing.M }

// Run starts the registries, the faulty servers and a manager with every reconciler around
// the tests.
func (s suite) Run() int {
	if err := s.setUp(); err != nil {
		fmt.Fprintln(os.Stderr, "set up:", err)
		return 1
	}
	defer s.tearDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every reconciler runs as the controller's ServiceAccount with the shipped RBAC.
	sa, err := env.ControllerConfig(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if memberToken, err = harness.IssueToken(ctx, env.Config, "badinput-members", "member"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := controller.NewManager(sa, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return harness.RunWithManager(ctx, mgr, s.m.Run)
}

func (suite) setUp() error {
	var err error
	if bundledDir, err = os.MkdirTemp("", "kokumi-bundled-"); err != nil {
		return err
	}
	cfg = config.Default()
	cfg.ProbePeriod = probePeriod
	// The bundled registry runs as Kokumi ships it, authentication on: it signs in the pusher and
	// the puller of the Secret the controller creates at start.
	bundled, err = registry.StartWithOptions("127.0.0.1:0", registry.Options{Dir: bundledDir, Credentials: func() (oci.RegistryCredentials, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var s corev1.Secret
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: oci.RegistryCredentialsSecret}, &s); err != nil {
			return oci.RegistryCredentials{}, err
		}
		return oci.ParseRegistryCredentials(s.Data)
	}})
	if err != nil {
		return err
	}
	cfg.BundledRegistry = bundled.Addr
	dir, err := os.MkdirTemp("", "kokumi-sources-")
	if err != nil {
		return err
	}
	if sources, err = registry.Start("127.0.0.1:0", dir, false); err != nil {
		return err
	}
	failing = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "the registry's storage is down", http.StatusInternalServerError)
	}))
	hanging = newStall()
	for _, ns := range []string{cfg.Namespace, cfg.ArgoCDNamespace} {
		if err := env.CreateNamespace(context.Background(), ns); err != nil {
			return err
		}
	}
	if hub, err = url.Parse(env.Config.Host); err != nil {
		return fmt.Errorf("the hub's address %q: %w", env.Config.Host, err)
	}
	if hubConn, err = rest.TransportFor(rest.AnonymousClientConfig(env.Config)); err != nil {
		return fmt.Errorf("reach the hub: %w", err)
	}
	return nil
}

func (suite) tearDown() {
	members.stopAll()
	if hanging != nil {
		hanging.Close()
	}
	if failing != nil {
		failing.Close()
	}
	if sources != nil {
		_ = sources.Stop()
	}
	if bundled != nil {
		_ = bundled.Stop()
	}
	_ = os.RemoveAll(bundledDir)
}

// stall is a server that accepts every request and answers none until the request gives up or
// the server closes.
type stall struct {
	*httptest.Server
	release chan struct{}
	once    sync.Once
}

func newStall() *stall {
	s := &stall{release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.hang))
	return s
}

func (s *stall) hang(_ http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.release:
	}
	panic(http.ErrAbortHandler) // drop the connection, answer nothing
}

// Close lets every waiting request go and stops the server.
func (s *stall) Close() {
	s.once.Do(func() { close(s.release) })
	s.Server.Close()
}

// Modes of a member's server.
const (
	serve int32 = iota // pass every request to the hub's API server
	fail               // answer 500
	hang               // answer nothing
)

// member is a Cluster's server: a TLS proxy on loopback in front of the hub's real API server,
// whose mode a case switches to make the server fail or hang.
type member struct {
	srv     *httptest.Server
	mode    atomic.Int32
	release chan struct{}
	once    sync.Once
}

// memberSet keeps every member, to stop them at the end.
type memberSet struct {
	mu  sync.Mutex
	all []*member
}

var members memberSet

func newMember() *member {
	m := &member{release: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(hub)
	proxy.Transport = hubConn
	m.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch m.mode.Load() {
		case fail:
			http.Error(w, "etcdserver: leader changed", http.StatusInternalServerError)
		case hang:
			select {
			case <-r.Context().Done():
			case <-m.release:
			}
			panic(http.ErrAbortHandler)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	m.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	m.srv.StartTLS()
	members.mu.Lock()
	members.all = append(members.all, m)
	members.mu.Unlock()
	return m
}

// URL is the member's server, as a Cluster names it.
func (m *member) URL() string { return m.srv.URL }

// CA is the PEM certificate that verifies the member's server.
func (m *member) CA() []byte { return pemCertificate(m.srv.Certificate().Raw) }

func (s *memberSet) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.all {
		m.once.Do(func() { close(m.release) })
		m.srv.Close()
	}
}
