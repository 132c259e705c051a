package serving

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/rollout"
	"github.com/kokumi-dev/kokumi/internal/stages"
	"github.com/kokumi-dev/kokumi/internal/verify"
)

// prometheus answers /api/v1/query as Prometheus does, with an instant vector of one sample
// whose value is rate (a string, as Prometheus writes sample values).
func prometheus(t *testing.T, rate *atomic.Value) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" || r.URL.Query().Get("query") == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprint(w, `{"status":"error","errorType":"bad_data","error":"no query"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"podinfo"},"value":[%d.781,"%s"]}]}}`,
			time.Now().Unix(), rate.Load().(string))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// errorRateBelow1Percent is an http verification of the canary, passing twice in a row.
func errorRateBelow1Percent(url string) v1.Verification {
	return v1.Verification{Name: "error-rate", Count: 2, Interval: &metav1.Duration{Duration: time.Second},
		HTTP: &v1.HTTPVerification{URL: url + "/api/v1/query?query=sum(rate(http_requests_total%7Bcode%3D~%225..%22%7D%5B5m%5D))",
			SuccessCondition: `response.status == 200 && response.body.status == "success" && double(response.body.data.result[0].value[1]) < 0.01`}}
}

// attachedRecords reads the records attached to prep's artifact, verified with Kokumi's keys.
func (f *fixture) attachedRecords(prep *v1.Preparation) []record.Record {
	f.t.Helper()
	keys, err := (&record.Keys{Client: env.Client, Namespace: cfg.Namespace}).Trusted(f.ctx)
	must(f.t, err)
	repository, _, _ := strings.Cut(oci.TrimScheme(prep.Spec.Artifact.Ref), "@")
	attached, err := (&record.Store{Client: &oci.Client{}}).Records(f.ctx, repository, prep.Spec.Artifact.Digest, keys)
	must(f.t, err)
	return attached
}

func TestRolloutAnHTTPGateJudgesAPrometheusAnswer(t *testing.T) {
	f := newFixture(t)
	var rate atomic.Value
	rate.Store("0.002")
	srv := prometheus(t, &rate)
	p := canaryThenRest(0, v1.RolloutHalt)
	p.Waves[0].Verify = []v1.Verification{errorRateBelow1Percent(srv.URL)}
	f.setRollout(p)
	f.ringCluster("hg-canary", "canary", true)
	f.ringCluster("hg-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", one.Name)

	// A low error rate, twice in a row: the canary passes, the rest follows.
	f.targets(one.Spec.Artifact.Digest, "hg-canary")
	f.stillTargets("", "hg-a")
	f.healthy(one.Spec.Artifact.Digest, "hg-canary")
	f.deployAll(one, []string{"hg-canary"}, []string{"hg-a"})
	s := f.serving()
	res := s.Status.Rollout.Verifications
	if len(res) != 1 || res[0].Phase != v1.VerificationPassed || res[0].Passes != 2 || res[0].Kind != "http" ||
		!strings.Contains(res[0].Message, "successCondition holds; the answer: 200 OK") {
		t.Fatalf("verifications %+v", res)
	}
	// Tenants read the status: the answer itself is not in it unless the admin shows it.
	if strings.Contains(res[0].Message, "resultType") {
		t.Errorf("the answer is in the status without http.showResponse: %q", res[0].Message)
	}
	if res[0].Finished.Sub(res[0].Started.Time) < 0 {
		t.Errorf("times %+v", res[0])
	}
	// The records say what passed: the canary's, and the Environment's, verified.
	wave := f.recordsOf(one.Name, "canary", 1)
	if !wave[0].Verified {
		t.Errorf("the canary's record does not say verified: %+v", wave[0])
	}
	f.eventually("the Environment's record says verified", func() error {
		for _, r := range f.attachedRecords(one) {
			pr := r.Predicate
			if r.Verified && pr.Wave == "" && pr.Verified && len(pr.Verifications) == 1 && pr.Verifications[0].Name == "error-rate" &&
				pr.Verifications[0].Wave == "canary" && pr.Verifications[0].Kind == "http" && !pr.Verifications[0].Time.IsZero() {
				return nil
			}
		}
		return fmt.Errorf("records %+v", f.attachedRecords(one))
	})

	// A high error rate: the verification fails, the roll-out halts, the rest keeps the first.
	// The admin shows the answer to the tenants (Prometheus's answer is theirs to read).
	rate.Store("0.5")
	p.Waves[0].Verify[0].HTTP.ShowResponse = true
	f.setRollout(p)
	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "hg-canary")
	f.healthy(two.Spec.Artifact.Digest, "hg-canary")
	s = f.ready(v1.ReasonRolloutHalted, "halted in wave canary: it failed on verification error-rate of wave canary")
	v := s.Status.Rollout.Verifications
	if len(v) != 1 || v[0].Phase != v1.VerificationFailed || !strings.Contains(v[0].Message, `successCondition does not hold; the answer: 200 OK`) ||
		!strings.Contains(v[0].Message, `"0.5"`) {
		t.Fatalf("verifications %+v", v)
	}
	f.stillTargets(one.Spec.Artifact.Digest, "hg-a")
	f.controlEvent("VerificationFailed", "verification error-rate of wave canary failed for Preparation podinfo-edge-2")
}

func TestRolloutAJobGateThatFailsHaltsTheRollout(t *testing.T) {
	f := newFixture(t)
	canary, rest, one := f.gatedCanary("jg", v1.Verification{Name: "smoke", Job: &v1.JobVerification{Image: "registry.example/smoke:1",
		Args: []string{"--url", "http://podinfo.podinfo"}, ServiceAccountName: "smoke", Env: []v1.NameValue{{Name: "MODE", Value: "quick"},
			{Name: "PROMETHEUS_TOKEN", SecretKeyRef: &v1.SecretKeyRef{Name: "prometheus", Key: "token"}}}}})

	// The Job runs in Kokumi's namespace, as the ServiceAccount the admin named there, told the facts.
	job := f.gateJob("smoke")
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	facts := map[string]string{}
	for _, e := range c.Env {
		facts[e.Name] = e.Value
	}
	if pod.ServiceAccountName != "smoke" || *pod.SecurityContext.RunAsNonRoot != true || *c.SecurityContext.AllowPrivilegeEscalation ||
		c.Image != "registry.example/smoke:1" || facts["KOKUMI_PREPARATION"] != one.Name || facts["KOKUMI_WAVE"] != "canary" ||
		facts["KOKUMI_CLUSTERS"] != canary || facts["KOKUMI_DIGEST"] != one.Spec.Artifact.Digest || facts["KOKUMI_ENVIRONMENT"] != "edge" ||
		facts["KOKUMI_ORDER"] != "podinfo-edge" || facts["MODE"] != "quick" || *job.Spec.BackoffLimit != 0 {
		t.Fatalf("Job %+v, env %v", pod, facts)
	}
	// A value the tenant must not read comes from a Secret of Kokumi's namespace, not the Environment.
	if e := c.Env[len(c.Env)-1]; e.Name != "PROMETHEUS_TOKEN" || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != "prometheus" || e.ValueFrom.SecretKeyRef.Key != "token" {
		t.Errorf("the token's variable %+v", e)
	}
	if job.Namespace != cfg.Namespace || job.Labels[verify.LabelServing] != "podinfo-edge" || job.Labels[verify.LabelServingUID] != string(f.serving().UID) {
		t.Errorf("Job %s/%s, labels %v", job.Namespace, job.Name, job.Labels)
	}
	f.waiting(rest, "wave canary is being verified: smoke 0 of 1 passes")

	// The Job fails as the Job controller says it: its Pod's last words, then the conditions.
	failJob(t, f, &job, "smoke: GET http://podinfo.podinfo/healthz answered 500\nretrying is not asked for")
	s := f.ready(v1.ReasonRolloutHalted, "it failed on verification smoke of wave canary")
	v := s.Status.Rollout.Verifications
	if len(v) != 1 || v[0].Phase != v1.VerificationFailed || v[0].Kind != "job" ||
		!strings.Contains(v[0].Message, "failed (BackoffLimitExceeded") || !strings.Contains(v[0].Message, "answered 500 | retrying is not asked for") {
		t.Fatalf("verifications %+v", v)
	}
	f.waiting(rest, "halted")
	f.stillTargets("", rest)
	var p1 v1.Preparation
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(one), &p1))
	if len(p1.Status.DeploymentRecords) != 0 {
		t.Errorf("a release that failed its verification has records %+v", p1.Status.DeploymentRecords)
	}
}

// failJob plays the Job controller and the kubelet: the Job's Pod ends with message as its
// termination message, and the Job fails.
func failJob(t *testing.T, f *fixture, job *batchv1.Job, message string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x1", Namespace: job.Namespace, Labels: map[string]string{batchv1.JobNameLabel: job.Name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
		Spec: *job.Spec.Template.Spec.DeepCopy()}
	must(t, env.Client.Create(f.ctx, pod))
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "verify", Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: message}}}}
	must(t, env.Client.Status().Update(f.ctx, pod))
	f.jobStatus(job, func(j *batchv1.Job, now metav1.Time) {
		j.Status.Failed = 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now, LastProbeTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now, LastProbeTime: now},
		}
	})
}

// jobStatus plays the Job controller: the Job has started, and end sets how it ended.
func (f *fixture) jobStatus(job *batchv1.Job, end func(j *batchv1.Job, now metav1.Time)) {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var j batchv1.Job
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return err
		}
		now := metav1.Now()
		j.Status.StartTime = &now
		end(&j, now)
		return env.Client.Status().Update(f.ctx, &j)
	}))
}

// gatedCanary rolls the Preparation podinfo-edge-1 out under canaryThenRest, the canary wave
// verified by checks, with one cluster in each wave (named from prefix and the namespace, of
// their own on each run), until the canary runs it healthily; it returns the two clusters and
// the Preparation.
func (f *fixture) gatedCanary(prefix string, checks ...v1.Verification) (canary, rest string, one *v1.Preparation) {
	f.t.Helper()
	p := canaryThenRest(0, v1.RolloutHalt)
	p.Waves[0].Verify = checks
	f.setRollout(p)
	canary, rest = prefix+"-canary-"+f.ns, prefix+"-a-"+f.ns
	f.ringCluster(canary, "canary", true)
	f.ringCluster(rest, "", true)
	one = f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.targets(one.Spec.Artifact.Digest, canary)
	f.healthy(one.Spec.Artifact.Digest, canary)
	return canary, rest, one
}

func TestRolloutAWaveWaitsForApprovalsThatCount(t *testing.T) {
	f := newFixture(t)
	p := canaryThenRest(0, v1.RolloutHalt)
	p.Waves[1].Approval = &v1.ApprovalPolicy{Required: 1, SeparateFromPromoter: true}
	f.setRollout(p)
	f.ringCluster("ap-canary", "canary", true)
	f.ringCluster("ap-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	// Alice, who may also approve, promotes it: the admission policy holds promotedBy to her.
	alice, aliceName := f.person("alice-"+f.ns, "kokumi-approver")
	bob, bobName := f.person("bob-"+f.ns, "kokumi-approver")
	f.order("edge", "")
	must(t, f.write(alice, func(s *v1.ServingSpec) { s.PreparationName, s.PromotedBy = one.Name, aliceName }))
	f.targets(one.Spec.Artifact.Digest, "ap-canary")
	f.healthy(one.Spec.Artifact.Digest, "ap-canary")

	// The cluster says it waits; the roll-out's message says, once, how and who approves.
	f.waiting("ap-a", "wave rest awaits approval (0 of 1)")
	f.eventually("awaiting rest", func() error {
		if r := f.serving().Status.Rollout; r == nil || r.Awaiting != "rest" ||
			!strings.Contains(r.Message, "wave rest awaits approval (0 of 1): kubectl kokumi approve podinfo-edge --wave rest or Approve on the Serving's page, "+rollout.WhoApproves) {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})
	if tg := f.target(f.serving(), "ap-a"); strings.Contains(tg.Conditions[0].Message, "kubectl kokumi approve") {
		t.Errorf("the waiting cluster repeats how to approve: %q", tg.Conditions[0].Message)
	}
	f.controlEvent("AwaitingApproval", "wave rest awaits approval")

	// The promoter's own approval (written past the API's refusal, straight to the Serving) does
	// not count; another person's does.
	approve := func(c client.Client, by string) {
		must(t, f.write(c, func(s *v1.ServingSpec) {
			s.Approvals = append(s.Approvals, v1.Approval{Preparation: one.Name, Wave: "rest", By: by, Attempt: f.attempt(one.Name)})
		}))
	}
	approve(alice, aliceName)
	f.waiting("ap-a", "the approval of "+aliceName+", who promoted Preparation podinfo-edge-1, does not count")
	f.stillTargets("", "ap-a")
	approve(bob, bobName)
	f.targets(one.Spec.Artifact.Digest, "ap-a")
	f.healthy(one.Spec.Artifact.Digest, "ap-a")
	f.rolloutIs(v1.RolloutComplete, v1.UnselectedWave)
	f.controlEvent("Approved", bobName+" approved wave rest of Preparation podinfo-edge-1")
	f.eventually("the Environment's record names the approver", func() error {
		for _, r := range f.attachedRecords(one) {
			pr := r.Predicate
			if r.Verified && pr.Wave == "" && pr.Verified && len(pr.Approvers) == 1 && pr.Approvers[0].Wave == "rest" && pr.Approvers[0].By == bobName {
				return nil
			}
		}
		return fmt.Errorf("records %+v", f.attachedRecords(one))
	})
}

func TestAStageRequiringVerifiedWaitsForTheEnvironmentsVerifications(t *testing.T) {
	f := newFixture(t)
	var rate atomic.Value
	rate.Store("0.5")
	srv := prometheus(t, &rate)
	check := errorRateBelow1Percent(srv.URL)
	check.Count, check.FailureLimit = 1, 100
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e v1.Environment
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e); err != nil {
			return err
		}
		e.Spec.Verify = []v1.Verification{check}
		return env.Client.Update(f.ctx, &e)
	}))
	f.cluster("sv-a", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.healthy(one.Spec.Artifact.Digest, "sv-a")
	f.ready(v1.ReasonDeployed, "Deployed Preparation podinfo-edge-1")

	// Deployed, recorded, not verified: a stage that asks for verified waits, one that does not
	// passes.
	recs := f.records(one.Name, 1)
	if recs[0].Verified {
		t.Fatalf("recorded verified before the verification passed: %+v", recs[0])
	}
	prod := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: f.ns}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "none"}}, Project: f.project,
		Requires: []v1.StageRequirement{{Environment: "edge", Verified: true}},
	}}
	must(t, env.Client.Create(f.ctx, prod))
	qa := prod.DeepCopy()
	qa.ObjectMeta = metav1.ObjectMeta{Name: "qa", Namespace: f.ns}
	qa.Spec.Requires[0].Verified = false
	must(t, env.Client.Create(f.ctx, qa))
	pipeline := stages.NewPipeline(env.Client, env.Client, cfg)
	if v, err := pipeline.Check(f.ctx, f.ns, "prod", one); err != nil || v.Allowed || !strings.Contains(v.Message, "its deployment record does not say verified yet") {
		t.Fatalf("prod: %+v %v", v, err)
	}
	if v, err := pipeline.Check(f.ctx, f.ns, "qa", one); err != nil || !v.Allowed {
		t.Fatalf("qa: %+v %v", v, err)
	}
	if r := f.serving().Status.Rollout; r == nil || r.State != v1.RolloutProgressing || !strings.Contains(r.Message, "the Environment's gate is being verified: error-rate 0 of 1 passes") {
		t.Errorf("status.rollout %+v", r)
	}

	// The error rate falls: the verification passes, a new record says verified, prod passes.
	rate.Store("0.002")
	f.rolloutIs(v1.RolloutComplete, v1.UnselectedWave)
	recs = f.records(one.Name, 2)
	if !recs[0].Verified {
		t.Fatalf("the newest record does not say verified: %+v", recs)
	}
	f.eventually("prod passes", func() error {
		v, err := pipeline.Check(f.ctx, f.ns, "prod", one)
		if err != nil || !v.Allowed {
			return fmt.Errorf("%+v %w", v, err)
		}
		return nil
	})
}
