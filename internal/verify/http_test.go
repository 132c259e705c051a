package verify

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/funcr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/egress"
	"github.com/kokumi-dev/kokumi/internal/egress/egresstest"
)

// listen serves h on addr, counting the requests (egresstest.Serve).
var listen = egresstest.Serve

// logged returns a context whose logger writes into the returned buffer.
func logged() (context.Context, func() string) {
	var mu sync.Mutex
	var b strings.Builder
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		b.WriteString(args + "\n")
	}, funcr.Options{})
	return logf.IntoContext(context.Background(), log), func() string {
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}
}

// A canary's health endpoint, which the tenant serves, redirects the controller to what only
// the controller reaches: the cloud's metadata service, the kube-apiserver, another service on
// loopback. The run fails, and nothing is asked there, even under a successCondition that any
// answer passes.
func TestAGateEndpointThatRedirectsFailsTheRunWithoutFollowingIt(t *testing.T) {
	secret, secretHits := listen(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"AccessKeyId":"AKIAEXAMPLE","SecretAccessKey":"wJalrXUtnFEMI"}`))
	})
	var to atomic.Value
	canary, _ := listen(t, "127.0.0.2:0", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to.Load().(string), http.StatusFound)
	})
	// The admin allows the canary's address, and the secret's too (it is the hub's own: the
	// redirect alone must be refused).
	allowed, err := egress.ParseCIDRs(egress.FlagAllowedCIDRs, "127.0.0.1,127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	h := &HTTPRunner{Client: egress.Policy{Allowed: allowed}.Client()}
	for _, target := range []string{
		"http://169.254.169.254/latest/meta-data/iam/security-credentials/node",
		"https://127.0.0.1:6443/api/v1/namespaces/kube-system/secrets",
		secret.URL + "/credentials",
	} {
		to.Store(target)
		o := h.Run(context.Background(), &v1.HTTPVerification{URL: canary.URL + "/healthz", SuccessCondition: "true"})
		if o.Passed || !strings.Contains(o.Message, "answered 302 Found, a redirect, which Kokumi does not follow") ||
			strings.Contains(o.Message, target) || strings.Contains(o.Message, "AKIA") {
			t.Errorf("a redirect to %s: %+v", target, o)
		}
	}
	if secretHits.Load() != 0 {
		t.Errorf("the redirect was followed: %d requests", secretHits.Load())
	}
	// Shown, the Location is in the message: the tenant wrote it.
	o := h.Run(context.Background(), &v1.HTTPVerification{URL: canary.URL + "/healthz", SuccessCondition: "true", ShowResponse: true})
	if o.Passed || !strings.Contains(o.Message, "Location: "+secret.URL) {
		t.Errorf("shown: %+v", o)
	}
}

// A name that resolves to loopback is refused under the default policy: the controller's own
// endpoints (its metrics, its profiles) and the node's are not a gate's to reach.
func TestAGateURLWhoseNameResolvesToLoopbackIsRefused(t *testing.T) {
	srv, hits := listen(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, url := range []string{"http://localhost:" + port + "/metrics", srv.URL + "/debug/pprof/"} {
		o := (&HTTPRunner{}).Run(context.Background(), &v1.HTTPVerification{URL: url, SuccessCondition: "true"})
		if o.Passed || !strings.Contains(o.Message, "refused: 127.0.0.1 is a loopback address") || !strings.Contains(o.Message, "--verify-allowed-cidrs") {
			t.Errorf("%s: %+v", url, o)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests reached loopback", hits.Load())
	}
}

// rawServer answers every request with the raw HTTP answer given, and returns its URL.
func rawServer(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = http.ReadRequest(bufio.NewReader(c))
				_, _ = c.Write([]byte(answer))
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// What tenants read of an answer in status.rollout.verifications[].message: its status code
// and the verdict; the answer itself (and the status line's reason phrase, which is the
// server's to write) only with showResponse. The controller's log has the answer.
func TestTenantsSeeTheAnswerOnlyWhenTheAdminShowsIt(t *testing.T) {
	body := `{"status":"success","token":"s3cr3t-from-the-endpoint"}`
	url := rawServer(t, fmt.Sprintf("HTTP/1.1 200 s3cr3t-in-the-reason\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body))
	h := &HTTPRunner{Client: loopback.Client()}
	for _, cond := range []string{`response.body.status == "success"`, `response.body.status == "error"`, `response.body.nothing == 1`} {
		ctx, log := logged()
		o := h.Run(ctx, &v1.HTTPVerification{URL: url, SuccessCondition: cond})
		if strings.Contains(o.Message, "s3cr3t") || !strings.Contains(o.Message, "the answer: 200 OK in ") {
			t.Errorf("%s, hidden: %+v", cond, o)
		}
		if !strings.Contains(log(), "s3cr3t-from-the-endpoint") {
			t.Errorf("%s: the controller's log has not the answer: %s", cond, log())
		}
		o = h.Run(context.Background(), &v1.HTTPVerification{URL: url, SuccessCondition: cond, ShowResponse: true})
		if !strings.Contains(o.Message, "s3cr3t-from-the-endpoint") || strings.Contains(o.Message, "s3cr3t-in-the-reason") {
			t.Errorf("%s, shown: %+v", cond, o)
		}
	}
}
