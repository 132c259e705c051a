package preparation

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Authors: who wrote what a Preparation is made of.

const (
	// AnnotationSpecWrittenBy names who last changed an Order's or a Product's spec, as the API
	// server names them: the admission policy kokumi-spec-writer stamps it, and lets nobody
	// write another's name there.
	AnnotationSpecWrittenBy = "delivery.kokumi.dev/spec-written-by"
	// AnnotationAuthors is a Preparation's: the writers of the Order's and the Product's spec it
	// was rendered from, comma-separated (the Order controller copies them at the render; tenants
	// do not write Preparations).
	AnnotationAuthors = "delivery.kokumi.dev/authors"
)

// AuthorsAnnotation is the value of AnnotationAuthors of a Preparation rendered from the specs
// of these objects (an Order and its Product): their writers, each once, sorted; empty when none
// is stamped.
func AuthorsAnnotation(objs ...metav1.Object) string {
	var names []string
	for _, o := range objs {
		if w := o.GetAnnotations()[AnnotationSpecWrittenBy]; w != "" && !slices.Contains(names, w) {
			names = append(names, w)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// Authors returns the writers of the specs a Preparation was rendered from (AnnotationAuthors).
func Authors(prep metav1.Object) []string {
	v := prep.GetAnnotations()[AnnotationAuthors]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}
