package serving

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/egress/egresstest"
)

// An admin points a gate at the canary's health endpoint, which the tenant serves; it answers
// with a redirect to what only the controller reaches: the cloud's metadata service, the hub's
// kube-apiserver, or another service on the controller's loopback, whose answers would land in
// the Serving's status, which the tenant reads. The run fails without following it, under a
// successCondition any answer passes, and nothing of the target's is in the status.
func TestAGateEndpointRedirectingToWhatOnlyTheControllerReachesFailsTheRun(t *testing.T) {
	var secretHits atomic.Int32
	secret := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		secretHits.Add(1)
		_, _ = w.Write([]byte(`{"AccessKeyId":"AKIAEXAMPLE"}`))
	}))
	defer secret.Close()
	for _, tc := range []struct{ name, to string }{
		{"metadata", "http://169.254.169.254/latest/meta-data/iam/security-credentials/node"},
		{"apiserver", strings.TrimRight(env.Config.Host, "/") + "/api/v1/namespaces/kube-system/secrets"},
		{"loopback", secret.URL + "/credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			canary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, tc.to, http.StatusFound)
			}))
			defer canary.Close()
			_, rest, _ := f.gatedCanary("eg", v1.Verification{Name: "health", HTTP: &v1.HTTPVerification{URL: canary.URL + "/healthz", SuccessCondition: "true"}})
			s := f.ready(v1.ReasonRolloutHalted, "it failed on verification health of wave canary")
			v := s.Status.Rollout.Verifications
			if len(v) != 1 || v[0].Phase != v1.VerificationFailed || !strings.Contains(v[0].Message, "answered 302 Found, a redirect, which Kokumi does not follow") ||
				strings.Contains(v[0].Message, tc.to) || strings.Contains(v[0].Message, "AKIA") {
				t.Fatalf("verifications %+v", v)
			}
			f.stillTargets("", rest)
		})
	}
	if secretHits.Load() != 0 {
		t.Errorf("a redirect was followed: %d requests reached the loopback service", secretHits.Load())
	}
}

// The hub's policy here allows 127.0.0.1 alone: a gate at another loopback address (the
// controller's metrics, a node agent) is refused before anything is sent.
func TestAGateAtALoopbackAddressTheAdminDidNotAllowIsRefused(t *testing.T) {
	srv, hits := egresstest.Serve(t, "127.0.0.2:0", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	f := newFixture(t)
	f.gatedCanary("el", v1.Verification{Name: "metrics", HTTP: &v1.HTTPVerification{URL: srv.URL + "/metrics", SuccessCondition: "true"}})
	s := f.ready(v1.ReasonRolloutHalted, "it failed on verification metrics of wave canary")
	v := s.Status.Rollout.Verifications
	if len(v) != 1 || !strings.Contains(v[0].Message, "refused: 127.0.0.2 is a loopback address") || !strings.Contains(v[0].Message, "--verify-allowed-cidrs") {
		t.Fatalf("verifications %+v", v)
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests reached 127.0.0.2", hits.Load())
	}
}
