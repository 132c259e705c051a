package verify

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// hanging serves requests that wait until release is closed; arrived gets each one's path.
func hanging(t *testing.T) (url string, arrived chan string, release func()) {
	t.Helper()
	gate := make(chan struct{})
	arrived = make(chan string, 64)
	srv, _ := listen(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.Path
		select {
		case <-gate:
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return srv.URL, arrived, release
}

// A gate whose endpoint does not answer holds no reconcile: Step returns with the run under
// way, and the run's end reconciles the Serving (Done).
func TestAStepNeverWaitsOnTheNetwork(t *testing.T) {
	url, arrived, release := hanging(t)
	r := &Runner{HTTP: &HTTPRunner{Client: loopback.Client()}}
	st := newStepper(t, r)
	spec := []v1.Verification{{Name: "health", HTTP: &v1.HTTPVerification{URL: url + "/healthz", SuccessCondition: "response.body.ok", Timeout: &metav1.Duration{Duration: time.Minute}}}}
	res, recheck, err := r.Step(context.Background(), spec, "canary", nil, st.facts)
	if err != nil || res[0].Runs != 1 || res[0].Completed != 0 || res[0].Phase != v1.VerificationRunning || recheck != PollHTTP {
		t.Fatalf("started: %+v %v %v", res, recheck, err)
	}
	<-arrived // the request waits in the endpoint, and the reconcile goes on:
	if res, _, err = r.Step(context.Background(), spec, "canary", res, st.facts); err != nil || res[0].Completed != 0 || res[0].Runs != 1 {
		t.Fatalf("read while under way: %+v %v", res, err)
	}
	release()
	res, _ = st.step(spec, "canary", res)
	if res[0].Phase != v1.VerificationPassed || res[0].Runs != 1 {
		t.Fatalf("ended: %+v", res[0])
	}
}

// A check that outlives its timeout fails the run.
func TestACheckPastItsTimeoutFailsTheRun(t *testing.T) {
	url, _, _ := hanging(t)
	r := &Runner{HTTP: &HTTPRunner{Client: loopback.Client()}}
	st := newStepper(t, r)
	spec := []v1.Verification{{Name: "health", HTTP: &v1.HTTPVerification{URL: url, SuccessCondition: "true", Timeout: &metav1.Duration{Duration: 200 * time.Millisecond}}}}
	res, _ := st.step(spec, "canary", nil)
	if res[0].Phase != v1.VerificationFailed || !strings.Contains(res[0].Message, "no answer within 200ms") {
		t.Fatalf("%+v", res[0])
	}
}

// One namespace's checks hold at most a quarter of the pool: another namespace's check runs
// while they hang.
func TestOneNamespaceHoldsAtMostAQuarterOfThePool(t *testing.T) {
	url, arrived, release := hanging(t)
	h := &HTTPRunner{Client: loopback.Client(), Workers: 4}
	ended := make(chan struct{}, 8)
	h.Done = func(string, string) { ended <- struct{}{} }
	facts := func(ns string) Facts {
		return Facts{Namespace: ns, Preparation: "web-1", Serving: &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: types.UID("u-" + ns)}}}
	}
	ctx := context.Background()
	for _, name := range []string{"a1", "a2", "a3"} {
		h.Start(ctx, &v1.Verification{Name: name, HTTP: &v1.HTTPVerification{URL: url + "/a/" + name, SuccessCondition: "true"}}, "canary", 1, facts("team-a"))
	}
	h.Start(ctx, &v1.Verification{Name: "b", HTTP: &v1.HTTPVerification{URL: url + "/b", SuccessCondition: "true"}}, "canary", 1, facts("team-b"))
	var seen []string
	for len(seen) < 2 {
		seen = append(seen, <-arrived)
	}
	// Two requests arrived: one of team-a's, and team-b's, though team-a queued three before it.
	if !strings.HasPrefix(seen[0], "/a/") && !strings.HasPrefix(seen[1], "/a/") || seen[0] != "/b" && seen[1] != "/b" {
		t.Fatalf("arrived %v", seen)
	}
	select {
	case p := <-arrived:
		t.Fatalf("a second check of team-a ran beside its first: %s", p)
	default:
	}
	release()
	for range 4 {
		<-ended // team-a's others run, one at a time
	}
	for _, name := range []string{"a1", "a2", "a3"} {
		spec := &v1.Verification{Name: name, HTTP: &v1.HTTPVerification{URL: url + "/a/" + name, SuccessCondition: "true"}}
		if o, done := h.Read(ctx, spec, "canary", 1, facts("team-a")); !done || !o.Passed {
			t.Errorf("%s: %+v %v", name, o, done)
		}
	}
}

// A run under way whose result the controller lost (it restarted) runs again when read.
func TestARunLostToARestartRunsAgain(t *testing.T) {
	var status, hits atomic.Int32
	status.Store(200)
	url := answering(t, &status, `{"ok":true}`, &hits)
	r := &Runner{HTTP: &HTTPRunner{Client: loopback.Client()}, Now: time.Now}
	st := newStepper(t, r)
	spec := []v1.Verification{{Name: "health", HTTP: &v1.HTTPVerification{URL: url, SuccessCondition: "response.body.ok"}}}
	// The status the controller wrote before it stopped: run 1 started, not ended.
	before := []v1.VerificationResult{{Name: "health", Wave: "canary", Kind: "http", Phase: v1.VerificationRunning, Runs: 1, Started: &metav1.Time{Time: time.Now()}}}
	res, _ := st.step(spec, "canary", before)
	if res[0].Phase != v1.VerificationPassed || res[0].Runs != 1 || hits.Load() != 1 {
		t.Fatalf("%+v, %d requests", res[0], hits.Load())
	}
}
