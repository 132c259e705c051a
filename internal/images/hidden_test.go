package images

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestFindHiddenSeesImagesOutsideThePodSpecsFindVisits(t *testing.T) {
	objs := objects(t,
		// Find pins these: not hidden.
		"kind: Deployment\napiVersion: apps/v1\nmetadata: {name: api, annotations: {image: 'note:1'}}\nspec: {template: {spec: {containers: [{name: c, image: 'deploy:1'}], initContainers: [{name: i, image: 'init:1'}],\n  volumes: [{name: v, image: {reference: 'data:1'}}]}}}\n",
		// An Argo Rollout: Find does not know the kind.
		"kind: Rollout\napiVersion: argoproj.io/v1alpha1\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: c, image: 'ghcr.io/x/web:1.0'}]}}}\n",
		// A custom resource with a list of images, one by digest.
		"kind: Widget\napiVersion: example.com/v1\nmetadata: {name: w}\nspec: {images: ['ghcr.io/x/a@"+digestA+"', 'ghcr.io/x/b:2']}\n",
		// Opaque data and schemas are not scanned.
		"kind: ConfigMap\napiVersion: v1\nmetadata: {name: cm}\ndata: {image: 'not-an-image:1'}\n",
		"kind: CustomResourceDefinition\napiVersion: apiextensions.k8s.io/v1\nmetadata: {name: widgets.example.com}\nspec: {versions: [{schema: {openAPIV3Schema: {properties: {image: {type: string, default: 'x:1'}}}}}]}\n",
	)
	h := FindHidden(objs)
	want := []string{
		"Deployment/api: spec.template.spec.volumes[0].image.reference (data:1)",
		"Rollout/web: spec.template.spec.containers[0].image (ghcr.io/x/web:1.0)",
		"Widget/w: spec.images[1] (ghcr.io/x/b:2)",
	}
	if !reflect.DeepEqual(h.Unpinned, want) {
		t.Errorf("Unpinned = %q, want %q", h.Unpinned, want)
	}
	if !reflect.DeepEqual(h.Digests, []string{digestA}) || h.Omitted != 0 || h.Pinned() {
		t.Errorf("Digests = %v, Omitted = %d, Pinned = %v", h.Digests, h.Omitted, h.Pinned())
	}
	if again := FindHidden(objs); !reflect.DeepEqual(again, h) {
		t.Errorf("a second scan differs: %+v", again)
	}
}

func TestFindHiddenByDigestOnlyIsPinned(t *testing.T) {
	h := FindHidden(objects(t, "kind: Rollout\napiVersion: argoproj.io/v1alpha1\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: c, image: 'ghcr.io/x/web@"+digestA+"'}]}}}\n"))
	if !h.Pinned() || len(h.Digests) != 1 {
		t.Errorf("FindHidden = %+v, want one digest and pinned", h)
	}
	if h := FindHidden(objects(t, "kind: Deployment\napiVersion: apps/v1\nmetadata: {name: d}\nspec: {template: {spec: {containers: [{name: c, image: 'x:1'}]}}}\n")); !h.Pinned() || len(h.Digests) != 0 {
		t.Errorf("a plain Deployment has hidden images: %+v", h)
	}
}

func TestFindHiddenStaysBoundedAndFailsClosed(t *testing.T) {
	var docs []string
	for i := range MaxHiddenUnpinned + 5 {
		docs = append(docs, fmt.Sprintf("kind: Widget\napiVersion: example.com/v1\nmetadata: {name: w%02d}\nspec: {image: 'x:%d'}\n", i, i))
	}
	h := FindHidden(objects(t, docs...))
	if len(h.Unpinned) != MaxHiddenUnpinned || h.Omitted != 5 {
		t.Errorf("%d unpinned, %d omitted; want %d and 5", len(h.Unpinned), h.Omitted, MaxHiddenUnpinned)
	}
	// Deeper than the scan goes: counted, not passed over.
	deep := "kind: Widget\napiVersion: example.com/v1\nmetadata: {name: deep}\nspec: " + strings.Repeat("{a: ", maxHiddenDepth+2) + "{image: 'x@" + digestA + "'}" + strings.Repeat("}", maxHiddenDepth+2) + "\n"
	if h := FindHidden(objects(t, deep)); h.Pinned() || h.Omitted != 1 {
		t.Errorf("a too deep object: %+v, want one omitted", h)
	}
	long := "kind: Widget\napiVersion: example.com/v1\nmetadata: {name: long}\nspec: {image: 'x:" + strings.Repeat("1", 2000) + "'}\n"
	if h := FindHidden(objects(t, long)); len(h.Unpinned) != 1 || len(h.Unpinned[0]) > maxHiddenEntry {
		t.Errorf("a long reference makes an entry of %d bytes", len(h.Unpinned[0]))
	}
}
