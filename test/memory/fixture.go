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
	"github.com/kokumi-dev/kokumi/internal/dev/bench"
	"github.com/kokumi-dev/kokumi/internal/fleet"
)

// Fixture sizes: a Helm chart of some 180 objects, and Argo CD's default history of 10.
const (
	Resources = 180
	History   = 10
)

// RealisticApplication returns the Application Kokumi writes for servingNamespace/serving on
// cluster, as Argo CD leaves it after ten syncs of a 180-object chart (bench.SyncedApplication:
// status.resources (180), status.history (10), an operationState with its syncResult (180
// resources), a summary, and the managedFields of Kokumi and Argo CD's controller), with a
// health message and a condition. It is some 76 KB as JSON.
func RealisticApplication(argoNamespace, servingNamespace, serving, cluster string, i int) *unstructured.Unstructured {
	spec := argocd.ApplicationSpec{
		Name: fleet.ApplicationName(servingNamespace, serving, cluster), Namespace: argoNamespace,
		ServingNamespace: servingNamespace, ServingName: serving, Cluster: cluster,
		Project: "fleet", RepoURL: "oci://kokumi-registry.kokumi-system.svc:5000/" + servingNamespace + "/" + serving,
		Revision: fmt.Sprintf("sha256:%064x", i+1), Server: "https://" + cluster + ".clusters.example:6443", TargetNamespace: serving, Retry: argocd.DefaultSyncRetry,
	}
	created := metav1.NewTime(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	app := bench.SyncedApplication(spec, created, Resources, History, i)
	st := app.Object["status"].(map[string]any)
	st["health"].(map[string]any)["message"] = "all 180 resources healthy"
	st["conditions"] = []any{map[string]any{"type": "SyncError", "message": "one retry: the API server did not answer in time",
		"lastTransitionTime": created.Add(9 * time.Hour).Format(time.RFC3339)}}
	return app
}
