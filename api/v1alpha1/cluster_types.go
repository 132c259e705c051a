package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InClusterServer is the server URL of the cluster Kokumi runs in, as Argo CD names it.
const InClusterServer = "https://kubernetes.default.svc"

// ClusterSpec names a cluster's API server and the credentials to reach it.
type ClusterSpec struct {
	// Server is the API server URL.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') && size(self) > 8 && isURL(self) && !self.contains(' ')",message="server must be an https:// URL, such as https://edge-1.example.com:6443"
	// +required
	Server string `json:"server"`

	// CredentialsRef names a Secret in Kokumi's namespace holding a kubeconfig, or a bearer
	// token and a CA bundle.
	// +required
	CredentialsRef LocalObjectReference `json:"credentialsRef"`
}

// ClusterStatus is the observed state of a Cluster.
type ClusterStatus struct {
	// ObservedGeneration is the generation last reconciled without error.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Version is the Kubernetes version the server reported.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Version string `json:"version,omitempty"`

	// LastProbeTime is when a probe last changed the status (Ready, its reason, or the
	// version); a probe that finds what the status says writes nothing.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`

	// Conditions of the Cluster.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Cluster is a cluster an admin registered. Its labels are what Environments select on.
//
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a Cluster's name is at most 63 characters: it is a label value of the Applications that deploy to it; choose a shorter name"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=kcluster,categories=kokumi
// +kubebuilder:metadata:annotations="delivery.kokumi.dev/schema-revision=6"
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.server`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterSpec   `json:"spec"`
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

func init() {
	register(&Cluster{}, &ClusterList{})
}
