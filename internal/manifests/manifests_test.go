package manifests

import (
	"testing"
)

func TestSetNamespaceLeavesClusterScopedKindsAndCRDScopesAlone(t *testing.T) {
	objs, err := Parse([]byte(`
# a comment only
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: globals.example.com}
spec: {group: example.com, scope: Cluster, names: {kind: Global}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: locals.example.com}
spec: {group: example.com, scope: Namespaced, names: {kind: Local}}
---
apiVersion: example.com/v1
kind: Global
metadata: {name: g}
---
apiVersion: example.com/v1
kind: Local
metadata: {name: l}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: in-list}
- apiVersion: v1
  kind: Secret
  metadata: {name: elsewhere, namespace: other}
`))
	if err != nil {
		t.Fatal(err)
	}
	SetNamespace(objs, "target")
	want := map[string]string{
		"globals.example.com": "", "locals.example.com": "", "g": "", "l": "target", "r": "", "in-list": "target", "elsewhere": "other",
	}
	if len(objs) != len(want) {
		t.Fatalf("parsed %d objects, want %d", len(objs), len(want))
	}
	for _, o := range objs {
		if got := o.GetNamespace(); got != want[o.GetName()] {
			t.Errorf("%s %s: namespace %q, want %q", o.GetKind(), o.GetName(), got, want[o.GetName()])
		}
	}
}

func TestParseRefusesADocumentWithoutKind(t *testing.T) {
	if _, err := Parse([]byte("metadata: {name: x}\n")); err == nil {
		t.Error("a document without apiVersion and kind parsed")
	}
}
