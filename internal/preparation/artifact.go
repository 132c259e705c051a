// Package preparation says who a Preparation is and where its artifact lives: its name, its
// labels, its repository in the bundled registry now; which old Preparations an Order may let
// go; and the plain rules of an Order's renders: when a failed render is tried again (the
// render backoff), which claims the skip rule checks, and which existing Preparation a render
// found again. It takes plain values (no Kubernetes client), builds nothing
// (internal/preparation/build does), and links no renderer; the rules that read the render's
// own types are internal/preparation/recipe's.
package preparation

import (
	"strings"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
)

// Labels on the Preparations Kokumi creates.
const (
	// LabelOrder names the Order a Preparation was rendered for.
	LabelOrder = "delivery.kokumi.dev/order"
	// LabelProduct names the Product a Preparation was rendered from.
	LabelProduct = "delivery.kokumi.dev/product"
)

// ManifestsFile is the one file of a Preparation artifact's layer.
const ManifestsFile = "manifests.yaml"

// ArtifactDir is the top directory of the Preparations of a namespace in the bundled registry:
// kokumi/<namespace>/<order> (see OwnArtifactPath).
const ArtifactDir = oci.ArtifactDir

// Name is the name of an Order's Preparation with an artifact digest: <order>-<first 10 hex
// digits of the digest>, the Order's name shortened to fit.
func Name(order, artifactDigest string) string {
	short := strings.TrimPrefix(artifactDigest, "sha256:")
	if len(short) > 10 {
		short = short[:10]
	}
	if max := 253 - len(short) - 1; len(order) > max {
		order = order[:max]
	}
	return order + "-" + short
}

// ArtifactLocation is where a Preparation's artifact is read now: its repository (host/path,
// no scheme) and its digest.
//
// A Preparation records the address its artifact was pushed to, and never changes; the bundled
// registry may since have moved (a new Service, a restore into another cluster). Its digest is
// a content address, so when the recorded repository is Kokumi's own one for the Preparation
// (kokumi/<namespace>/<order>) in a host that is not bundledRegistry, the same digest is read
// from bundledRegistry. Any other repository is read where it is recorded.
func ArtifactLocation(bundledRegistry string, prep *v1.Preparation) (repository, digest string) {
	repository, digest, ok := strings.Cut(oci.TrimScheme(prep.Spec.Artifact.Ref), "@")
	if !ok {
		digest = prep.Spec.Artifact.Digest
	}
	host, path, _ := strings.Cut(repository, "/")
	if bundledRegistry != "" && host != bundledRegistry && path == OwnArtifactPath(prep.Namespace, prep.Spec.OrderRef.Name) {
		repository = bundledRegistry + "/" + path
	}
	return repository, digest
}

// OwnArtifactPath is the repository path, in the bundled registry, of the Preparations of the
// Order name of namespace.
func OwnArtifactPath(namespace, name string) string {
	return ArtifactDir + "/" + namespace + "/" + name
}
