// Package server tests Kokumi's API and UI server against a real API server with Argo CD's
// real CRDs: the server reads through a manager's cache, as it does when deployed.
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
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/server"
	"github.com/kokumi-dev/kokumi/test/harness"
)

const (
	token    = "test-token-0123456789"
	argoURL  = "https://argocd.example"
	argoNS   = "argocd"
	kokumiNS = "kokumi-system"
	waitFor  = 30 * time.Second
	pollStep = 100 * time.Millisecond
)

var (
	env  *harness.Env
	base string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	harness.Main(runWithServer{m}, &env)
}

// runWithServer runs the server alone in a manager around the tests, on a loopback port.
type runWithServer struct{ m *testing.M }

func (r runWithServer) Run() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{argoNS, kokumiNS} {
		if err := env.CreateNamespace(ctx, ns); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	base = "http://" + ln.Addr().String()
	setup := func(mgr ctrl.Manager, c controller.Config) error {
		return server.AddToManager(mgr, server.Options{Token: token, ArgoCDNamespace: c.ArgoCDNamespace, ArgoCDURL: argoURL, Namespace: c.Namespace}, ln)
	}
	cfg := controller.Config{ArgoCDNamespace: argoNS, Namespace: kokumiNS}
	mgr, err := controller.NewManager(env.Config, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg}, setup)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return harness.RunWithManager(ctx, mgr, r.m.Run)
}

// call sends a request with the admin token as a bearer token, or with the given cookie, and
// decodes a JSON answer into out when out is not nil.
type call struct {
	method, path string
	body         any
	bearer       string
	cookie       *http.Cookie
	contentType  string
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
	req, err := http.NewRequest(c.method, base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
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
	deadline := time.Now().Add(waitFor)
	for {
		var v T
		res := do(t, call{path: path, bearer: token}, &v)
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

// nextEvent reads server-sent events until one of the given kind whose data contains want.
func nextEvent(t *testing.T, r *bufio.Reader, kind, want string) {
	t.Helper()
	found := make(chan error, 1)
	go func() {
		event := ""
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				found <- err
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == kind && strings.Contains(line, want):
				found <- nil
				return
			case line == "":
				event = ""
			}
		}
	}()
	select {
	case err := <-found:
		if err != nil {
			t.Fatalf("read events: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatalf("no %s event naming %s", kind, want)
	}
}
