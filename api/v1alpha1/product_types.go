package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImagePolicyType says where the images of a Preparation are pulled from.
// +kubebuilder:validation:Enum=Pin;Vendor
type ImagePolicyType string

const (
	// ImagePolicyPin resolves every image tag to its digest, pulled from where it is published.
	ImagePolicyPin ImagePolicyType = "Pin"
	// ImagePolicyVendor copies every image into a registry and rewrites the manifests to it.
	ImagePolicyVendor ImagePolicyType = "Vendor"
)

// ProductSource is the OCI artifact a Product renders: a Helm chart or a bundle of YAML files.
type ProductSource struct {
	// URL is the oci:// reference of the chart or bundle, without a tag.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('oci://') && size(self) > 6",message="source.url must be an oci:// reference, such as oci://ghcr.io/stefanprodan/charts/podinfo"
	// +required
	URL string `json:"url"`

	// Version is a tag or a sha256: digest. Empty means the tag latest.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}|sha256:[a-f0-9]{64})$`
	// +optional
	Version string `json:"version,omitempty"`

	// CredentialsRef names a kubernetes.io/dockerconfigjson Secret of the Product's namespace
	// used to pull the source.
	// +optional
	CredentialsRef *LocalObjectReference `json:"credentialsRef,omitempty"`
}

// HelmRender renders the source as a Helm chart.
type HelmRender struct {
	// ReleaseName is the Helm release name. Defaults to each Order's name.
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	ReleaseName string `json:"releaseName,omitempty"`

	// Values are the Helm values.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

	// IncludeCRDs renders the chart's crds/ directory too.
	// +optional
	IncludeCRDs bool `json:"includeCRDs,omitempty"`
}

// RenderSpec says how the source turns into manifests.
type RenderSpec struct {
	// Helm renders the source as a Helm chart.
	// +optional
	Helm *HelmRender `json:"helm,omitempty"`
}

// ImageSpec says where the images of the rendered manifests are pulled from.
type ImageSpec struct {
	// Policy is Pin (default) or Vendor.
	// +kubebuilder:default=Pin
	// +optional
	Policy ImagePolicyType `json:"policy,omitempty"`

	// Registry receives the images under Vendor. Defaults to the bundled registry.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Registry string `json:"registry,omitempty"`
}

// ProductSpec describes an application: its source, how it renders, and its images.
type ProductSpec struct {
	// Source is the chart or bundle to render.
	// +required
	Source ProductSource `json:"source"`

	// TargetNamespace is the application's home on every cluster, unless an Order overrides it.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// Render says how the source turns into manifests. Without it the source is a bundle of YAML files.
	// +optional
	Render *RenderSpec `json:"render,omitempty"`

	// Images says where images are pulled from.
	// +optional
	Images ImageSpec `json:"images,omitempty"`

	// Verify asks that the source and every image the render pins be signed by a key an admin
	// trusts (cosign, key-based). An input that is not never makes a Preparation: the Order
	// says which input, its digest and why, and the Serving keeps what it runs.
	// +optional
	Verify *VerifySpec `json:"verify,omitempty"`
}

// TrustedKeysLabel marks a ConfigMap of Kokumi's namespace as a set of public keys that
// Products may name in spec.verify.publicKeys; only an admin writes there.
const TrustedKeysLabel = "delivery.kokumi.dev/trusted-keys"

// VerifySpec says which keys must have signed a Product's inputs. Signatures are read in
// cosign's layout (the tag sha256-<digest>.sig of the input's repository), as `cosign sign
// --key` writes them.
// +kubebuilder:validation:XValidation:rule="!has(self.keyless)",message="spec.verify.keyless: keyless verification (certificate identity and issuer) is not supported: Kokumi verifies cosign key-based signatures only; remove keyless and list the publishers' public keys in spec.verify.publicKeys"
type VerifySpec struct {
	// PublicKeys name ConfigMaps in Kokumi's namespace (kokumi-system) that an admin labels
	// delivery.kokumi.dev/trusted-keys=true; each of their *.pub entries is a PEM public key
	// (ECDSA P-256, as `cosign generate-key-pair` writes it). The source and each image must
	// be signed by one of the keys of all the ConfigMaps listed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +required
	PublicKeys []string `json:"publicKeys"`

	// Keyless is not supported, and refused: it exists so that a Product asking for it is
	// refused at admission rather than rendered unverified.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	Keyless *apiextensionsv1.JSON `json:"keyless,omitempty"`
}

// Product is what an application is: an OCI Helm chart or manifest bundle, values and image policy.
// It has no status: nothing about a Product alone is observed (whether its source renders is its
// Orders' Ready condition, per Environment).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=prod,categories=kokumi
// +kubebuilder:metadata:annotations="delivery.kokumi.dev/schema-revision=6"
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source.url`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.source.version`
// +kubebuilder:printcolumn:name="Target-Namespace",type=string,JSONPath=`.spec.targetNamespace`,priority=1
// +kubebuilder:printcolumn:name="Images",type=string,JSONPath=`.spec.images.policy`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a Product's name is at most 63 characters: it is a label value of its Preparations; choose a shorter name"
type Product struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ProductSpec `json:"spec"`
}

// ProductList is a list of Products.
//
// +kubebuilder:object:root=true
type ProductList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Product `json:"items"`
}

func init() {
	register(&Product{}, &ProductList{})
}
