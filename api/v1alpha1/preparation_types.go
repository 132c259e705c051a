package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PreparationSource is the Product source a Preparation was rendered from.
type PreparationSource struct {
	// URL is the oci:// reference of the chart or bundle.
	// +kubebuilder:validation:MaxLength=512
	// +required
	URL string `json:"url"`

	// Version is the tag or digest the Product asked for.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Version string `json:"version,omitempty"`

	// Digest is the digest the version resolved to.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +required
	Digest string `json:"digest"`
}

// ImagePin records one image of the rendered manifests: as written, and as deployed.
type ImagePin struct {
	// Original is the reference the manifests named.
	// +kubebuilder:validation:MaxLength=512
	// +required
	Original string `json:"original"`

	// Pinned is the reference by digest the Preparation deploys.
	// +kubebuilder:validation:MaxLength=512
	// +required
	Pinned string `json:"pinned"`
}

// Artifact is the OCI artifact that holds the rendered manifests.
type Artifact struct {
	// Ref is the artifact's oci:// reference by digest (oci://registry/repo@sha256:…).
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('oci://')",message="artifact.ref must be an oci:// reference"
	// +required
	Ref string `json:"ref"`

	// Digest is the manifest digest of the artifact.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +required
	Digest string `json:"digest"`
}

// HiddenImages are image references Kokumi found in the rendered manifests outside the pod
// specs whose images it pins (fields named image, or lists named images, of a Rollout, a
// Knative Service or any other object). Kokumi does not rewrite them.
type HiddenImages struct {
	// Digests are the distinct digests of those given by digest (name@sha256:…), sorted, at
	// most 64: they count into the release the stages compare.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	// +optional
	Digests []string `json:"digests,omitempty"`

	// Unpinned names those given by tag, at most 16, each as "Kind/name: path (reference)":
	// no stage passes the Preparation while there is one.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	// +optional
	Unpinned []string `json:"unpinned,omitempty"`

	// Omitted counts the references left out of both lists (they were full, or the scan
	// stopped at its bounds): no stage passes the Preparation while it is not 0.
	// +optional
	Omitted int32 `json:"omitted,omitempty"`
}

// PreparationSpec records what was built. It never changes after creation.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a Preparation is immutable: change the Order or Product to render a new one"
type PreparationSpec struct {
	// OrderRef is the Order that rendered the Preparation.
	// +required
	OrderRef LocalObjectReference `json:"orderRef"`

	// ProductRef is the Product that was rendered.
	// +required
	ProductRef LocalObjectReference `json:"productRef"`

	// Source is the Product source, with the digest its version resolved to.
	// +required
	Source PreparationSource `json:"source"`

	// ReleaseName is the Helm release name the manifests were rendered with.
	// +kubebuilder:validation:MaxLength=53
	// +optional
	ReleaseName string `json:"releaseName,omitempty"`

	// TargetNamespace is the namespace the manifests were rendered into and deploy into.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	TargetNamespace string `json:"targetNamespace"`

	// Images lists every image of the manifests with the reference it was pinned to.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Images []ImagePin `json:"images,omitempty"`

	// ImagesInBundledRegistry is true when the images were vendored into the bundled registry,
	// which only the cluster Kokumi runs in reaches.
	// +optional
	ImagesInBundledRegistry bool `json:"imagesInBundledRegistry,omitempty"`

	// Artifact is the pushed OCI artifact.
	// +required
	Artifact Artifact `json:"artifact"`

	// ConfigHash is the hash of everything that was rendered; the same input never renders twice.
	// +kubebuilder:validation:MaxLength=128
	// +required
	ConfigHash string `json:"configHash"`

	// ConfigurationDigest identifies the Product's render configuration the Preparation was
	// rendered with (the Helm values and CRD setting), without the release name and the target
	// namespace: the stages whose requirement has match: Release compare it. Empty on
	// Preparations rendered before Kokumi recorded it.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ConfigurationDigest string `json:"configurationDigest,omitempty"`

	// HiddenImages are the image references found outside the pod specs Kokumi pins.
	// +optional
	HiddenImages *HiddenImages `json:"hiddenImages,omitempty"`

	// ParentDigest is the artifact digest of the Preparation this one follows.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ParentDigest string `json:"parentDigest,omitempty"`

	// Provenance is the render's signed SLSA v1 provenance, attached to the artifact in cosign's
	// attestation layout. Absent on Preparations rendered before Kokumi wrote one.
	// +optional
	Provenance *PreparationProvenance `json:"provenance,omitempty"`
}

// SourceVerification says how a Preparation's inputs were verified.
// +kubebuilder:validation:Enum=Verified;NotAsked
type SourceVerification string

const (
	// SourcesVerified: the Product asked (spec.verify) and a trusted key signed the source and
	// every image pinned.
	SourcesVerified SourceVerification = "Verified"
	// SourcesNotAsked: the Product asked no verification; nothing was checked.
	SourcesNotAsked SourceVerification = "NotAsked"
)

// PreparationProvenance points at a Preparation's signed provenance, for people: Kokumi and
// cosign read and verify the provenance itself in the registry.
type PreparationProvenance struct {
	// Digest is the digest of the DSSE envelope attached to the artifact.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Digest string `json:"digest"`

	// KeyID is the id of Kokumi's key that signed it.
	// +kubebuilder:validation:MaxLength=64
	// +required
	KeyID string `json:"keyID"`

	// Sources says whether the source and images were verified.
	// +required
	Sources SourceVerification `json:"sources"`

	// VerifiedBy are the ids of the keys that signed the inputs, sorted.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	VerifiedBy []string `json:"verifiedBy,omitempty"`
}

// DeploymentRecord is a signed record that a Preparation ran healthily on some clusters.
type DeploymentRecord struct {
	// Environment the Preparation was deployed to.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Environment string `json:"environment"`

	// Wave, when set, says the record is of one wave of a roll-out in waves: the clusters of
	// that wave and the waves before it ran the Preparation healthily, and the roll-out went on
	// past it. Empty: the whole Environment did.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Wave string `json:"wave,omitempty"`

	// Clusters counts the clusters that ran it healthily; the record names them.
	// +required
	Clusters int32 `json:"clusters"`

	// Time the record was made.
	// +required
	Time metav1.Time `json:"time"`

	// Digest of the record attached to the artifact: the digest of its signed DSSE envelope,
	// a layer of the artifact's sha256-<hex>.att attestation image.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Digest string `json:"digest"`

	// KeyID names the signing key: the file <keyID>.pub of the public-key ConfigMap verifies it.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	KeyID string `json:"keyID,omitempty"`

	// Verified says the record says every verification and approval the Environment (or the
	// wave) asked for passed (its predicate.verified).
	// +optional
	Verified bool `json:"verified,omitempty"`
}

// MaxRevocations is the most revocations a Preparation's status lists.
const MaxRevocations = 8

// Revocation is a signed statement that a Preparation's deployment record in an Environment no
// longer holds: the Environment's guard (spec.guard) failed after it was Deployed.
type Revocation struct {
	// Environment whose record is revoked.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Environment string `json:"environment"`

	// Record is the digest of the deployment record revoked.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Record string `json:"record,omitempty"`

	// Digest of the signed revocation attached to the artifact (a layer of its
	// sha256-<hex>.att attestation image); empty when Kokumi keeps no records.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Digest string `json:"digest,omitempty"`

	// Verification is the guard's verification that failed.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Verification string `json:"verification"`

	// Message is what its last run measured, shortened.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`

	// Time the verification failed.
	// +required
	Time metav1.Time `json:"time"`
}

// PreparationStatus is the observed state of a Preparation.
type PreparationStatus struct {
	// DeploymentRecords made for the Preparation, newest first, at most 32.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	DeploymentRecords []DeploymentRecord `json:"deploymentRecords,omitempty"`

	// Revocations Kokumi signed of the Preparation's deployment records, newest first, at most
	// 8: an Environment's guard failed after it was Deployed. Only Kokumi writes this list (its
	// tenants cannot write a Preparation's status), so that a stage's gate refuses a revoked
	// release even when the signed revocation is gone from the registry.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Revocations []Revocation `json:"revocations,omitempty"`

	// Conditions of the Preparation.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Preparation is what was built: an immutable OCI artifact, images pinned to digests.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=prep,categories=kokumi
// +kubebuilder:metadata:annotations="delivery.kokumi.dev/schema-revision=6"
// +kubebuilder:printcolumn:name="Order",type=string,JSONPath=`.spec.orderRef.name`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.source.version`
// +kubebuilder:printcolumn:name="Target-Namespace",type=string,JSONPath=`.spec.targetNamespace`
// +kubebuilder:printcolumn:name="Artifact",type=string,JSONPath=`.spec.artifact.digest`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Preparation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PreparationSpec   `json:"spec"`
	Status PreparationStatus `json:"status,omitempty"`
}

// PreparationList is a list of Preparations.
//
// +kubebuilder:object:root=true
type PreparationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Preparation `json:"items"`
}

func init() {
	register(&Preparation{}, &PreparationList{})
}
