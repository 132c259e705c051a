package install

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/registry"

	"github.com/kokumi-dev/kokumi/internal/dev/chart"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// `make chart CHART_REPO=oci://…` pushes the chart as Helm's OCI artifact; Helm pulls it back.
func TestChartIsPushedAsAnOCIArtifactHelmPulls(t *testing.T) {
	reg := ocitest.StartWithAuth(t, "ci", "secret")
	archive := packageChart(t, "v1.2.3")
	created := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	ref, digest, err := chart.Push(archive, "oci://"+reg.Addr+"/charts", chart.PushOptions{PlainHTTP: true, Username: "ci", Password: "secret", Created: created})
	if err != nil {
		t.Fatal(err)
	}
	if want := reg.Addr + "/charts/kokumi:1.2.3"; ref != want || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("pushed %s@%s, want %s@sha256:…", ref, digest, want)
	}

	if _, _, err := chart.Push(archive, "oci://"+reg.Addr+"/charts", chart.PushOptions{PlainHTTP: true, Username: "ci", Password: "wrong"}); err == nil {
		t.Error("a push with a wrong password succeeded")
	}

	client, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptBasicAuth("ci", "secret"))
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := client.Pull(ref)
	if err != nil {
		t.Fatal(err)
	}
	if pulled.Manifest.Digest != digest {
		t.Errorf("pulled manifest %s, pushed %s", pulled.Manifest.Digest, digest)
	}
	if !bytes.Equal(pulled.Chart.Data, archive) {
		t.Error("the pulled chart archive differs from the pushed one")
	}
	c, err := loader.LoadArchive(bytes.NewReader(pulled.Chart.Data))
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.Version != "1.2.3" || c.Metadata.AppVersion != "v1.2.3" {
		t.Errorf("pulled chart %s appVersion %s, want 1.2.3 and v1.2.3", c.Metadata.Version, c.Metadata.AppVersion)
	}
	if objs, err := renderChart(t, pulled.Chart.Data, nil); err != nil || find(objs, "Deployment", "kokumi-system", "kokumi-controller") == nil {
		t.Errorf("the pulled chart does not render the controller: %v", err)
	}
}
