package install

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kokumi-dev/kokumi/internal/dev/chart"
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
func packageChart(t testing.TB, appVersion string) []byte {
	const version = "1.2.3"
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
	return chart.Render(context.Background(), archive, "kokumi", "kokumi-system", values)
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

func key(o *unstructured.Unstructured) string { return chart.Key(o) }

func keys(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, key(o))
	}
	return out
}
