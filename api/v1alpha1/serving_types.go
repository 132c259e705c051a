package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxTargets is the most clusters status.targets lists.
const MaxTargets = 64

// MaxRunning is the most revisions status.running lists.
const MaxRunning = 16

// ServingSpec says which Preparation runs.
type ServingSpec struct {
	// OrderRef is the Order the Serving belongs to (same name).
	// +required
	OrderRef LocalObjectReference `json:"orderRef"`

	// PreparationName is the promoted Preparation. Empty deploys nothing.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PreparationName string `json:"preparationName,omitempty"`

	// Rollout is what a person asks of the roll-out of PreparationName: pause it, or abort it.
	// +optional
	Rollout *RolloutControl `json:"rollout,omitempty"`

	// PromotedBy is who set preparationName last, as the API server names them: the admission
	// policy kokumi-serving-approval admits a change of preparationName only with the writer's
	// own name here. Kokumi's own name when it promoted on its own.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	PromotedBy string `json:"promotedBy,omitempty"`

	// Approvals are people's approvals of the gates of the roll-out (Environment.spec.approval
	// and spec.rollout.waves[].approval). Only those naming preparationName count.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Approvals []Approval `json:"approvals,omitempty"`
}

// RolloutControl is what a person asks of the roll-out of a Serving's Preparation. The
// admission policy kokumi-serving-rollout refuses a change of it whose by does not name the
// person who makes it, so that the Events that record it name who did it.
type RolloutControl struct {
	// Paused stops the roll-out where it stands: no further cluster is changed until it is
	// false again. A failure past the budget still halts or rolls back.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Abort names the Preparation whose roll-out to abort: every cluster it changed goes back
	// to the last Preparation of the Order with a deployment record in the Environment (as
	// onFailure: Rollback does), or, when there is none, stays as it is. It acts while it
	// names spec.preparationName; cleared, the roll-out starts again from its first wave.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Abort string `json:"abort,omitempty"`

	// By is who changed paused or abort last, as the API server names them (kubectl auth
	// whoami).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	By string `json:"by,omitempty"`
}

// ClusterCounts counts the clusters of a Serving by the state of their deployment.
type ClusterCounts struct {
	// Selected is how many Clusters the Environment selects.
	// +optional
	Selected int32 `json:"selected"`
	// Healthy is how many run the Preparation synced and healthy.
	// +optional
	Healthy int32 `json:"healthy"`
	// Progressing is how many are on their way.
	// +optional
	Progressing int32 `json:"progressing"`
	// Degraded is how many Argo CD reports degraded or failed to sync.
	// +optional
	Degraded int32 `json:"degraded"`
	// Held is how many Kokumi does not deploy to, those whose Cluster is not Ready among them.
	// +optional
	Held int32 `json:"held"`
	// Drifted is how many Argo CD deployed the Preparation to and has reported OutOfSync since,
	// for longer than the drift threshold: what runs there is not what was deployed.
	// +optional
	Drifted int32 `json:"drifted"`
}

// TargetCondition says why one cluster does not run the Preparation healthily.
type TargetCondition struct {
	// Type is Held, Degraded, Drifted or Progressing.
	// +kubebuilder:validation:MaxLength=32
	// +required
	Type string `json:"type"`

	// Reason is a CamelCase reason, such as ClusterNotReady or Rejected.
	// +kubebuilder:validation:MaxLength=64
	// +required
	Reason string `json:"reason"`

	// Message is what Argo CD or Kokumi reports, shortened.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// Target is one cluster that does not run the deployed Preparation healthily.
type Target struct {
	// Cluster is the Cluster's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Cluster string `json:"cluster"`

	// Application is the Argo CD Application for the cluster.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Application string `json:"application,omitempty"`

	// Revision is the revision Argo CD last synced on the cluster.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Revision string `json:"revision,omitempty"`

	// Conditions says why, the main one first.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	// +optional
	Conditions []TargetCondition `json:"conditions,omitempty"`

	// Since is when the cluster entered this state.
	// +optional
	Since metav1.Time `json:"since,omitempty"`
}

// RevisionCount is how many of a Serving's clusters run one artifact digest.
type RevisionCount struct {
	// Revision is the artifact digest Argo CD last synced on those clusters.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Revision string `json:"revision"`

	// Clusters counts them.
	// +required
	Clusters int32 `json:"clusters"`
}

// RolloutState is where a roll-out in waves stands.
type RolloutState string

const (
	// RolloutProgressing means waves are rolling out or soaking.
	RolloutProgressing RolloutState = "Progressing"
	// RolloutComplete means every wave was reached.
	RolloutComplete RolloutState = "Complete"
	// RolloutHalted means the failure budget was spent; no further cluster is changed.
	RolloutHalted RolloutState = "Halted"
	// RolloutRolledBack means the failure budget was spent, and the clusters changed went back to
	// rollbackTo.
	RolloutRolledBack RolloutState = "RolledBack"
	// RolloutPaused means a person paused it (spec.rollout.paused); no further cluster is changed.
	RolloutPaused RolloutState = "Paused"
	// RolloutAborted means a person aborted it (spec.rollout.abort): the clusters changed went back
	// to rollbackTo, or, without one, stay as they are.
	RolloutAborted RolloutState = "Aborted"
)

// WaveCount counts the clusters of one wave by where they stand in the roll-out.
type WaveCount struct {
	// Name of the wave.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`
	// Selected is how many Clusters the wave holds.
	// +optional
	Selected int32 `json:"selected"`
	// Healthy is how many run the release synced and healthy.
	// +optional
	Healthy int32 `json:"healthy"`
	// Progressing is how many run it, or are being updated to it, and are not healthy yet.
	// +optional
	Progressing int32 `json:"progressing"`
	// Failed is how many failed with it.
	// +optional
	Failed int32 `json:"failed"`
	// Waiting is how many are not updated yet, and run what they ran.
	// +optional
	Waiting int32 `json:"waiting"`
}

// RolloutStatus is where the roll-out of a Serving's Preparation in waves stands.
type RolloutStatus struct {
	// Preparation is the Preparation rolled out.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Preparation string `json:"preparation"`

	// Attempt identifies this roll-out of preparation: the Serving's metadata.generation when it
	// started. A promotion, a cleared abort, or the same Preparation promoted away and back
	// starts another attempt; approvals count for the attempt they name alone.
	// +optional
	Attempt int64 `json:"attempt,omitempty"`

	// From is the Preparation the clusters of waves not reached yet keep running, and a cluster
	// that joins such a wave gets; empty when none ran before.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	From string `json:"from,omitempty"`

	// State is Progressing, Paused, Complete, Halted, RolledBack or Aborted.
	// +kubebuilder:validation:MaxLength=32
	// +required
	State RolloutState `json:"state"`

	// Wave is the current wave: the last one reached; empty while the windows hold back the
	// first.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Wave string `json:"wave,omitempty"`

	// WaveHealthySince is when the current wave became healthy: its soak counts from there.
	// +optional
	WaveHealthySince *metav1.Time `json:"waveHealthySince,omitempty"`

	// RollbackTo is the Preparation the changed clusters went back to (state RolledBack).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RollbackTo string `json:"rollbackTo,omitempty"`

	// By is the person who paused or aborted the roll-out (spec.rollout.by).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	By string `json:"by,omitempty"`

	// NextWindow is when the next roll-out window opens, while the windows hold a wave back.
	// +optional
	NextWindow *metav1.Time `json:"nextWindow,omitempty"`

	// Message says why the roll-out halted, rolled back, was aborted or waits.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`

	// Waves counts the clusters of each wave, in roll-out order, the implicit last one included.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=17
	// +optional
	Waves []WaveCount `json:"waves,omitempty"`

	// Verifications are where the verifications of the waves reached, and of the Environment,
	// stand for this Preparation, in roll-out order.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=72
	// +optional
	Verifications []VerificationResult `json:"verifications,omitempty"`

	// Approvals are the approvals that count for this Preparation (spec.approvals, less those
	// of other Preparations and, where a gate asks for separation, the promoter's), in roll-out
	// order: each new one is an Event Approved.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Approvals []Approval `json:"approvals,omitempty"`

	// Authors are who wrote the Order's and the Product's spec the Preparation was rendered
	// from, as the admission policy kokumi-spec-writer stamped them: where a gate asks
	// approval.separateFromPromoter, their approvals count no more than the promoter's.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=512
	// +optional
	Authors []string `json:"authors,omitempty"`

	// Guard is where the Environment's guard (spec.guard) stands, once the roll-out is
	// complete and its deployment record written.
	// +optional
	Guard *GuardStatus `json:"guard,omitempty"`

	// Awaiting names the gate that waits for approvals: a wave, or "environment"; empty when
	// none waits.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Awaiting string `json:"awaiting,omitempty"`
}

// ServingStatus is the observed state of a Serving.
type ServingStatus struct {
	// ObservedGeneration is the generation last reconciled without error.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Revision is the artifact digest of the deployed Preparation.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Revision string `json:"revision,omitempty"`

	// DeployedRevision is the artifact digest that has run healthily on every cluster of the
	// Serving, without a break, since DeployedSince: the soak clock of the stages that require
	// this Environment. Empty while the Serving is not Deployed.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	DeployedRevision string `json:"deployedRevision,omitempty"`

	// DeployedSince is when DeployedRevision became Deployed. It starts again whenever the
	// revision changes or the Serving stops being Deployed, whatever the Ready condition's
	// transition time says.
	// +optional
	DeployedSince *metav1.Time `json:"deployedSince,omitempty"`

	// Clusters counts the clusters by the state of their deployment.
	// +optional
	Clusters ClusterCounts `json:"clusters,omitempty"`

	// Targets lists the clusters that do not run the Preparation healthily: held first, then
	// degraded, then drifted, then progressing, by name within each group; at most 64.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Targets []Target `json:"targets,omitempty"`

	// TargetsOmitted counts the non-healthy clusters left out of targets by the cap.
	// +optional
	TargetsOmitted int32 `json:"targetsOmitted,omitempty"`

	// Running counts every cluster by the revision Argo CD last synced there, most-run first:
	// what runs anywhere, however many clusters there are (targets lists at most 64). The
	// collector keeps each Preparation whose artifact is listed here; at most 16.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Running []RevisionCount `json:"running,omitempty"`

	// RunningOmitted counts the revisions the cap left out of running: while it is not zero,
	// the collector deletes none of the Order's Preparations.
	// +optional
	RunningOmitted int32 `json:"runningOmitted,omitempty"`

	// Rollout is where the roll-out in waves stands, when the Environment has a rollout policy.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`

	// Conditions of the Serving.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Serving deploys a Preparation to every cluster of the Order's Environment.
//
// +kubebuilder:validation:XValidation:rule="self.spec.orderRef.name == self.metadata.name",message="spec.orderRef.name must be the Serving's own name: a Serving deploys the Order of the same name, and nothing else"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=srv,categories=kokumi
// +kubebuilder:metadata:annotations="delivery.kokumi.dev/schema-revision=6"
// +kubebuilder:printcolumn:name="Order",type=string,JSONPath=`.spec.orderRef.name`
// +kubebuilder:printcolumn:name="Preparation",type=string,JSONPath=`.spec.preparationName`
// +kubebuilder:printcolumn:name="Clusters",type=integer,JSONPath=`.status.clusters.selected`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.clusters.healthy`
// +kubebuilder:printcolumn:name="Drifted",type=integer,JSONPath=`.status.clusters.drifted`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Serving struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServingSpec   `json:"spec"`
	Status ServingStatus `json:"status,omitempty"`
}

// ServingList is a list of Servings.
//
// +kubebuilder:object:root=true
type ServingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Serving `json:"items"`
}

func init() {
	register(&Serving{}, &ServingList{})
}
