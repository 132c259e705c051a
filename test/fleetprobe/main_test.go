// Package fleetprobe measures the Cluster prober at fleet scale against a real kube-apiserver:
// thousands of Clusters whose servers are one loopback TLS server, probed every 30 s.
package fleetprobe

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kconfig "github.com/kokumi-dev/kokumi/internal/config"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/controller/clusters"
	"github.com/kokumi-dev/kokumi/internal/dev/bench"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var (
	env     *harness.Env
	members *fakeMembers
	config  = kconfig.Config{
		Namespace:       "kokumi-system",
		ArgoCDNamespace: "argocd",
		ProbePeriod:     30 * time.Second,
		ProbeWorkers:    clusters.DefaultProbeWorkers,
		ProbeKeepAlive:  true,
	}
)

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(suite{m}, &env)
}

type suite struct{ m *testing.M }

func (s suite) Run() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	if members, err = startMembers(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer members.Close()
	sa, err := env.ControllerConfig(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sa.QPS, sa.Burst = -1, 0 // as a manager's own configuration: the API server's fairness limits
	scheme, err := kscheme.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := ctrl.NewManager(sa, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := clusters.Setup(mgr, config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return harness.RunWithManager(ctx, mgr, s.m.Run)
}

// fakeMembers plays the API servers of many member clusters behind one TLS listener: cluster
// name's server is <URL>/clusters/<name>; it answers /version to memberToken, or 401 while the
// cluster is refused.
type fakeMembers struct {
	srv *httptest.Server
	CA  []byte

	probes  atomic.Int64
	conns   atomic.Int64 // connections opened
	refused sync.Map     // name → true

	mu      sync.Mutex
	answers map[string][]answer // the last answers per cluster
}

type answer struct {
	at time.Time
	ok bool
}

const memberToken = "fleet-token-0123456789"

func startMembers() (*fakeMembers, error) {
	cert, caPEM, err := bench.SelfSigned()
	if err != nil {
		return nil, err
	}
	m := &fakeMembers{CA: caPEM, answers: map[string][]answer{}}
	m.srv = httptest.NewUnstartedServer(http.HandlerFunc(m.serve))
	m.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	m.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	m.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			m.conns.Add(1)
		}
	}
	m.srv.StartTLS()
	return m, nil
}

func (m *fakeMembers) Close() { m.srv.Close() }

func (m *fakeMembers) server(name string) string { return m.srv.URL + "/clusters/" + name }

func (m *fakeMembers) serve(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, "/clusters/")
	name, ok2 := strings.CutSuffix(name, "/version")
	if !ok || !ok2 {
		http.NotFound(w, r)
		return
	}
	m.probes.Add(1)
	_, refused := m.refused.Load(name)
	good := !refused && r.Header.Get("Authorization") == "Bearer "+memberToken
	m.mu.Lock()
	m.answers[name] = append(m.answers[name], answer{at: time.Now(), ok: good})
	if a := m.answers[name]; len(a) > 8 {
		m.answers[name] = a[1:]
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !good {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
		return
	}
	_, _ = fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2","platform":"linux/amd64"}`)
}

// lastAnswer is when the cluster's server last answered ok (or not) before t.
func (m *fakeMembers) lastAnswer(name string, ok bool, before time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.answers[name]
	for i := len(a) - 1; i >= 0; i-- {
		if a[i].ok == ok && !a[i].at.After(before) {
			return a[i].at, true
		}
	}
	return time.Time{}, false
}

// burst counts the answers given from since to until, and how many of them came in the first
// within of their ProbeTick.
func (m *fakeMembers) burst(since, until time.Time, within time.Duration) (inBurst, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, as := range m.answers {
		for _, a := range as {
			if a.at.Before(since) || a.at.After(until) {
				continue
			}
			total++
			if a.at.Sub(a.at.Truncate(clusters.ProbeTick)) < within {
				inBurst++
			}
		}
	}
	return inBurst, total
}
