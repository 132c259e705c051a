package verify

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/egress"
)

// loopback is the egress policy of these tests, whose endpoints listen on loopback.
var loopback = egress.Policy{Allowed: egress.Loopback}

// answering serves status and body, and counts the requests.
func answering(t *testing.T, status *atomic.Int32, body string, hits *atomic.Int32) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// stepper steps a gate as the Serving reconciler does: once, and again each time an HTTP run it
// started ends (HTTPRunner.Done), until none is under way.
type stepper struct {
	t     *testing.T
	r     *Runner
	ended chan string
	facts Facts
}

func newStepper(t *testing.T, r *Runner) *stepper {
	s := &stepper{t: t, r: r, ended: make(chan string, 16),
		facts: Facts{Namespace: "team", Preparation: "web-1", Serving: &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "u"}}}}
	r.HTTP.Done = func(ns, name string) { s.ended <- ns + "/" + name }
	return s
}

func (s *stepper) step(spec []v1.Verification, wave string, res []v1.VerificationResult) ([]v1.VerificationResult, time.Duration) {
	s.t.Helper()
	for {
		out, recheck, err := s.r.Step(context.Background(), spec, wave, res, s.facts)
		if err != nil {
			s.t.Fatal(err)
		}
		res = out
		if !slices.ContainsFunc(res, func(v v1.VerificationResult) bool { return v.Wave == wave && v.Runs > v.Completed }) {
			return res, recheck
		}
		if recheck != PollHTTP {
			s.t.Fatalf("a run under way is looked at again after %v, not %v", recheck, PollHTTP)
		}
		if got := <-s.ended; got != "team/web" {
			s.t.Fatalf("the end of a run was told to %s", got)
		}
	}
}

func TestCountPassesInARowAtTheIntervalAndFailureLimitFails(t *testing.T) {
	var status, hits atomic.Int32
	status.Store(200)
	url := answering(t, &status, `{"ok":true}`, &hits)
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	r := &Runner{HTTP: &HTTPRunner{Client: loopback.Client()}, Now: func() time.Time { return now }}
	st := newStepper(t, r)
	spec := []v1.Verification{{Name: "smoke", Count: 2, FailureLimit: 2, Interval: &metav1.Duration{Duration: time.Minute},
		HTTP: &v1.HTTPVerification{URL: url, SuccessCondition: "response.status == 200 && response.body.ok"}}}

	res, recheck := st.step(spec, "canary", nil)
	if len(res) != 1 || res[0].Phase != v1.VerificationRunning || res[0].Passes != 1 || recheck != time.Minute {
		t.Fatalf("first run: %+v %v", res, recheck)
	}
	// Before the interval: no run.
	now = now.Add(30 * time.Second)
	if res, recheck = st.step(spec, "canary", res); hits.Load() != 1 || recheck != 30*time.Second {
		t.Fatalf("ran before the interval: %d requests, recheck %v", hits.Load(), recheck)
	}
	// A failure breaks the row; a pass and a pass in a row pass it.
	now = now.Add(time.Minute)
	status.Store(503)
	res, _ = st.step(spec, "canary", res)
	if res[0].Passes != 0 || res[0].Failures != 1 || res[0].Phase != v1.VerificationRunning || !strings.Contains(res[0].Message, "503") {
		t.Fatalf("after a failure: %+v", res[0])
	}
	status.Store(200)
	for range 2 {
		now = now.Add(time.Minute)
		res, _ = st.step(spec, "canary", res)
	}
	if res[0].Phase != v1.VerificationPassed || res[0].Passes != 2 || res[0].Runs != 4 || res[0].Finished == nil {
		t.Fatalf("two passes in a row: %+v", res[0])
	}
	// Passed is final.
	now = now.Add(time.Hour)
	if _, _ = st.step(spec, "canary", res); hits.Load() != 4 {
		t.Errorf("a passed verification ran again: %d requests", hits.Load())
	}

	// Two failures fail it; the other gate's result is kept.
	status.Store(500)
	other := []v1.VerificationResult{{Name: "smoke", Wave: "rest", Phase: v1.VerificationRunning}}
	for range 2 {
		now = now.Add(time.Minute)
		other, _ = st.step(spec, "", other)
	}
	if len(other) != 2 || other[0].Wave != "rest" || other[1].Wave != "" || other[1].Phase != v1.VerificationFailed || other[1].Failures != 2 {
		t.Fatalf("failure limit: %+v", other)
	}
}

func TestASuccessConditionIsJudgedOverStatusBodyAndText(t *testing.T) {
	prom := `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1733390000.5,"0.004"]}]}}`
	var status, hits atomic.Int32
	status.Store(200)
	url := answering(t, &status, prom, &hits)
	h := &HTTPRunner{Client: loopback.Client()}
	for _, tc := range []struct {
		cond   string
		passed bool
		says   string
	}{
		{`double(response.body.data.result[0].value[1]) < 0.01`, true, "successCondition holds"},
		{`double(response.body.data.result[0].value[1]) < 0.001`, false, "successCondition does not hold; the answer: 200 OK"},
		{`response.text.contains("success")`, true, "holds"},
		{`response.status ==`, false, "successCondition cannot be used: it does not compile"},
		{`response.status`, false, "does not give a bool"},
		{`response.body.missing == 1`, false, "could not be evaluated"},
	} {
		o := h.Run(context.Background(), &v1.HTTPVerification{URL: url, SuccessCondition: tc.cond})
		if o.Passed != tc.passed || !strings.Contains(o.Message, tc.says) {
			t.Errorf("%s: %+v, want passed %v saying %q", tc.cond, o, tc.passed, tc.says)
		}
	}
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { time.Sleep(2 * time.Second) }))
	defer slow.Close()
	o := h.Run(context.Background(), &v1.HTTPVerification{URL: slow.URL, SuccessCondition: "true", Timeout: &metav1.Duration{Duration: 200 * time.Millisecond}})
	if o.Passed || !strings.Contains(o.Message, "no answer within 200ms") {
		t.Errorf("timeout: %+v", o)
	}
}

func TestJobNamesAreStableShortAndPerRun(t *testing.T) {
	f := Facts{Preparation: "web-7", Serving: &v1.Serving{ObjectMeta: metav1.ObjectMeta{UID: "u-1"}}}
	long := strings.Repeat("a", 63)
	a, b := JobName(f, "canary", long, 1), JobName(f, "canary", long, 2)
	if a == b || len(a) > 63 || JobName(f, "canary", long, 1) != a || JobName(f, "rest", long, 1) == a {
		t.Errorf("names %q %q", a, b)
	}
}

func TestAJobThatNoControllerEndsFailsPastItsTimeout(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := batchv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// The API server gives each object a UID, which the fake does not.
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			obj.SetUID("job-uid")
			return c.Create(ctx, obj, opts...)
		}}).Build()
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	r := &Runner{Jobs: &JobRunner{Client: c, Reader: c, Namespace: "kokumi-system"}, Now: func() time.Time { return now }}
	spec := []v1.Verification{{Name: "smoke", Job: &v1.JobVerification{Image: "smoke:1", Timeout: &metav1.Duration{Duration: time.Minute}}}}
	facts := Facts{Namespace: "team", Preparation: "web-2", Serving: &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u"}}}
	res, recheck, err := r.Step(context.Background(), spec, "canary", nil, facts)
	if err != nil || res[0].Runs != 1 || res[0].Completed != 0 || recheck != PollJob {
		t.Fatalf("started: %+v %v %v", res, recheck, err)
	}
	var job batchv1.Job
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "kokumi-system", Name: JobName(facts, "canary", "smoke", 1)}, &job); err != nil || *job.Spec.ActiveDeadlineSeconds != 60 {
		t.Fatalf("the Job: %v %+v", err, job.Spec)
	}
	now = now.Add(time.Minute + 30*time.Second)
	if res, _, _ = r.Step(context.Background(), spec, "canary", res, facts); res[0].Phase != v1.VerificationRunning {
		t.Fatalf("failed within the grace: %+v", res[0])
	}
	now = now.Add(time.Minute)
	res, _, _ = r.Step(context.Background(), spec, "canary", res, facts)
	if res[0].Phase != v1.VerificationFailed || !strings.Contains(res[0].Message, "did not end within its timeout of 1m0s and 1m0s more") {
		t.Fatalf("a Job no controller ends: %+v", res[0])
	}
}

// A Job that failed is decided on with its Pod's last words: when the Pods cannot be read, the
// outcome is read again later, not recorded without them.
func TestAJobsOutcomeWaitsForItsPodsWords(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := batchv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	facts := Facts{Namespace: "team", Preparation: "web-2", Serving: &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team", UID: "u"}}}
	name := JobName(facts, "canary", "smoke", 1)
	spec := &v1.Verification{Name: "smoke", Job: &v1.JobVerification{Image: "smoke:1"}}
	built := &JobRunner{Namespace: "kokumi-system"}
	job := built.jobFor(spec, "canary", 1, facts)
	job.UID = "job-uid"
	job.Status = batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kokumi-system", Name: name + "-x1", Labels: map[string]string{batchv1.JobNameLabel: name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: job.UID, Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "verify",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "answered 500"}}}}}}
	var fail atomic.Bool
	fail.Store(true)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(job, pod).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if fail.Load() {
				return errors.New("injected timeout")
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	j := &JobRunner{Client: c, Reader: c, Namespace: "kokumi-system"}
	if o, done, err := j.Read(context.Background(), spec, "canary", 1, facts, job.UID); err == nil || done {
		t.Fatalf("with its Pods unread the outcome is final: %+v %v %v", o, done, err)
	}
	fail.Store(false)
	o, done, err := j.Read(context.Background(), spec, "canary", 1, facts, job.UID)
	if err != nil || !done || o.Passed || !strings.Contains(o.Message, "failed (BackoffLimitExceeded): answered 500") {
		t.Fatalf("outcome %+v %v %v", o, done, err)
	}
	// A Job of that name but another UID is not the one Kokumi created: the run fails, and says so.
	o, done, err = j.Read(context.Background(), spec, "canary", 1, facts, "another-uid")
	if err != nil || !done || o.Passed || !strings.Contains(o.Message, "was replaced: Kokumi created it with UID another-uid") {
		t.Fatalf("a replaced Job: %+v %v %v", o, done, err)
	}
}
