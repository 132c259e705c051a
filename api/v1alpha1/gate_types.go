package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file holds the gates of a roll-out: verifications Kokumi runs once a wave or the whole
// Environment is healthy, approvals by a person, and the webhooks told of what happens.

// MaxVerifications is the most verifications a wave, or the Environment, asks for.
const MaxVerifications = 4

// EnvironmentGate names the gate of the whole Environment (Environment.spec.verify and
// spec.approval) in status.rollout.awaiting; an Approval or a VerificationResult of it has an
// empty wave.
const EnvironmentGate = "environment"

// Verification is a check Kokumi runs once a wave, or the whole Environment, runs the release
// healthily, during its soak: the roll-out goes past it only once it passed. Exactly one of job
// and http is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.job) != has(self.http)",message="a verification sets exactly one of job and http"
// +kubebuilder:validation:XValidation:rule="!has(self.perCluster) || !self.perCluster || has(self.http)",message="perCluster is for an http verification: set http, or drop perCluster"
// +kubebuilder:validation:XValidation:rule="!has(self.compare) || (has(self.perCluster) && self.perCluster)",message="compare judges the answers of each cluster: set perCluster: true"
// +kubebuilder:validation:XValidation:rule="!(has(self.failFor) && has(self.failures))",message="a verification sets failFor or failures, not both"
type Verification struct {
	// Name of the verification, unique in its wave (or in the Environment's spec.verify).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// Job runs a container as a Kubernetes Job in Kokumi's own namespace, where tenants can
	// neither write nor read; the verification's run passes when the Job succeeds.
	// +optional
	Job *JobVerification `json:"job,omitempty"`

	// HTTP sends a request; the run passes when successCondition holds.
	// +optional
	HTTP *HTTPVerification `json:"http,omitempty"`

	// Count is how many runs in a row must pass. Default 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=1
	// +optional
	Count int32 `json:"count,omitempty"`

	// Interval is how long Kokumi waits between two runs, such as 30s. Default 30s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// FailureLimit is how many failed runs fail the verification (they need not be in a row).
	// Default 1. A failed verification counts as one failure against the roll-out's failure
	// budget.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=1
	// +optional
	FailureLimit int32 `json:"failureLimit,omitempty"`

	// PerCluster runs the http verification once per cluster of the wave that runs the release
	// healthily (and, with compare, once per cluster of the Environment that still runs
	// status.rollout.from: the baseline), each request's url and body with the placeholders
	// ${cluster}, ${label:KEY}, ${environment}, ${order}, ${preparation} and ${digest}
	// replaced. A run passes when successCondition holds of every cluster's answer and compare,
	// when set, holds. The controller's --verify-cluster-requests bounds the requests of a run.
	// +optional
	PerCluster bool `json:"perCluster,omitempty"`

	// Compare is a CEL expression over wave and baseline, the per-cluster answers of the
	// clusters of the wave and of those still on the release before (lists of {cluster, labels,
	// status, body, value}); the run passes only when it holds. The canary's error rate no worse
	// than 1.5 times the baseline's worst:
	//
	//	wave.all(c, c.value <= 1.5 * math.greatest(baseline.map(b, b.value)) + 0.001)
	//
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Compare string `json:"compare,omitempty"`

	// FailFor counts a failed run against failureLimit only once the runs have failed, one
	// after another, for at least this long, such as 2m: a shorter blip does not count.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	FailFor *metav1.Duration `json:"failFor,omitempty"`

	// Failures counts a failed run against failureLimit only when at least count of the last
	// of runs failed: a shorter blip does not count.
	// +optional
	Failures *FailureWindow `json:"failures,omitempty"`
}

// FailureWindow is "count of the last of runs": a failed run counts only when at least count of
// the last of runs (itself included) failed.
//
// +kubebuilder:validation:XValidation:rule="self.count <= self.of",message="failures.count is at most failures.of"
type FailureWindow struct {
	// Count is how many of the last runs must have failed.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +required
	Count int32 `json:"count"`

	// Of is how many of the last runs are looked at.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +required
	Of int32 `json:"of"`
}

// JobVerification is a container Kokumi runs as a Job in Kokumi's own namespace (never the
// Order's, which its tenants write), as the ServiceAccount serviceAccountName of that namespace
// (never Kokumi's own controller's), with a restricted security
// context (non-root, no privilege escalation, every capability dropped, the runtime's default
// seccomp profile). Its environment holds the release's facts: KOKUMI_ORDER, KOKUMI_NAMESPACE,
// KOKUMI_ENVIRONMENT, KOKUMI_WAVE, KOKUMI_PREPARATION, KOKUMI_DIGEST, KOKUMI_ARTIFACT,
// KOKUMI_CLUSTERS (comma-separated, at most 500 names) and KOKUMI_CLUSTER_COUNT.
type JobVerification struct {
	// Image of the container.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	Image string `json:"image"`

	// Command is the container's entrypoint; absent, the image's.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=4096
	// +optional
	Command []string `json:"command,omitempty"`

	// Args are the entrypoint's arguments.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +optional
	Args []string `json:"args,omitempty"`

	// Env are more environment variables, beside the release's facts.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Env []NameValue `json:"env,omitempty"`

	// ServiceAccountName is the ServiceAccount of Kokumi's namespace the Job runs as, which an
	// admin creates there. Default "default".
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:default=default
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// Timeout bounds one run (the Job's activeDeadlineSeconds), such as 5m. Default 5m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// NameValue is one environment variable.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.value) && has(self.secretKeyRef))",message="an environment variable sets value or secretKeyRef, not both"
type NameValue struct {
	// Name of the variable; the KOKUMI_ prefix is the release's facts'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('KOKUMI_')",message="the KOKUMI_ prefix is kept for the release's facts"
	// +required
	Name string `json:"name"`
	// Value of the variable.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Value string `json:"value,omitempty"`
	// SecretKeyRef takes the value from a key of a Secret in Kokumi's namespace, which tenants
	// cannot read (a token for Prometheus, say), instead of value, which they can.
	// +optional
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef,omitempty"`
}

// HTTPMethod is the method of an HTTP verification.
// +kubebuilder:validation:Enum=GET;POST
type HTTPMethod string

// HTTPVerification is a request Kokumi sends from the controller; a run passes when
// successCondition, a CEL expression over response.status (an int), response.body (the
// body as JSON, or null when it is not JSON) and response.text (the body as a string, at most
// 1 MiB read), holds. A Prometheus query:
//
//	url: http://prometheus.monitoring:9090/api/v1/query?query=sum(rate(http_errors_total[5m]))
//	successCondition: response.status == 200 && double(response.body.data.result[0].value[1]) < 0.01
type HTTPVerification struct {
	// URL to send the request to, http or https.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	// +required
	URL string `json:"url"`

	// Method is GET (the default) or POST.
	// +kubebuilder:default=GET
	// +optional
	Method HTTPMethod `json:"method,omitempty"`

	// Body is sent with a POST, as application/json.
	// +kubebuilder:validation:MaxLength=8192
	// +optional
	Body string `json:"body,omitempty"`

	// SuccessCondition is the CEL expression that says the run passed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +required
	SuccessCondition string `json:"successCondition"`

	// Timeout bounds one request, such as 10s. Default 10s; at most 60s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// ShowResponse puts the first lines of the answer (and a redirect's Location) into the
	// result's message, status.rollout.verifications[].message, which the Serving's tenants
	// read. Off, the message holds the status code and whether successCondition held, and the
	// answer's first lines go to the controller's log only: turn it on only for an endpoint
	// whose answers the tenants may read.
	// +optional
	ShowResponse bool `json:"showResponse,omitempty"`
}

// ApprovalPolicy asks for approvals by people before a wave, or the Environment's roll-out,
// starts. A person approves with kubectl kokumi approve, the UI or the API: what they write is
// an entry of the Serving's spec.approvals naming them, which the admission policy
// kokumi-serving-approval admits only from who may "approve" servings (the role
// kokumi-approver grants it; the tenant roles do not).
type ApprovalPolicy struct {
	// Required is how many different people must approve. Default 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	// +kubebuilder:default=1
	// +optional
	Required int32 `json:"required,omitempty"`

	// SeparateFromPromoter refuses the approval of the person who promoted the Preparation
	// (the Serving's spec.promotedBy).
	// +optional
	SeparateFromPromoter bool `json:"separateFromPromoter,omitempty"`
}

// NotificationEvent is a roll-out transition a webhook can be told of, or Drifted: clusters of
// the Serving became Drifted.
// +kubebuilder:validation:Enum=WaveStarted;RolloutHalted;RolledBack;RolloutAborted;RolloutPaused;RolloutResumed;VerificationFailed;AwaitingApproval;Approved;RolloutComplete;Drifted
type NotificationEvent string

// NotificationDrifted is the event of clusters of a Serving that became Drifted.
const NotificationDrifted NotificationEvent = "Drifted"

// NotificationFormat is the shape of the body a webhook receives.
// +kubebuilder:validation:Enum=Kokumi;CloudEvents
type NotificationFormat string

// The body formats of a webhook.
const (
	// NotificationFormatKokumi is Kokumi's JSON body (application/json).
	NotificationFormatKokumi NotificationFormat = "Kokumi"
	// NotificationFormatCloudEvents is a CloudEvents 1.0 event in structured mode
	// (application/cloudevents+json) whose data is Kokumi's JSON body.
	NotificationFormatCloudEvents NotificationFormat = "CloudEvents"
)

// Notification is a webhook Kokumi posts a JSON body of each roll-out transition to, with the
// Standard Webhooks headers (webhook-id, webhook-timestamp, and webhook-signature when a key is
// given), and retried with backoff.
type Notification struct {
	// Name of the webhook, unique in the Environment.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// URL the body is posted to, http or https.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	// +required
	URL string `json:"url"`

	// SecretRef names a key of a Secret in Kokumi's own namespace (kokumi-system), not the
	// Environment's, whose value (whsec_ and the base64 of at least 24 random bytes) signs each
	// delivery: the header webhook-signature carries v1,<base64 HMAC-SHA256 of
	// "id.timestamp.body">. A Secret or key that is missing or malformed sends nothing and sets
	// the Environment's condition Notifications to False (WebhookKeyMissing).
	// +optional
	SecretRef *SecretKeyRef `json:"secretRef,omitempty"`

	// Events are the transitions to send; absent, all.
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Events []NotificationEvent `json:"events,omitempty"`

	// Format is the body's shape: Kokumi (absent: its JSON body) or CloudEvents (a CloudEvents
	// 1.0 event in structured mode, application/cloudevents+json, whose data is that body).
	// The headers and the signature are the same in both.
	// +optional
	Format NotificationFormat `json:"format,omitempty"`
}

// SecretKeyRef names one key of a Secret; the field that holds it says in which namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key in the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Key string `json:"key"`
}

// Approval is one person's approval of a gate of a Preparation's roll-out.
type Approval struct {
	// Preparation approved: an approval counts while it names spec.preparationName and its
	// attempt is the roll-out's (status.rollout.attempt).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Preparation string `json:"preparation"`

	// Wave is the wave approved; empty approves the Environment's gate (spec.approval).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Wave string `json:"wave,omitempty"`

	// By is who approved, as the API server names them; the admission policy
	// kokumi-serving-approval admits only the person's own name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	By string `json:"by"`

	// Attempt is the roll-out attempt approved (status.rollout.attempt when it was given): the
	// admission policy kokumi-serving-approval admits a new approval only of the attempt under
	// way, and it counts for that attempt alone. A promotion, a cleared abort, or a Preparation
	// promoted away and back is another attempt, which the approvals of the last do not pass.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Attempt int64 `json:"attempt,omitempty"`
}

// VerificationPhase is where a verification stands.
type VerificationPhase string

const (
	// VerificationRunning means it runs, or waits for its next run.
	VerificationRunning VerificationPhase = "Running"
	// VerificationPassed means count runs in a row passed.
	VerificationPassed VerificationPhase = "Passed"
	// VerificationFailed means failureLimit runs failed.
	VerificationFailed VerificationPhase = "Failed"
)

// VerificationResult is where one verification of a roll-out stands.
type VerificationResult struct {
	// Name of the verification.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`

	// Wave it verifies; empty for the Environment's spec.verify.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Wave string `json:"wave,omitempty"`

	// Kind is job or http.
	// +kubebuilder:validation:MaxLength=8
	// +required
	Kind string `json:"kind"`

	// Phase is Running, Passed or Failed.
	// +kubebuilder:validation:MaxLength=16
	// +required
	Phase VerificationPhase `json:"phase"`

	// Passes counts the runs that passed in a row; Failures those that failed.
	// +optional
	Passes int32 `json:"passes"`
	// +optional
	Failures int32 `json:"failures"`

	// Runs counts the runs started; the Job of run n is named from it. Completed counts those
	// that finished: while it is less than runs, a run is under way.
	// +optional
	Runs int32 `json:"runs"`
	// +optional
	Completed int32 `json:"completed"`

	// Started is when the last run started; Finished when the verification passed or failed.
	// +optional
	Started *metav1.Time `json:"started,omitempty"`
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`

	// JobUID is the UID of the Job Kokumi created for the run under way (a job verification):
	// only that Job's outcome counts; a Job of that name with another UID, or one whose spec is
	// not what Kokumi built, fails the run.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	JobUID string `json:"jobUID,omitempty"`

	// Message is what the last run said: the HTTP status and the body's first lines, or the
	// Job's result and its container's last output, shortened; of a per-cluster check, the
	// clusters at fault and the values measured.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`

	// Recent are the outcomes of the last runs, oldest first, P for passed and F for failed,
	// as many as failures.of looks at.
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[PF]*$`
	// +optional
	Recent string `json:"recent,omitempty"`

	// FailingSince is when the first of the failed runs in a row that end the runs so far
	// started; absent when the last run passed.
	// +optional
	FailingSince *metav1.Time `json:"failingSince,omitempty"`

	// Checked counts the clusters the last run of a per-cluster check asked, of the wave and of
	// the baseline; AtFault those of the wave it found at fault.
	// +optional
	Checked int32 `json:"checked,omitempty"`
	// +optional
	AtFault int32 `json:"atFault,omitempty"`

	// Clusters are the answers of the last run of a per-cluster check, those at fault first:
	// at most MaxClusterResults.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	// +optional
	Clusters []ClusterResult `json:"clusters,omitempty"`
}

// MaxClusterResults is the most per-cluster answers a verification's result keeps.
const MaxClusterResults = 10

// ClusterResult is one cluster's answer to a run of a per-cluster check.
type ClusterResult struct {
	// Cluster asked.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Cluster string `json:"cluster"`

	// Baseline is true for a cluster that still runs the release before (status.rollout.from).
	// +optional
	Baseline bool `json:"baseline,omitempty"`

	// AtFault is true for a cluster of the wave whose answer failed successCondition, or that
	// compare does not hold of.
	// +optional
	AtFault bool `json:"atFault,omitempty"`

	// Value is what the cluster's answer measured: the first sample of a Prometheus answer, or
	// else its HTTP status, or why there is none.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Value string `json:"value,omitempty"`
}

// GuardPhase is where an Environment's guard stands for a roll-out.
type GuardPhase string

const (
	// GuardRunning means its verifications run again, every interval.
	GuardRunning GuardPhase = "Running"
	// GuardPassed means they all passed for the guard's duration.
	GuardPassed GuardPhase = "Passed"
	// GuardFailed means one failed: the record is revoked, onFailure applies.
	GuardFailed GuardPhase = "Failed"
)

// GuardStatus is where an Environment's guard stands for a roll-out.
type GuardStatus struct {
	// Phase is Running, Passed or Failed.
	// +kubebuilder:validation:MaxLength=16
	// +required
	Phase GuardPhase `json:"phase"`

	// Since is when the guard started: the roll-out was complete and its record written.
	// +required
	Since metav1.Time `json:"since"`

	// Record is the digest of the deployment record the guard watches over.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Record string `json:"record,omitempty"`

	// Verifications are its verifications' results.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	// +optional
	Verifications []VerificationResult `json:"verifications,omitempty"`

	// Revocation is the digest of the revocation Kokumi signed once the guard failed; empty
	// until it is attached.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Revocation string `json:"revocation,omitempty"`
}
