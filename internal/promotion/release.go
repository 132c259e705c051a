package promotion

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Contents is what a Preparation records that makes its release.
type Contents struct {
	// SourceDigest is the digest the chart or bundle resolved to.
	SourceDigest string
	// Images are the references Kokumi pinned (by digest; where they are pulled from does not
	// count).
	Images []string
	// HiddenDigests are the digests of the images given by digest outside the pod specs Kokumi
	// pins (a Rollout's, a custom resource's).
	HiddenDigests []string
	// Configuration is the digest of the render configuration (the Helm values and CRD
	// setting); empty when the Preparation did not record it.
	Configuration string
	// Unpinned names the images outside the pod specs given by tag; UnpinnedOmitted counts
	// those not named, or not scanned.
	Unpinned        []string
	UnpinnedOmitted int
}

// Release is a Preparation's release, as the stages compare it: the one identity the gate,
// the Serving, the UI and the plugin use.
type Release struct {
	// Artifact is the digest of the source digest and the set of image digests, hidden ones
	// given by digest included: what match: Artifact compares.
	Artifact string
	// Configuration is the render configuration's digest: what match: Release compares too.
	// Empty when unknown, which never matches.
	Configuration string
	// Unpinned and UnpinnedOmitted are the images outside the pod specs Kokumi pins that are
	// not given by digest: while there is one, the release passes no stage.
	Unpinned        []string
	UnpinnedOmitted int
}

// NewRelease is the release of c. The order of the images, where they are pulled from, the
// Order, its Product, its release name and its target namespace do not count.
func NewRelease(c Contents) Release {
	seen := make(map[string]bool, len(c.Images)+len(c.HiddenDigests))
	digests := make([]string, 0, len(c.Images)+len(c.HiddenDigests))
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			digests = append(digests, d)
		}
	}
	for _, ref := range c.Images {
		if i := strings.LastIndex(ref, "@"); i >= 0 {
			ref = ref[i+1:]
		}
		add(ref)
	}
	for _, d := range c.HiddenDigests {
		add(d)
	}
	sort.Strings(digests)
	h := sha256.New()
	h.Write([]byte(c.SourceDigest))
	for _, d := range digests {
		h.Write([]byte{'\n'})
		h.Write([]byte(d))
	}
	return Release{
		Artifact:      "sha256:" + hex.EncodeToString(h.Sum(nil)),
		Configuration: c.Configuration,
		Unpinned:      c.Unpinned, UnpinnedOmitted: c.UnpinnedOmitted,
	}
}

// Pinned is true when every image of the release is pinned by digest: a release with an
// image Kokumi could not pin passes no stage, whatever the match.
func (r Release) Pinned() bool { return len(r.Unpinned) == 0 && r.UnpinnedOmitted == 0 }

// Same says whether other is the same release as r under match: the same Artifact and, for
// MatchRelease, the same known Configuration.
func (r Release) Same(other Release, match v1.StageMatch) bool {
	if r.Artifact != other.Artifact {
		return false
	}
	if match == v1.MatchRelease {
		return r.Configuration != "" && r.Configuration == other.Configuration
	}
	return true
}

// sameWhat says what a stage's match compared, for its message.
func sameWhat(match v1.StageMatch) string {
	if match == v1.MatchRelease {
		return "same chart, images and values"
	}
	return "same chart and images"
}

// compared says what a stage compared of the releases of in and run, for the message of a stage
// that passes or soaks: as sameWhat says, but when the stage matches the artifact only and
// run's values differ from in's (both known), which Order runs it and that its values differ.
// The Order's message and the UI's Pipeline both show it.
func compared(match v1.StageMatch, in Release, run *Run) string {
	if match != v1.MatchRelease && in.Configuration != "" && run.Release.Configuration != "" && in.Configuration != run.Release.Configuration {
		return fmt.Sprintf("Order %s runs the same chart and images with other values", run.Order)
	}
	return sameWhat(match)
}

// PinProblem says why a release with images Kokumi could not pin passes no stage, and the
// fix; "" when it is Pinned. The gate's verdict and the Order's message both say it.
func (r Release) PinProblem() string {
	if r.Pinned() {
		return ""
	}
	var what string
	switch {
	case len(r.Unpinned) > 0 && len(r.Unpinned)+r.UnpinnedOmitted > 1:
		what = fmt.Sprintf("%s, and %d more", r.Unpinned[0], len(r.Unpinned)+r.UnpinnedOmitted-1)
	case len(r.Unpinned) > 0:
		what = r.Unpinned[0]
	default:
		what = fmt.Sprintf("%d references the scan could not list", r.UnpinnedOmitted)
	}
	return "it has images Kokumi cannot pin, outside the pod specs it reads (" + what +
		"): no stage passes it until they are given by digest (name@sha256:…) in the Product's values or its chart"
}
