// Package v1alpha1 holds the Kokumi API: Product, Order, Preparation, Serving, Environment and
// Cluster, in the group delivery.kokumi.dev.
//
// +kubebuilder:object:generate=true
// +groupName=delivery.kokumi.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every Kokumi kind.
	GroupVersion = schema.GroupVersion{Group: "delivery.kokumi.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the Kokumi kinds with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the Kokumi kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// knownTypes are the kinds each types file registers.
	knownTypes []runtime.Object
)

// register adds kinds to the group; each types file calls it from init.
func register(objects ...runtime.Object) { knownTypes = append(knownTypes, objects...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// SchemaRevisionAnnotation is the annotation of each of Kokumi's CRDs that says which revision
// of its schema it is (docs/install.md, "Upgrades and the CRDs").
const SchemaRevisionAnnotation = "delivery.kokumi.dev/schema-revision"

// SchemaRevision is the revision of the CRDs' schemas this build needs, at least. It goes up
// with every change that adds or changes a field the controller writes or reads, together with
// the +kubebuilder:metadata:annotations marker of every kind (a test keeps the two equal): an
// older schema would prune the new fields silently.
const SchemaRevision = 6
