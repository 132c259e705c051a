package images

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kokumi-dev/kokumi/internal/text"
)

// Bounds of the hidden-image scan: what lies beyond them is counted as omitted, never passed
// over silently.
const (
	// MaxHiddenDigests is the most distinct digests of hidden images recorded.
	MaxHiddenDigests = 64
	// MaxHiddenUnpinned is the most hidden images by tag recorded by name.
	MaxHiddenUnpinned = 16
	// maxHiddenDepth is how deep the scan walks into one object.
	maxHiddenDepth = 64
	// maxHiddenEntry caps the length of one entry of Hidden.Unpinned.
	maxHiddenEntry = 512
)

// Hidden are the image references of rendered objects that Find does not see: string fields
// named image, strings of lists named images, and image volumes' references (image.reference),
// anywhere outside the containers of the pod specs Find visits (a Rollout's or a Knative
// Service's containers, an operator's custom resource). Kokumi neither pins nor rewrites them.
// Not scanned: metadata, the opaque data of ConfigMaps and Secrets (keys there are file names
// and values, not fields), and CustomResourceDefinitions (schemas, not workloads).
type Hidden struct {
	// Digests are the distinct digests of the references given by digest (…@sha256:…), sorted.
	Digests []string
	// Unpinned name the references given by tag, as "Kind/name: path (reference)", in render
	// order.
	Unpinned []string
	// Omitted counts the references left out of both lists because they were full, and the
	// subtrees too deep to scan.
	Omitted int
}

// Pinned is true when every hidden reference is recorded and given by digest.
func (h Hidden) Pinned() bool { return len(h.Unpinned) == 0 && h.Omitted == 0 }

// FindHidden scans objs for image references Find does not see (see Hidden).
func FindHidden(objs []*unstructured.Unstructured) Hidden {
	s := hiddenScan{digests: map[string]bool{}}
	for _, o := range objs {
		kind := o.GetKind()
		if kind == "CustomResourceDefinition" {
			continue
		}
		s.object = kind + "/" + o.GetName()
		s.skip = podSpecPaths[kind]
		keys := make([]string, 0, len(o.Object))
		for k := range o.Object {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if notScanned(kind, k) {
				continue
			}
			s.walk(append(make([]string, 0, 16), k), o.Object[k])
		}
	}
	var h Hidden
	for d := range s.digests {
		h.Digests = append(h.Digests, d)
	}
	sort.Strings(h.Digests)
	if len(h.Digests) > MaxHiddenDigests {
		h.Omitted += len(h.Digests) - MaxHiddenDigests
		h.Digests = h.Digests[:MaxHiddenDigests]
	}
	h.Unpinned, h.Omitted = s.unpinned, h.Omitted+s.omitted
	return h
}

type hiddenScan struct {
	object   string   // Kind/name of the object scanned
	skip     []string // the path of its pod spec, whose containers Find visits
	digests  map[string]bool
	unpinned []string
	omitted  int
}

func (s *hiddenScan) walk(path []string, v any) {
	switch t := v.(type) {
	case map[string]any:
		if len(path) > maxHiddenDepth {
			s.omitted++ // too deep to tell: counted, so that it fails closed
			return
		}
		find := s.visitedByFind(path)
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys) // a deterministic Preparation, whatever the map order
		for _, k := range keys {
			c := t[k]
			if ref, ok := c.(string); ok {
				// Find pins the image of the containers it visits. An image volume
				// (volumes[].image.reference) it does not.
				if (k == "image" && !find) || (k == "reference" && strings.HasSuffix(path[len(path)-1], "image")) {
					s.found(append(path, k), ref)
				}
				continue
			}
			if list, ok := c.([]any); ok && k == "images" {
				for i, e := range list {
					if ref, ok := e.(string); ok {
						s.found(append(path, k+"["+strconv.Itoa(i)+"]"), ref)
					}
				}
			}
			s.walk(append(path, k), c)
		}
	case []any:
		if len(path) > maxHiddenDepth {
			s.omitted++
			return
		}
		last := path[len(path)-1]
		for i, e := range t {
			p := append(append(make([]string, 0, len(path)+4), path[:len(path)-1]...), last+"["+strconv.Itoa(i)+"]")
			s.walk(p, e)
		}
	}
}

// notScanned says whether the top-level field k of an object of kind holds no image fields.
func notScanned(kind, k string) bool {
	switch k {
	case "metadata", "apiVersion", "kind":
		return true
	case "data", "stringData", "binaryData":
		return kind == "ConfigMap" || kind == "Secret"
	}
	return false
}

// visitedByFind says whether path is a container Find visits: <pod spec>.<list>[i].
func (s *hiddenScan) visitedByFind(path []string) bool {
	if s.skip == nil || len(path) != len(s.skip)+1 {
		return false
	}
	for i, p := range s.skip {
		if path[i] != p {
			return false
		}
	}
	for _, list := range containerLists {
		if strings.HasPrefix(path[len(path)-1], list+"[") {
			return true
		}
	}
	return false
}

func (s *hiddenScan) found(path []string, ref string) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return
	}
	if d := sha256Of(ref); d != "" {
		s.digests[d] = true
		return
	}
	if len(s.unpinned) >= MaxHiddenUnpinned {
		s.omitted++
		return
	}
	entry := fmt.Sprintf("%s: %s (%s)", s.object, strings.Join(path, "."), ref)
	s.unpinned = append(s.unpinned, text.ShortenMiddle(entry, maxHiddenEntry))
}

// sha256Of returns the sha256 digest a reference ends with (name@sha256:<64 hex>), or "".
func sha256Of(ref string) string {
	i := strings.LastIndex(ref, "@sha256:")
	if i < 0 {
		return ""
	}
	hexPart := ref[i+len("@sha256:"):]
	if len(hexPart) != 64 {
		return ""
	}
	for _, c := range hexPart {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ""
		}
	}
	return ref[i+1:]
}
