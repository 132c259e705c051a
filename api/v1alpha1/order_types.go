package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PromotionMode says who promotes a Preparation to the Serving.
// +kubebuilder:validation:Enum=Automatic;Manual
type PromotionMode string

const (
	// PromotionAutomatic promotes the newest Ready Preparation once its gates pass.
	PromotionAutomatic PromotionMode = "Automatic"
	// PromotionManual leaves promotion to a person.
	PromotionManual PromotionMode = "Manual"
)

// Promotion says how Preparations reach the Serving.
type Promotion struct {
	// Mode is Automatic or Manual (default).
	// +kubebuilder:default=Manual
	// +optional
	Mode PromotionMode `json:"mode,omitempty"`
}

// OrderSpec delivers a Product to one Environment.
type OrderSpec struct {
	// ProductRef names a Product of the Order's namespace.
	// +required
	ProductRef LocalObjectReference `json:"productRef"`

	// EnvironmentRef names an Environment of the Order's namespace, or local. It cannot be changed.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="environmentRef cannot be changed: create another Order to deploy to another Environment"
	// +required
	EnvironmentRef LocalObjectReference `json:"environmentRef"`

	// TargetNamespace overrides the Product's target namespace on every cluster.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// Promotion says how Preparations reach the Serving.
	// +optional
	Promotion Promotion `json:"promotion,omitempty"`

	// RolloutPace slows the roll-out of this Order's releases down from what its Environment's
	// policy says; it never speeds it up.
	// +optional
	RolloutPace *RolloutPace `json:"rolloutPace,omitempty"`
}

// RolloutPace is a slower pace an Order asks for than its Environment's roll-out policy.
type RolloutPace struct {
	// MinSoak is the least soak of each wave but the last: a wave the Environment soaks for
	// less, or not at all, soaks this long, such as 30m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	MinSoak *metav1.Duration `json:"minSoak,omitempty"`

	// MaxUnavailable caps how many clusters of each wave may run a release that is not healthy
	// yet at once: a count (at least 1) or a percent of the wave; the smaller of this and the
	// wave's own applies. Without a policy on the Environment, it applies to all its clusters.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="maxUnavailable is a count of at least 1, or a percent from 1% to 100%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// OrderStatus is the observed state of an Order.
type OrderStatus struct {
	// ObservedGeneration is the generation last reconciled without error.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LatestPreparation is the newest Preparation rendered for the Order.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	LatestPreparation string `json:"latestPreparation,omitempty"`

	// TargetNamespace is the namespace the Order deploys into, as resolved.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// InputsHash identifies what the latest Preparation was rendered from: the Product's source
	// and the digest its version resolved to, the release name, target namespace, values, image
	// policy and credentials Secret. While it holds, every image tag still points to the digest
	// the Preparation pinned and the bundled registry holds its artifact, a resync renders nothing.
	// +kubebuilder:validation:MaxLength=71
	// +optional
	InputsHash string `json:"inputsHash,omitempty"`

	// RenderRetry is the failed renders in a row of the Order's current input, and when the next
	// try is due: kept on the Order, so that a controller that starts again does not first render
	// what failed (a source that takes a render to its limits) before the others.
	// +optional
	RenderRetry *RenderRetry `json:"renderRetry,omitempty"`

	// Conditions of the Order.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RenderRetry is an Order's failed renders in a row of one input, and when the next is due.
type RenderRetry struct {
	// Input identifies what failed: the Order's generation and its Product's UID and generation.
	// A change of either is tried at once.
	// +kubebuilder:validation:MaxLength=128
	Input string `json:"input"`
	// Failures is how many renders of Input failed in a row.
	// +kubebuilder:validation:Minimum=1
	Failures int32 `json:"failures"`
	// NotBefore is when Input is tried again.
	NotBefore metav1.Time `json:"notBefore"`
}

// MaxOrderNameLength is the longest name an Order may have: its name is the Helm release name
// (Helm's limit) and a label value of its Preparations and Applications. The Order's
// XValidation rule below says the same number (TestOrderNameRuleSaysMaxOrderNameLength).
const MaxOrderNameLength = 53

// OrderNameTooLong is how the server and the UI say that a name is too long.
const OrderNameTooLong = "an Order's name is at most 53 characters: it is the Helm release name (Helm's limit) and a label value of its Preparations and Applications; choose a shorter name"

// Order delivers a Product to one Environment.
//
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 53",message="an Order's name is at most 53 characters: it is the Helm release name (Helm's limit) and a label value of its Preparations and Applications; choose a shorter name"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ord,categories=kokumi
// +kubebuilder:metadata:annotations="delivery.kokumi.dev/schema-revision=6"
// +kubebuilder:printcolumn:name="Product",type=string,JSONPath=`.spec.productRef.name`
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.spec.environmentRef.name`
// +kubebuilder:printcolumn:name="Preparation",type=string,JSONPath=`.status.latestPreparation`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.promotion.mode`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Order struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   OrderSpec   `json:"spec"`
	Status OrderStatus `json:"status,omitempty"`
}

// OrderList is a list of Orders.
//
// +kubebuilder:object:root=true
type OrderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Order `json:"items"`
}

func init() {
	register(&Order{}, &OrderList{})
}
