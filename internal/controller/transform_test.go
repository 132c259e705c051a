package controller_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/test/memory"
)

func size(t *testing.T, u *unstructured.Unstructured) int {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// TestTransformApplicationKeepsWhatKokumiReads cuts down an Application as Argo CD writes it
// and checks that everything internal/argocd and the server's pages read of it is unchanged.
func TestTransformApplicationKeepsWhatKokumiReads(t *testing.T) {
	whole := memory.RealisticApplication("argocd", "team-a", "podinfo", "edge-042", 7)
	whole.SetAnnotations(map[string]string{argocd.AnnotationOwner: "team-a/podinfo", "kubectl.kubernetes.io/last-applied-configuration": `{"big":"yes"}`})
	whole.SetFinalizers([]string{"example.com/keep"})
	// A refusal, which Status.Refusal reads, and an operation that failed at a revision.
	st := whole.Object["status"].(map[string]any)
	st["conditions"] = append(st["conditions"].([]any), map[string]any{"type": argocd.ConditionInvalid, "message": "not permitted", "lastTransitionTime": "2025-06-01T12:00:00Z"})
	op := st["operationState"].(map[string]any)
	op["phase"], op["message"] = argocd.OperationFailed, "one or more objects failed to apply"
	whole.Object["operation"] = map[string]any{"sync": map[string]any{"revision": "sha256:1"}}
	before := size(t, whole)
	if before < 20<<10 || before > 80<<10 {
		t.Fatalf("fixture is %d bytes, want a realistic 20-80 KB", before)
	}
	if n := len(st["resources"].([]any)); n != memory.Resources {
		t.Fatalf("fixture has %d resources", n)
	}

	got := whole.DeepCopy()
	out, err := controller.TransformApplication(got)
	if err != nil {
		t.Fatal(err)
	}
	cut := out.(*unstructured.Unstructured)
	after := size(t, cut)
	t.Logf("Application: %d bytes as Argo CD writes it, %d bytes cached (%.1f%%)", before, after, 100*float64(after)/float64(before))
	if after > 2<<10 {
		t.Errorf("transformed Application is %d bytes, want under 2 KB", after)
	}

	// What ReadStatus reads (sync, health, conditions, operationState) is unchanged.
	want, err := argocd.ReadStatus(whole)
	if err != nil {
		t.Fatal(err)
	}
	have, err := argocd.ReadStatus(cut)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, have) {
		t.Errorf("ReadStatus differs:\n whole %+v\n cut   %+v", want, have)
	}
	if want.OperationState == nil || want.OperationState.Operation.Sync.Revision == "" || len(want.Conditions) != 2 {
		t.Fatalf("fixture does not exercise operationState and conditions: %+v", want)
	}
	for _, q := range []func(argocd.Status) any{
		func(s argocd.Status) any { m, ok := s.Refusal(); return []any{m, ok} },
		func(s argocd.Status) any { m, ok := s.Error(); return []any{m, ok} },
		func(s argocd.Status) any { return s.FirstCondition() },
		func(s argocd.Status) any { m, ok := s.SyncFailure(want.Sync.Revision); return []any{m, ok} },
		func(s argocd.Status) any { return s.HealthyAt(want.Sync.Revision) },
	} {
		if a, b := q(want), q(have); !reflect.DeepEqual(a, b) {
			t.Errorf("a Status query differs: whole %v, cut %v", a, b)
		}
	}
	// The server's pages read health.lastTransitionTime too.
	for _, path := range [][]string{{"status", "health", "lastTransitionTime"}, {"status", "health", "message"}, {"status", "sync", "revision"}} {
		a, _, _ := unstructured.NestedString(whole.Object, path...)
		b, _, _ := unstructured.NestedString(cut.Object, path...)
		if a == "" || a != b {
			t.Errorf("%v: whole %q, cut %q", path, a, b)
		}
	}

	// Metadata and spec, which Kokumi compares, patches and owns by, are kept.
	spec := argocd.ApplicationSpec{Name: whole.GetName(), Namespace: "argocd", ServingNamespace: "team-a", ServingName: "podinfo", Cluster: "edge-042"}
	if spec.UpToDate(whole) != spec.UpToDate(cut) || argocd.IsKokumis(whole, "team-a", "podinfo") != argocd.IsKokumis(cut, "team-a", "podinfo") {
		t.Error("UpToDate or IsKokumis differs")
	}
	if !argocd.IsKokumis(cut, "team-a", "podinfo") {
		t.Error("the cut Application is not Kokumi's")
	}
	if !reflect.DeepEqual(whole.Object["spec"], cut.Object["spec"]) {
		t.Error("spec changed")
	}
	if !reflect.DeepEqual(whole.GetLabels(), cut.GetLabels()) || cut.GetAnnotations()[argocd.AnnotationOwner] != "team-a/podinfo" ||
		!reflect.DeepEqual(whole.GetFinalizers(), cut.GetFinalizers()) || cut.GetName() != whole.GetName() || cut.GetResourceVersion() != whole.GetResourceVersion() {
		t.Error("metadata Kokumi reads changed")
	}

	// What nothing reads is gone.
	if len(cut.GetManagedFields()) != 0 {
		t.Error("managedFields kept")
	}
	if _, ok := cut.GetAnnotations()["kubectl.kubernetes.io/last-applied-configuration"]; ok {
		t.Error("last-applied annotation kept")
	}
	for _, path := range [][]string{{"status", "resources"}, {"status", "history"}, {"status", "summary"}, {"status", "reconciledAt"},
		{"status", "operationState", "syncResult"}, {"status", "operationState", "startedAt"}, {"status", "sync", "comparedTo"}, {"operation"}} {
		if _, ok, _ := unstructured.NestedFieldNoCopy(cut.Object, path...); ok {
			t.Errorf("%v kept", path)
		}
	}

	// An Application without status, and anything else, pass.
	bare := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}
	if _, err := controller.TransformApplication(bare); err != nil || bare.Object["status"] != nil {
		t.Errorf("bare Application: %v %v", err, bare.Object)
	}
	if o, err := controller.TransformApplication("tombstone"); err != nil || o != "tombstone" {
		t.Errorf("non-object: %v %v", o, err)
	}
}
