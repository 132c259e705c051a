package view

import (
	"fmt"
	"strings"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Custody says in a line what a Preparation's spec.provenance claims: whether its source and
// images were verified and by which keys, and which of Kokumi's keys signed its provenance; or
// that it has no provenance. It is for people: cosign checks the provenance itself
// (docs/verified-sources.md).
func Custody(p *v1.PreparationProvenance) string {
	if p == nil {
		return "no provenance: rendered before Kokumi signed one; sources not verified"
	}
	sources := "sources not verified (the Product asks none)"
	if p.Sources == v1.SourcesVerified {
		sources = "sources verified by key " + strings.Join(p.VerifiedBy, ", ")
	}
	return fmt.Sprintf("%s; provenance signed by key %s", sources, p.KeyID)
}
