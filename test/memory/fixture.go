// Package memory measures what the cache of Argo CD's namespace costs at fleet scale, against a
// real API server: N Applications as Argo CD writes them (status.resources, history,
// operationState, managedFields), cached whole and as Kokumi caches them (argocd.Application,
// and the managed-by selector). Its fixture, RealisticApplication, is shared with the
// cached Application's unit test (internal/controller).
package memory

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
)

// Fixture sizes: a Helm chart of some 200 objects, and Argo CD's default history of 10.
const (
	Resources = 200
	History   = 10
)

// RealisticApplication returns the Application Kokumi writes for servingNamespace/serving on
// cluster, as Argo CD leaves it after ten syncs of a 200-object chart: status.resources (200),
// status.history (10), an operationState with its syncResult (200 resources), a summary, a
// condition, and the managedFields of Kokumi and Argo CD's controller. It is some 67 KB as JSON.
func RealisticApplication(argoNamespace, servingNamespace, serving, cluster string, i int) *unstructured.Unstructured {
	name := fleet.ApplicationName(servingNamespace, serving, cluster)
	revision := fmt.Sprintf("sha256:%064x", i+1)
	spec := argocd.ApplicationSpec{
		Name: name, Namespace: argoNamespace, ServingNamespace: servingNamespace, ServingName: serving, Cluster: cluster,
		Project: "fleet", RepoURL: "oci://kokumi-registry.kokumi-system.svc:5000/" + servingNamespace + "/" + serving,
		Revision: revision, Server: "https://" + cluster + ".clusters.example:6443", TargetNamespace: serving, Retry: argocd.DefaultSyncRetry,
	}
	app := spec.Build()
	t := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) string { return t.Add(d).Format(time.RFC3339) }

	kinds := []struct{ group, version, kind string }{
		{"apps", "v1", "Deployment"}, {"", "v1", "Service"}, {"", "v1", "ConfigMap"}, {"", "v1", "ServiceAccount"},
		{"rbac.authorization.k8s.io", "v1", "Role"}, {"rbac.authorization.k8s.io", "v1", "RoleBinding"},
		{"networking.k8s.io", "v1", "Ingress"}, {"autoscaling", "v2", "HorizontalPodAutoscaler"},
		{"policy", "v1", "PodDisruptionBudget"}, {"monitoring.coreos.com", "v1", "ServiceMonitor"},
	}
	resources := make([]any, 0, Resources)
	results := make([]any, 0, Resources)
	for r := range Resources {
		k := kinds[r%len(kinds)]
		obj := fmt.Sprintf("web-%03d", r)
		res := map[string]any{"group": k.group, "version": k.version, "kind": k.kind, "namespace": serving, "name": obj,
			"status": "Synced", "health": map[string]any{"status": "Healthy"}}
		result := map[string]any{"group": k.group, "version": k.version, "kind": k.kind, "namespace": serving, "name": obj,
			"status": "Synced", "message": "unchanged", "syncPhase": "Sync"}
		if k.group == "" { // omitempty in status.resources, required in syncResult
			delete(res, "group")
		}
		resources = append(resources, res)
		results = append(results, result)
	}
	history := make([]any, 0, History)
	for h := range History {
		history = append(history, map[string]any{
			"id": int64(h), "revision": fmt.Sprintf("sha256:%064x", i*History+h), "deployedAt": ts(time.Duration(h) * time.Hour),
			"deployStartedAt": ts(time.Duration(h)*time.Hour - time.Minute), "initiatedBy": map[string]any{"automated": true},
			"source": map[string]any{"repoURL": spec.RepoURL, "targetRevision": revision, "path": "."},
		})
	}
	images := make([]any, 0, 8)
	for im := range 8 {
		images = append(images, fmt.Sprintf("ghcr.io/example/%s-component-%d:1.%d.%d", serving, im, i%10, im))
	}
	app.Object["status"] = map[string]any{
		"resources": resources,
		"history":   history,
		"sync": map[string]any{"status": "Synced", "revision": revision,
			"comparedTo": map[string]any{"source": map[string]any{"repoURL": spec.RepoURL, "targetRevision": revision, "path": "."},
				"destination": map[string]any{"server": spec.Server, "namespace": serving}}},
		"health":              map[string]any{"status": "Healthy", "message": "all 200 resources healthy", "lastTransitionTime": ts(10 * time.Hour)},
		"conditions":          []any{map[string]any{"type": "SyncError", "message": "one retry: the API server did not answer in time", "lastTransitionTime": ts(9 * time.Hour)}},
		"reconciledAt":        ts(11 * time.Hour),
		"observedAt":          ts(11 * time.Hour),
		"sourceType":          "Directory",
		"controllerNamespace": argoNamespace,
		"summary":             map[string]any{"images": images, "externalURLs": []any{"https://" + serving + "." + cluster + ".example"}},
		"operationState": map[string]any{
			"phase": "Succeeded", "message": "successfully synced (all tasks run)", "startedAt": ts(10 * time.Hour), "finishedAt": ts(10*time.Hour + time.Minute),
			"operation": map[string]any{
				"sync":        map[string]any{"revision": revision, "prune": true, "syncOptions": []any{"CreateNamespace=true"}},
				"initiatedBy": map[string]any{"automated": true},
				"retry":       map[string]any{"limit": int64(5), "backoff": map[string]any{"duration": "5s", "factor": int64(2), "maxDuration": "3m0s"}},
			},
			"syncResult": map[string]any{"revision": revision, "resources": results,
				"source": map[string]any{"repoURL": spec.RepoURL, "targetRevision": revision, "path": "."}},
		},
	}
	app.SetManagedFields(managedFields(ts))
	return app
}

// managedFields are those of an Application Kokumi created and Argo CD's controller keeps.
func managedFields(ts func(time.Duration) string) []metav1.ManagedFieldsEntry {
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(mustParse(ts(d))); return &t }
	return []metav1.ManagedFieldsEntry{
		{Manager: "kokumi", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "argoproj.io/v1alpha1", Time: at(0), FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:delivery.kokumi.dev/owner":{}},"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{},"f:delivery.kokumi.dev/cluster":{},"f:delivery.kokumi.dev/serving":{},"f:delivery.kokumi.dev/serving-namespace":{}}},"f:spec":{".":{},"f:destination":{".":{},"f:namespace":{},"f:server":{}},"f:project":{},"f:source":{".":{},"f:path":{},"f:repoURL":{},"f:targetRevision":{}},"f:syncPolicy":{".":{},"f:automated":{".":{},"f:prune":{},"f:selfHeal":{}},"f:retry":{".":{},"f:backoff":{".":{},"f:duration":{},"f:factor":{},"f:maxDuration":{}},"f:limit":{}},"f:syncOptions":{}}}}`)},
		{Manager: "argocd-application-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "argoproj.io/v1alpha1", Time: at(11 * time.Hour), FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{".":{},"f:conditions":{},"f:controllerNamespace":{},"f:health":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:status":{}},"f:history":{},"f:observedAt":{},"f:operationState":{".":{},"f:finishedAt":{},"f:message":{},"f:operation":{".":{},"f:initiatedBy":{".":{},"f:automated":{}},"f:retry":{".":{},"f:backoff":{".":{},"f:duration":{},"f:factor":{},"f:maxDuration":{}},"f:limit":{}},"f:sync":{".":{},"f:prune":{},"f:revision":{},"f:syncOptions":{}}},"f:phase":{},"f:startedAt":{},"f:syncResult":{".":{},"f:resources":{},"f:revision":{},"f:source":{".":{},"f:path":{},"f:repoURL":{},"f:targetRevision":{}}}},"f:reconciledAt":{},"f:resources":{},"f:sourceType":{},"f:summary":{".":{},"f:externalURLs":{},"f:images":{}},"f:sync":{".":{},"f:comparedTo":{".":{},"f:destination":{".":{},"f:namespace":{},"f:server":{}},"f:source":{".":{},"f:path":{},"f:repoURL":{},"f:targetRevision":{}}},"f:revision":{},"f:status":{}}}}`)},
	}
}

func mustParse(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}
