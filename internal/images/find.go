// Package images finds the container images of rendered manifests, resolves each tag to the
// digest it points to now or copies the image into another registry, and rewrites the
// manifests to the pinned references.
package images

import (
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// podSpecPaths says where the pod spec sits in each kind that has one, by kind.
var podSpecPaths = map[string][]string{
	"Pod":                   {"spec"},
	"PodTemplate":           {"template", "spec"},
	"Deployment":            {"spec", "template", "spec"},
	"StatefulSet":           {"spec", "template", "spec"},
	"DaemonSet":             {"spec", "template", "spec"},
	"ReplicaSet":            {"spec", "template", "spec"},
	"ReplicationController": {"spec", "template", "spec"},
	"Job":                   {"spec", "template", "spec"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template", "spec"},
}

// containerLists are the lists of a pod spec that hold containers.
var containerLists = []string{"initContainers", "containers", "ephemeralContainers"}

// visit calls fn with every container (as a map) of every pod spec in objs.
func visit(objs []*unstructured.Unstructured, fn func(container map[string]any)) {
	for _, o := range objs {
		path, ok := podSpecPaths[o.GetKind()]
		if !ok {
			continue
		}
		podSpec := nestedMapRef(o.Object, path)
		if podSpec == nil {
			continue
		}
		for _, list := range containerLists {
			containers, ok := podSpec[list].([]any)
			if !ok {
				continue
			}
			for _, c := range containers {
				if cm, ok := c.(map[string]any); ok {
					fn(cm)
				}
			}
		}
	}
}

// nestedMapRef returns the map at path inside obj itself (not a copy), or nil.
func nestedMapRef(obj map[string]any, path []string) map[string]any {
	cur := obj
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}

// Find returns every distinct image reference of the containers, init containers and ephemeral
// containers of the pods, pod templates, deployments, statefulsets, daemonsets, replicasets,
// replication controllers, jobs and cronjobs in objs, sorted.
func Find(objs []*unstructured.Unstructured) []string {
	seen := map[string]bool{}
	visit(objs, func(c map[string]any) {
		if image, ok := c["image"].(string); ok && image != "" {
			seen[image] = true
		}
	})
	refs := make([]string, 0, len(seen))
	for r := range seen {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	return refs
}

// Rewrite replaces every container image found in mapping (original → pinned) in place.
func Rewrite(objs []*unstructured.Unstructured, mapping map[string]string) {
	visit(objs, func(c map[string]any) {
		if image, ok := c["image"].(string); ok {
			if pinned, ok := mapping[image]; ok {
				c["image"] = pinned
			}
		}
	})
}
