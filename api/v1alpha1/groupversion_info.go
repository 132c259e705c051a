// Package v1alpha1 holds the Kokumi API: Product, Order, Preparation, Serving, Environment and
// Cluster, in the group delivery.kokumi.dev.
//
// +kubebuilder:object:generate=true
// +groupName=delivery.kokumi.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every Kokumi kind.
	GroupVersion = schema.GroupVersion{Group: "delivery.kokumi.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the Kokumi kinds with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the Kokumi kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
