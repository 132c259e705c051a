package argocache_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/test/memory"
)

// decoder decodes as Kokumi's clients and caches do: the scheme's JSON serializer.
func decoder(t *testing.T) kruntime.Decoder {
	t.Helper()
	scheme, err := kscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}

// cache decodes the JSON of u into what Kokumi's cache holds of it.
func cache(t *testing.T, dec kruntime.Decoder, data []byte) *argocd.Application {
	t.Helper()
	obj, _, err := dec.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	app, ok := obj.(*argocd.Application)
	if !ok {
		t.Fatalf("decoded a %T, want *argocd.Application", obj)
	}
	return app
}

// statusOf reads the status of a whole Application the long way, field by field.
func statusOf(t *testing.T, u *unstructured.Unstructured) argocd.Status {
	t.Helper()
	var st argocd.Status
	if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object["status"].(map[string]any), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// realistic is an Application as Argo CD writes it, with a refusal, a failed operation, kubectl's
// last-applied annotation, a finalizer and a top-level operation, and its JSON.
func realistic(t *testing.T) (*unstructured.Unstructured, []byte) {
	t.Helper()
	whole := memory.RealisticApplication("argocd", "team-a", "podinfo", "edge-042", 7)
	whole.SetAnnotations(map[string]string{argocd.AnnotationOwner: "team-a/podinfo", argocd.LastAppliedAnnotation: `{"big":"yes"}`, "team": "a"})
	whole.SetFinalizers([]string{"example.com/keep"})
	whole.SetResourceVersion("42")
	st := whole.Object["status"].(map[string]any)
	st["conditions"] = append(st["conditions"].([]any), map[string]any{"type": argocd.ConditionInvalid, "message": "not permitted", "lastTransitionTime": "2025-06-01T12:00:00Z"})
	op := st["operationState"].(map[string]any)
	op["phase"], op["message"] = argocd.OperationFailed, "one or more objects failed to apply"
	whole.Object["operation"] = map[string]any{"sync": map[string]any{"revision": "sha256:1"}}
	data, err := json.Marshal(whole.Object)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 20<<10 || len(data) > 80<<10 {
		t.Fatalf("fixture is %d bytes, want a realistic 20-80 KB", len(data))
	}
	return whole, data
}

// TestCachedApplicationKeepsWhatKokumiReads decodes an Application as Argo CD writes it the way
// Kokumi's cache does, and checks that everything internal/argocd and the server's pages read of
// it is kept, what nothing reads is not, and what is kept is small.
func TestCachedApplicationKeepsWhatKokumiReads(t *testing.T) {
	dec := decoder(t)
	whole, data := realistic(t)
	app := cache(t, dec, data)

	kept, err := json.Marshal(app)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Application: %d bytes as Argo CD writes it, %d bytes cached (%.1f%%)", len(data), len(kept), 100*float64(len(kept))/float64(len(data)))
	if len(kept) > 2<<10 {
		t.Errorf("cached Application is %d bytes as JSON, want under 2 KB: %s", len(kept), kept)
	}

	// The status Kokumi reads (sync, health, conditions, operationState) is as in the whole.
	want := statusOf(t, whole)
	if !reflect.DeepEqual(want, app.Status) {
		t.Errorf("status differs:\n whole  %+v\n cached %+v", want, app.Status)
	}
	if want.OperationState == nil || want.OperationState.Operation.Sync.Revision == "" || len(want.Conditions) != 2 || want.Health.LastTransitionTime == "" {
		t.Fatalf("fixture does not exercise operationState, conditions and health: %+v", want)
	}
	if msg, refused := app.Status.Refusal(); !refused || msg != "not permitted" {
		t.Errorf("Refusal: %q %v", msg, refused)
	}

	// Metadata and spec, which Kokumi compares, patches and owns by, are kept.
	spec := argocd.ApplicationSpec{Name: whole.GetName(), Namespace: "argocd", ServingNamespace: "team-a", ServingName: "podinfo", Cluster: "edge-042",
		Project: "fleet", RepoURL: "oci://kokumi-registry.kokumi-system.svc:5000/team-a/podinfo", Revision: "sha256:" + strings.Repeat("0", 63) + "8",
		Server: "https://edge-042.clusters.example:6443", TargetNamespace: "podinfo", Retry: argocd.DefaultSyncRetry}
	if !argocd.IsKokumis(app, "team-a", "podinfo") || !argocd.IsKokumis(whole, "team-a", "podinfo") {
		t.Error("the cached Application is not Kokumi's")
	}
	if !reflect.DeepEqual(whole.GetLabels(), app.Labels) || app.Annotations["team"] != "a" ||
		!reflect.DeepEqual(whole.GetFinalizers(), app.Finalizers) || app.Name != whole.GetName() || app.ResourceVersion != "42" {
		t.Error("metadata Kokumi reads changed")
	}
	if !spec.UpToDate(app) {
		t.Errorf("the Application Kokumi wrote is not up to date with its spec: %s", app.Spec.Source)
	}

	// What nothing reads is gone.
	if len(app.ManagedFields) != 0 {
		t.Error("managedFields kept")
	}
	if _, ok := app.Annotations[argocd.LastAppliedAnnotation]; ok {
		t.Error("last-applied annotation kept")
	}
	for _, gone := range []string{"resources", "history", "summary", "reconciledAt", "syncResult", "startedAt", "comparedTo", "managedFields"} {
		if strings.Contains(string(kept), `"`+gone+`"`) {
			t.Errorf("%s kept", gone)
		}
	}

	// Little heap each, held by a cache of many: 10 Servings × 100 clusters, each Application its
	// own (name, UID, resourceVersion, Serving, cluster, revision) as in a fleet.
	const servings, clusters = 10, 100
	docs := make([][]byte, 0, servings*clusters)
	for sv := range servings {
		for c := range clusters {
			u := memory.RealisticApplication("argocd", "team-a", fmt.Sprintf("app-%02d", sv), fmt.Sprintf("edge-%03d", c), sv)
			u.SetUID(types.UID(fmt.Sprintf("00000000-0000-0000-%04d-%012d", sv, c)))
			u.SetResourceVersion(fmt.Sprint(1000 + sv*clusters + c))
			data, err := json.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, data)
		}
	}
	held := make([]*argocd.Application, len(docs))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i, data := range docs {
		held[i] = cache(t, dec, data)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perApp := float64(after.HeapAlloc-before.HeapAlloc) / float64(len(held))
	t.Logf("heap per cached Application: %.0f bytes", perApp)
	if perApp > 3<<10 {
		t.Errorf("a cached Application takes %.0f bytes of heap, want under 3 KB", perApp)
	}
	runtime.KeepAlive(held)
	runtime.KeepAlive(docs)
}

// TestCachedApplicationDrift: a key someone adds inside a field Kokumi writes is drift, which
// Apply undoes with a merge patch that names only what Kokumi writes; the same JSON with its keys
// in another order and other spacing is not drift.
func TestCachedApplicationDrift(t *testing.T) {
	spec := argocd.ApplicationSpec{Name: "team-a.podinfo.edge-1", Namespace: "argocd", ServingNamespace: "team-a", ServingName: "podinfo",
		Cluster: "edge-1", Project: "fleet", RepoURL: "oci://registry.example/team-a/podinfo", Revision: "sha256:aa",
		Server: "https://edge-1.example:6443", TargetNamespace: "podinfo", Retry: argocd.DefaultSyncRetry}
	built := spec.Build()
	built.Object["status"] = map[string]any{"health": map[string]any{"status": "Healthy"}}
	data, err := json.Marshal(built.Object)
	if err != nil {
		t.Fatal(err)
	}
	app := cache(t, decoder(t), data)
	if !spec.UpToDate(app) {
		t.Fatal("the Application as built is not up to date")
	}

	app.Spec.Source = argocd.RawJSON(`{ "targetRevision": "sha256:aa",
		"repoURL": "oci://registry.example/team-a/podinfo", "path": "." }`)
	if !spec.UpToDate(app) {
		t.Error("the same source, its keys reordered, is drift")
	}

	app.Spec.Source = argocd.RawJSON(`{"path":".","repoURL":"oci://registry.example/team-a/podinfo","targetRevision":"sha256:aa","kustomize":{"images":["evil:latest"]}}`)
	if spec.UpToDate(app) {
		t.Fatal("source.kustomize.images added by someone is not drift")
	}
	changed := app.DeepCopy()
	spec.Apply(changed)
	if !spec.UpToDate(changed) {
		t.Fatal("Apply did not make the Application up to date")
	}
	patch, err := client.MergeFrom(app).Data(changed)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(patch), `{"spec":{"source":{"kustomize":null}}}`; got != want {
		t.Errorf("patch %s, want %s", got, want)
	}
	if app.Status.Health.Status != argocd.HealthHealthy || changed.Status.Health.Status != argocd.HealthHealthy {
		t.Error("the status was not kept")
	}
}
