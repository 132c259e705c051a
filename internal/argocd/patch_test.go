package argocd

import (
	"encoding/json"
	"reflect"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MergePatch writes, for every change Kokumi makes to an Application, a patch that does what
// controller-runtime's MergeFrom with the optimistic lock does: the same document once decoded.
func TestMergePatchIsMergeFromsPatch(t *testing.T) {
	base := func() *Application {
		app := &Application{}
		app.Name, app.Namespace, app.ResourceVersion = "team-web-edge-1", "argocd", "4711"
		app.Labels = map[string]string{LabelManagedBy: ManagedByKokumi}
		app.Annotations = map[string]string{"kokumi.dev/owner": "team/web"}
		app.Spec = ApplicationFields{
			Project:     `"kokumi"`,
			Source:      `{"chart":"web","repoURL":"registry:5000/team/web","targetRevision":"sha256:aaa","helm":{"valuesObject":{"a":1}}}`,
			Destination: `{"name":"edge-1","namespace":"web"}`,
			SyncPolicy:  `{"automated":{"prune":true,"selfHeal":true}}`,
		}
		app.Status.Sync.Status = SyncSynced
		return app
	}
	for name, change := range map[string]func(*Application){
		"a new digest": func(a *Application) {
			a.Spec.Source = `{"chart":"web","repoURL":"registry:5000/team/web","targetRevision":"sha256:bbb","helm":{"valuesObject":{"a":1}}}`
		},
		"a key gone from the source": func(a *Application) {
			a.Spec.Source = `{"chart":"web","repoURL":"registry:5000/team/web","targetRevision":"sha256:aaa"}`
		},
		"another project":               func(a *Application) { a.Spec.Project = `"other"` },
		"no sync policy":                func(a *Application) { a.Spec.SyncPolicy = "" },
		"every field":                   func(a *Application) { a.Spec.Destination, a.Spec.SyncPolicy = `{"name":"edge-2"}`, `{"automated":{}}` },
		"nothing":                       func(*Application) {},
		"the same JSON reordered":       func(a *Application) { a.Spec.Destination = `{"namespace":"web","name":"edge-1"}` },
		"a label (MergeFrom)":           func(a *Application) { a.Labels = map[string]string{LabelManagedBy: ManagedByKokumi, "x": "y"} },
		"a finalizer gone (MergeFrom)":  func(a *Application) { a.Finalizers = nil },
		"other spec fields (MergeFrom)": func(a *Application) { a.Spec.Others = map[string]RawJSON{"sources": `[]`} },
	} {
		t.Run(name, func(t *testing.T) {
			before := base()
			if name == "a finalizer gone (MergeFrom)" {
				before.Finalizers = []string{ResourcesFinalizer}
			}
			after := before.DeepCopy()
			change(after)
			got, err := MergePatch(before, after)
			if err != nil {
				t.Fatal(err)
			}
			want, err := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}).Data(after)
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("the patch %s is not JSON: %v", got, err)
			}
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("MergePatch wrote\n%s\nMergeFrom writes\n%s", got, want)
			}
		})
	}
}

// BenchmarkMergePatch is the patch of one Application moved to a new digest.
func BenchmarkMergePatch(b *testing.B) {
	before := &Application{}
	before.Name, before.Namespace, before.ResourceVersion = "team-web-edge-1", "argocd", "4711"
	before.Labels = map[string]string{LabelManagedBy: ManagedByKokumi}
	before.Spec = ApplicationFields{Project: `"kokumi"`, Source: `{"chart":"web","targetRevision":"sha256:aaa"}`}
	after := before.DeepCopy()
	after.Spec.Source = `{"chart":"web","targetRevision":"sha256:bbb"}`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MergePatch(before, after); err != nil {
			b.Fatal(err)
		}
	}
}
