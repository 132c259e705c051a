package render

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The annotations that make a resource a hook for Argo CD, which deploys what Kokumi renders:
// Argo CD's own, and Helm's, which Argo CD honours in any manifest, a chart's or a bundle's.
const (
	// argoCDHookAnnotation is Argo CD's hook annotation: a comma-separated list of PreSync,
	// Sync, PostSync, SyncFail, Skip, and (Argo CD 3) PreDelete and PostDelete.
	argoCDHookAnnotation = "argocd.argoproj.io/hook"
	// helmHookAnnotation is Helm's hook annotation: a comma-separated list of events such as
	// pre-install, post-upgrade, pre-delete, post-delete and test.
	helmHookAnnotation = "helm.sh/hook"
)

// undeployedEvents are, per hook annotation, the events of a hook Kokumi never deploys,
// compared without regard to case. Delete hooks (Argo CD's PreDelete and PostDelete, Helm's
// pre-delete and post-delete, which Argo CD runs alike): Argo CD runs them when an Application
// is deleted, and Kokumi deletes Applications when a cluster leaves the Environment, when the
// project no longer permits the Order, or when the Serving goes, while what runs on the cluster
// keeps running; a tenant's hook could delete it, and an unreachable cluster would hold the
// deletion. Helm's test hooks: they are for `helm test`, not a deployment.
var undeployedEvents = map[string][]string{
	argoCDHookAnnotation: {"PreDelete", "PostDelete"},
	helmHookAnnotation:   {"pre-delete", "post-delete", "test", "test-success"},
}

// deployable returns the objects Kokumi deploys, in order: a hook loses the events
// undeployedEvents names from its hook annotations, an annotation left without events goes,
// and a hook left with no hook annotation at all goes. Every other object is returned as it
// is. Render applies it to charts and bundles alike.
func deployable(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := objs[:0]
	for _, o := range objs {
		if keepHook(o) {
			out = append(out, o)
		}
	}
	clear(objs[len(out):])
	return out
}

// keepHook removes the undeployed events from o's hook annotations and says whether o is still
// deployed: it is unless it lost events and no hook annotation is left.
func keepHook(o *unstructured.Unstructured) bool {
	annotations := o.GetAnnotations()
	changed, left := false, false
	for key, drop := range undeployedEvents {
		value, ok := annotations[key]
		if !ok {
			continue
		}
		var kept []string
		dropped := false
		for e := range strings.SplitSeq(value, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			if containsFold(drop, e) {
				dropped = true
				continue
			}
			kept = append(kept, e)
		}
		if !dropped {
			left = true
			continue
		}
		changed = true
		if len(kept) == 0 {
			delete(annotations, key)
			continue
		}
		annotations[key] = strings.Join(kept, ",")
		left = true
	}
	if !changed {
		return true
	}
	if !left {
		return false
	}
	o.SetAnnotations(annotations)
	return true
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
