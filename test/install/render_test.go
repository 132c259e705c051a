package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kokumi-dev/kokumi/internal/chart"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// repoRoot is the repository's root directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// packageChart packages charts/kokumi as `make chart` does.
func packageChart(t testing.TB, version, appVersion string) []byte {
	t.Helper()
	archive, name, err := chart.Package(filepath.Join(repoRoot(t), "charts", "kokumi"), version, appVersion)
	if err != nil {
		t.Fatal(err)
	}
	if want := "kokumi-" + version + ".tgz"; name != want {
		t.Fatalf("chart archive is named %s, want %s", name, want)
	}
	return archive
}

// renderChart renders the chart archive as `helm template --namespace kokumi-system kokumi` does.
func renderChart(t testing.TB, archive []byte, values map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	out, err := render.Helm(context.Background(), archive, render.HelmOptions{ReleaseName: "kokumi", Namespace: "kokumi-system", Values: values, KubeVersion: "v1.37.0"})
	if err != nil {
		return nil, err
	}
	return decode(out)
}

// decode splits a YAML stream into objects, skipping empty documents.
func decode(stream []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode manifests: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// find returns the object of that kind, namespace and name, or nil.
func find(objs []*unstructured.Unstructured, kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

// key names an object as kind namespace/name.
func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

func keys(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, key(o))
	}
	return out
}
