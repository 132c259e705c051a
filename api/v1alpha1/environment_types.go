package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// LocalEnvironmentName names the cluster Kokumi runs in, in every namespace without an
// Environment of that name.
const LocalEnvironmentName = "local"

// StageMatch says what makes a Preparation "the same release" as what a stage ran.
// +kubebuilder:validation:Enum=Artifact;Release
type StageMatch string

const (
	// MatchArtifact compares the source digest and the image digests: the values, the Product,
	// the Order and the target namespace may differ. It is the default.
	MatchArtifact StageMatch = "Artifact"
	// MatchRelease compares what MatchArtifact does and the render configuration (the Helm
	// values and CRD setting the Preparation recorded as spec.configurationDigest), all but the
	// release name and the target namespace, which are each Order's own.
	MatchRelease StageMatch = "Release"
)

// StageRequirement is a stage of another Environment a Preparation must pass first.
type StageRequirement struct {
	// Environment of the same namespace that must run the same release healthily first.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Environment string `json:"environment"`

	// Soak is how long the release must have run there healthily, without a break, such as
	// 30m. Absent or 0 means deployed healthily is enough.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	Soak *metav1.Duration `json:"soak,omitempty"`

	// Match says what "the same release" means here: Artifact (the default: the same source
	// digest and image digests, whatever the values) or Release (also the same render
	// configuration: the same Helm values, so that what soaked is what is promoted).
	// +optional
	Match StageMatch `json:"match,omitempty"`

	// Wave, when set, asks less than the whole Environment: that the release rolled out past
	// this wave of the Environment's roll-out (healthy there, soaked as the wave says), with a
	// verified deployment record of that wave, and that the roll-out goes on (not halted,
	// rolled back or aborted). The soak counts from that record. A record of the whole
	// Environment passes it too.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Wave string `json:"wave,omitempty"`

	// Verified asks more of the record: that it says every verification and approval the
	// Environment (or the wave) asked for passed (the record's predicate.verified), with the
	// verifications and approvers it names.
	// +optional
	Verified bool `json:"verified,omitempty"`
}

// UnselectedWave names the last, implicit wave of a roll-out: the clusters no wave selects.
const UnselectedWave = "unselected"

// MaxWaves is the most waves a roll-out lists (the implicit last one comes on top).
const MaxWaves = 16

// RolloutFailureAction is what a roll-out does once more clusters failed than its budget allows.
// +kubebuilder:validation:Enum=Halt;Rollback
type RolloutFailureAction string

const (
	// RolloutHalt stops the roll-out: no further cluster is changed; those it changed stay.
	RolloutHalt RolloutFailureAction = "Halt"
	// RolloutRollback stops the roll-out and deploys, to every cluster it changed, the last
	// Preparation of the Order with a deployment record in the Environment.
	RolloutRollback RolloutFailureAction = "Rollback"
)

// RolloutWave is one step of a roll-out: the clusters it selects update together.
type RolloutWave struct {
	// Name of the wave, unique in the roll-out.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// ClusterSelector picks, among the Environment's Clusters, those of this wave; a Cluster
	// belongs to the first wave that selects it. Absent selects every Cluster no earlier wave
	// selected.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`

	// Soak is how long the wave must run healthily, once every cluster of it that is not held
	// runs the new release synced and healthy, before the next wave starts, such as 10m.
	// Absent or 0: the next wave starts as soon as this one is healthy.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	Soak *metav1.Duration `json:"soak,omitempty"`

	// MaxUnavailable is how many clusters of the wave may run a release that is not healthy yet
	// at once: a count (at least 1) or a percent of the wave's clusters (1% to 100%, rounded
	// up). Absent: the whole wave at once.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="maxUnavailable is a count of at least 1, or a percent from 1% to 100%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// Verify are checks run once the wave is healthy, during its soak: the next wave starts
	// only once they all passed; one that fails counts against the failure budget.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=4
	// +optional
	Verify []Verification `json:"verify,omitempty"`

	// Approval asks for people's approval before the wave starts.
	// +optional
	Approval *ApprovalPolicy `json:"approval,omitempty"`
}

// RolloutWindowKind says whether a window allows roll-outs or denies them.
// +kubebuilder:validation:Enum=Allow;Deny
type RolloutWindowKind string

const (
	// WindowAllow means waves start only while a window of this kind is open (when there is one).
	WindowAllow RolloutWindowKind = "Allow"
	// WindowDeny means no wave starts while a window of this kind is open.
	WindowDeny RolloutWindowKind = "Deny"
)

// MaxWindows is the most windows a roll-out policy lists.
const MaxWindows = 8

// RolloutWindow is a span of time that comes back on a schedule.
type RolloutWindow struct {
	// Kind is Allow (the default: waves start only inside the Allow windows) or Deny (no wave
	// starts inside it, whatever the Allow windows say).
	// +kubebuilder:default=Allow
	// +optional
	Kind RolloutWindowKind `json:"kind,omitempty"`

	// Schedule is when the window opens: a cron expression of five fields (minute, hour, day of
	// the month, month, day of the week), such as "0 22 * * 1-5" (22:00, Monday to Friday).
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=128
	// +required
	Schedule string `json:"schedule"`

	// Duration is how long the window stays open each time it opens, such as 8h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +required
	Duration metav1.Duration `json:"duration"`

	// TimeZone is the IANA time zone the schedule reads in, such as Europe/Paris. Absent: UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// WindowCloseAction is what a roll-out does when the windows close while a wave is under way.
// +kubebuilder:validation:Enum=Finish;Pause
type WindowCloseAction string

const (
	// WindowCloseFinish means the wave under way finishes; the next one waits for a window.
	WindowCloseFinish WindowCloseAction = "Finish"
	// WindowClosePause means no further cluster is changed until a window opens.
	WindowClosePause WindowCloseAction = "Pause"
)

// RolloutPolicy rolls a release out to an Environment's clusters in waves.
type RolloutPolicy struct {
	// Waves, in the order they roll out. The Clusters no wave selects form a last wave,
	// "unselected", that rolls out after them, all at once.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(w, self.exists_one(x, x.name == w.name))",message="wave names must be unique"
	// +kubebuilder:validation:XValidation:rule="self.all(w, w.name != 'unselected')",message="the wave name unselected is reserved for the Clusters no wave selects"
	// +kubebuilder:validation:XValidation:rule="self.all(w, w.name != 'environment')",message="the wave name environment is reserved for the Environment's own gate"
	// +required
	Waves []RolloutWave `json:"waves"`

	// FailureBudget is how many clusters may fail (Degraded, an Argo CD error, or past the
	// progress deadline) before the roll-out stops. 0, the default, stops at the first.
	// +kubebuilder:validation:Minimum=0
	// +optional
	FailureBudget int32 `json:"failureBudget,omitempty"`

	// OnFailure is what a roll-out past its failure budget does: Halt (the default) changes no
	// further cluster; Rollback also deploys, to every cluster it changed, the last Preparation
	// of the Order with a deployment record in this Environment.
	// +kubebuilder:default=Halt
	// +optional
	OnFailure RolloutFailureAction `json:"onFailure,omitempty"`

	// Windows say when waves may start: only while an Allow window is open (when there is
	// one), and never while a Deny window is. Absent: at any time.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Windows []RolloutWindow `json:"windows,omitempty"`

	// OnWindowClose is what a wave under way does when the windows close: Finish (the
	// default: its clusters are still updated, the next wave waits for a window) or Pause (no
	// further cluster is changed until a window opens).
	// +kubebuilder:default=Finish
	// +optional
	OnWindowClose WindowCloseAction `json:"onWindowClose,omitempty"`
}

// GuardPolicy watches a release after it is Deployed.
type GuardPolicy struct {
	// Verifications names verifications of the Environment's spec.verify that the guard runs
	// again, each with its successCondition (or Job), failureLimit and the guard's interval.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=63
	// +required
	Verifications []string `json:"verifications"`

	// Interval is how long Kokumi waits between two runs of each, such as 1m. Default 1m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Duration is how long the guard watches, such as 1h: it passes once every verification
	// passed duration/interval runs in a row (at least one).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +required
	Duration metav1.Duration `json:"duration"`

	// OnFailure is what a failed guard does beside the revocation: Halt (the default) leaves
	// the clusters as they are, the Serving halted; Rollback deploys, to every cluster, the last
	// Preparation of the Order with a deployment record in this Environment that is not revoked.
	// +kubebuilder:default=Halt
	// +optional
	OnFailure RolloutFailureAction `json:"onFailure,omitempty"`
}

// EnvironmentSpec is a group of clusters an admin set up.
type EnvironmentSpec struct {
	// ClusterSelector picks Clusters by label. An empty selector picks every Cluster.
	// +required
	ClusterSelector metav1.LabelSelector `json:"clusterSelector"`

	// Project is the Argo CD AppProject, in Argo CD's namespace, every Application of this
	// Environment uses.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Project string `json:"project"`

	// Requires lists stages of other Environments of the namespace a release must pass first:
	// deployed healthily there by an Order of the namespace, with a verified deployment record,
	// for at least the soak, and still running there.
	// +listType=map
	// +listMapKey=environment
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Requires []StageRequirement `json:"requires,omitempty"`

	// Rollout rolls each release out in waves, with a failure budget. Absent: every release
	// deploys to every cluster at once.
	// +optional
	Rollout *RolloutPolicy `json:"rollout,omitempty"`

	// Verify are checks run once every cluster runs a release healthily, during its soak: the
	// Environment's deployment record says verified only once they all passed; one that fails
	// counts against the roll-out's failure budget (without spec.rollout, it halts).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=4
	// +optional
	Verify []Verification `json:"verify,omitempty"`

	// Guard runs some of the verifications of spec.verify again after a release is Deployed
	// (its deployment record written), every interval for a duration: one that fails revokes
	// the record (Kokumi signs a revocation), the stages that require this Environment refuse
	// the release, and onFailure applies.
	// +optional
	Guard *GuardPolicy `json:"guard,omitempty"`

	// SignedSources admits only Preparations whose source and every image were verified, at
	// their render, as signed by keys of these ConfigMaps (Kokumi's namespace, labelled
	// delivery.kokumi.dev/trusted-keys=true): a Serving of the Environment deploys no other,
	// promoted by hand or automatically. The Products rendered for it must ask for verification
	// (spec.verify) with such keys.
	// +optional
	SignedSources *VerifySpec `json:"signedSources,omitempty"`

	// Approval asks for people's approval before a release rolls out to the Environment.
	// +optional
	Approval *ApprovalPolicy `json:"approval,omitempty"`

	// Notifications are webhooks told of each roll-out transition of the Environment's
	// Servings.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Notifications []Notification `json:"notifications,omitempty"`
}

// EnvironmentStatus is the observed state of an Environment.
type EnvironmentStatus struct {
	// ObservedGeneration is the generation last reconciled without error.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Clusters is how many Clusters the selector picks.
	// +optional
	Clusters int32 `json:"clusters,omitempty"`

	// ReadyClusters is how many of them are Ready.
	// +optional
	ReadyClusters int32 `json:"readyClusters,omitempty"`

	// Conditions of the Environment.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Environment is a group of clusters an admin set up, and the Argo CD project they deploy through.
//
// +kubebuilder:validation:XValidation:rule="!has(self.spec.guard) || self.spec.guard.verifications.all(n, has(self.spec.verify) && self.spec.verify.exists(v, v.name == n))",message="spec.guard.verifications names only verifications of spec.verify: add it there, or remove the name"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.requires) || self.spec.requires.all(r, r.environment != self.metadata.name)",message="spec.requires cannot name the Environment itself: a stage requires other Environments"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=env,categories=kokumi
// +kubebuilder:metadata:annotations="delivery.kokumi.dev/schema-revision=6"
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.project`
// +kubebuilder:printcolumn:name="Clusters",type=integer,JSONPath=`.status.clusters`
// +kubebuilder:printcolumn:name="Ready-Clusters",type=integer,JSONPath=`.status.readyClusters`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Environment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EnvironmentSpec   `json:"spec"`
	Status EnvironmentStatus `json:"status,omitempty"`
}

// EnvironmentList is a list of Environments.
//
// +kubebuilder:object:root=true
type EnvironmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Environment `json:"items"`
}

func init() {
	register(&Environment{}, &EnvironmentList{})
}
