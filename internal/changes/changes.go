// Package changes says what differs between two Preparations, and reads what a Preparation
// renders: the fields they record (source, target namespace, config hash), their images, and,
// pulled from the registry, their rendered manifests object by object. The kubectl plugin's
// `diff` prints it; Kokumi's API server answers it to the UI.
package changes

import (
	"context"
	"fmt"
	"sort"
	"strings"

	kmanifests "github.com/kokumi-dev/kokumi/internal/manifests"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

// Change is how an image or an object differs from one Preparation to the other.
type Change string

// Changes.
const (
	// Added: only the second Preparation has it.
	Added Change = "added"
	// Removed: only the first Preparation has it.
	Removed Change = "removed"
	// Changed: both have it, differently.
	Changed Change = "changed"
	// Unknown: what the Preparations record does not tell.
	Unknown Change = "unknown"
)

// Field is one field two Preparations record, and its value in each.
type Field struct {
	// Name is the field as the API names it: source.url, source.version, source.digest,
	// targetNamespace or configHash.
	Name string
	// Label is the field as the plugin prints it, such as "source URL".
	Label string
	// From and To are its values in the first and the second Preparation.
	From, To string
}

// Fields returns what a and b record, in this order: the source's URL, version and resolved
// digest, the target namespace and the config hash; those that differ and those that do not.
func Fields(a, b *v1.Preparation) []Field {
	return []Field{
		{"source.url", "source URL", a.Spec.Source.URL, b.Spec.Source.URL},
		{"source.version", "source version", a.Spec.Source.Version, b.Spec.Source.Version},
		{"source.digest", "source digest", a.Spec.Source.Digest, b.Spec.Source.Digest},
		{"targetNamespace", "target namespace", a.Spec.TargetNamespace, b.Spec.TargetNamespace},
		{"configHash", "config hash", a.Spec.ConfigHash, b.Spec.ConfigHash},
	}
}

// Values says how the render configuration of b (the Product's Helm values and whether the
// chart's CRDs render) stands against a's, as their spec.configurationDigest records it:
// Changed, "" (the same), or Unknown when one of them was rendered before Kokumi recorded it.
// The values themselves are not recorded on a Preparation, only their digest.
func Values(a, b *v1.Preparation) Change {
	switch {
	case a.Spec.ConfigurationDigest == "" || b.Spec.ConfigurationDigest == "":
		return Unknown
	case a.Spec.ConfigurationDigest != b.Spec.ConfigurationDigest:
		return Changed
	}
	return ""
}

// ImageChange is one image that differs.
type ImageChange struct {
	// Repository is the image without its tag and digest: images are matched by it, so a new
	// tag of the same image is Changed.
	Repository string
	Change     Change
	// From and To are the image in the first and the second Preparation; the zero ImagePin
	// when it is Added or Removed.
	From, To v1.ImagePin
}

// Images matches the images of a and b by repository and returns the differences, sorted by
// repository, and how many are the same.
func Images(a, b []v1.ImagePin) ([]ImageChange, int) {
	index := func(pins []v1.ImagePin) map[string]v1.ImagePin {
		m := make(map[string]v1.ImagePin, len(pins))
		for _, p := range pins {
			m[Repository(p.Original)] = p
		}
		return m
	}
	ia, ib := index(a), index(b)
	var out []ImageChange
	unchanged := 0
	for repo, pa := range ia {
		pb, ok := ib[repo]
		switch {
		case !ok:
			out = append(out, ImageChange{Repository: repo, Change: Removed, From: pa})
		case pa.Original != pb.Original || pa.Pinned != pb.Pinned:
			out = append(out, ImageChange{Repository: repo, Change: Changed, From: pa, To: pb})
		default:
			unchanged++
		}
	}
	for repo, pb := range ib {
		if _, ok := ia[repo]; !ok {
			out = append(out, ImageChange{Repository: repo, Change: Added, To: pb})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Repository < out[j].Repository })
	return out, unchanged
}

// Repository is an image reference without its tag and digest.
func Repository(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// PinnedDigest is the digest of a pinned reference (repo@sha256:…), or the reference.
func PinnedDigest(ref string) string {
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		return ref[i+1:]
	}
	return ref
}

// PullManifests pulls the artifact repository@digest of the Preparation named prep, reading
// at most limit bytes (compressed, and again uncompressed), and returns its rendered manifests:
// manifests.yaml of its tar layer.
func PullManifests(ctx context.Context, c *oci.Client, prep, repository, digest string, limit int64) ([]byte, error) {
	if repository == "" || digest == "" {
		return nil, fmt.Errorf("preparation %s names no artifact (spec.artifact)", prep)
	}
	pulled, err := c.PullWithin(ctx, repository, digest, oci.PullLimits{Bytes: limit})
	if err != nil {
		return nil, fmt.Errorf("pull the artifact of Preparation %s from %s@%s: %w", prep, repository, digest, err)
	}
	for _, l := range pulled.Layers {
		if l.MediaType != oci.MediaTypeLayerTarGzip && l.MediaType != oci.MediaTypeLayerTar {
			continue
		}
		files, _, err := oci.UntarGzWithin(l.Data, l.MediaType == oci.MediaTypeLayerTarGzip, 0, limit)
		if err != nil {
			return nil, fmt.Errorf("read the layer of Preparation %s's artifact: %w", prep, err)
		}
		if m, ok := files[preparation.ManifestsFile]; ok {
			return m, nil
		}
	}
	return nil, fmt.Errorf("the artifact of Preparation %s (%s@%s) holds no %s: is it a Kokumi Preparation?", prep, repository, digest, preparation.ManifestsFile)
}

// Object is one object of rendered manifests.
type Object struct {
	APIVersion, Kind, Namespace, Name string
	// YAML is the object alone, as Kokumi writes manifests.
	YAML string
}

// Key identifies the object: apiVersion/kind/[namespace/]name.
func (o Object) Key() string {
	key := o.APIVersion + "/" + o.Kind + "/"
	if o.Namespace != "" {
		key += o.Namespace + "/"
	}
	return key + o.Name
}

// Objects splits the rendered manifests of the Preparation named prep into its objects, in
// the order the manifests list them.
func Objects(prep string, manifests []byte) ([]Object, error) {
	objs, err := kmanifests.Parse(manifests)
	if err != nil {
		return nil, fmt.Errorf("parse the manifests of Preparation %s: %w", prep, err)
	}
	out := make([]Object, 0, len(objs))
	for _, obj := range objs {
		data, err := kmanifests.Marshal([]*unstructured.Unstructured{obj})
		if err != nil {
			return nil, fmt.Errorf("write %s %s of Preparation %s: %w", obj.GetKind(), obj.GetName(), prep, err)
		}
		out = append(out, Object{
			APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(),
			YAML: string(data),
		})
	}
	return out, nil
}

// ObjectChange is one object that differs, and a unified diff of its YAML.
type ObjectChange struct {
	// Object is the object as the second Preparation has it, or as the first had it when it
	// is Removed; its YAML is that side's.
	Object
	Change Change
	// Diff is a unified diff, "--- <from>/<key>" to "+++ <to>/<key>" (/dev/null for the side
	// that lacks it), with three lines of context.
	Diff string
}

// DiffObjects compares the objects of the Preparations named from and to, matched by Key, and
// returns those that differ, sorted by Key, and how many are the same. An object listed twice
// counts as its last.
func DiffObjects(from, to string, a, b []Object) ([]ObjectChange, int, error) {
	index := func(objs []Object) map[string]Object {
		m := make(map[string]Object, len(objs))
		for _, o := range objs {
			m[o.Key()] = o
		}
		return m
	}
	oa, ob := index(a), index(b)
	keys := make([]string, 0, len(oa)+len(ob))
	for k := range oa {
		keys = append(keys, k)
	}
	for k := range ob {
		if _, ok := oa[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []ObjectChange
	unchanged := 0
	for _, k := range keys {
		x, inA := oa[k]
		y, inB := ob[k]
		if inA && inB && x.YAML == y.YAML {
			unchanged++
			continue
		}
		c := ObjectChange{Object: y, Change: Changed}
		fromFile, toFile := from+"/"+k, to+"/"+k
		switch {
		case !inA:
			c.Change, fromFile = Added, "/dev/null"
		case !inB:
			c.Object, c.Change, toFile = x, Removed, "/dev/null"
		}
		text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
			A: lines(x.YAML), B: lines(y.YAML), FromFile: fromFile, ToFile: toFile, Context: 3,
		})
		if err != nil {
			return nil, 0, fmt.Errorf("diff %s: %w", k, err)
		}
		c.Diff = text
		out = append(out, c)
	}
	return out, unchanged, nil
}

// lines splits text into lines, each with its newline; none for no text.
func lines(text string) []string {
	if text == "" {
		return nil
	}
	return difflib.SplitLines(strings.TrimSuffix(text, "\n"))
}
