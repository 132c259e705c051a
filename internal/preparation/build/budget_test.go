package build_test

import (
	"archive/tar"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/manifests"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/images"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/preparation/build"
	"github.com/kokumi-dev/kokumi/internal/render"
)

func TestZeroBudgetsAreTheDefaults(t *testing.T) {
	d := config.DefaultRenderBudgets()
	if d.PulledBytes != 100<<20 || d.Layers != 256 || d.UncompressedBytes != 128<<20 || d.Objects != 10_000 || d.OutputBytes != 32<<20 {
		t.Errorf("defaults %+v", d)
	}
	if got := (config.RenderBudgets{}).WithDefaults(); got != d {
		t.Errorf("zero budgets %+v, want the defaults %+v", got, d)
	}
	if got := (config.RenderBudgets{Objects: 5, PulledBytes: -1}).WithDefaults(); got.Objects != 5 || got.PulledBytes != d.PulledBytes || got.OutputBytes != d.OutputBytes {
		t.Errorf("partial budgets %+v", got)
	}
}

func TestEachBudgetFailsTheBuildNamingItsLimitAndFlag(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tarGz := func(files map[string]string) []byte {
		entries := map[string][]byte{}
		for k, v := range files {
			entries[k] = []byte(v)
		}
		l, err := oci.TarGz(entries)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	manyURL := "oci://" + ocitest.Repo(f.reg, "charts/many")
	ocitest.PushChart(t, oci.TrimScheme(manyURL), "1.0.0", "many", "1.0.0", ocitest.ManyObjectsChart(t))
	layersURL := "oci://" + ocitest.Repo(f.reg, "bundles/layers")
	ocitest.PushLayers(t, oci.TrimScheme(layersURL), "v1", oci.MediaTypeLayerTarGzip,
		tarGz(map[string]string{"a.yaml": "{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}"}),
		tarGz(map[string]string{"b.yaml": "{apiVersion: v1, kind: ConfigMap, metadata: {name: b}}"}),
		tarGz(map[string]string{"c.yaml": "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}"}))
	bombURL := "oci://" + ocitest.Repo(f.reg, "bundles/bomb")
	ocitest.PushLayers(t, oci.TrimScheme(bombURL), "v1", oci.MediaTypeLayerTarGzip, ocitest.ZipBomb(t, 1<<30, tar.TypeReg))
	// Written in flow style, the bundle's file is shorter than the manifests Kokumi writes.
	compact := "{apiVersion: v1, kind: ConfigMap, metadata: {name: compact}, data: {a: b, c: d, e: f}}"
	compactURL := "oci://" + ocitest.Repo(f.reg, "bundles/compact")
	ocitest.PushBundle(t, oci.TrimScheme(compactURL), "v1", map[string]string{"cm.yaml": compact})

	for _, c := range []struct {
		name    string
		budgets config.RenderBudgets
		in      build.Input
		limit   string
		flag    string
		says    []string
	}{
		{"pulled bytes", config.RenderBudgets{PulledBytes: 1024}, f.input(), oci.LimitPulledBytes, "render-max-pulled-bytes",
			[]string{f.chartURL + ":6.14.1", "pulled bytes, over the limit of 1Ki", "push a smaller chart"}},
		{"layers", config.RenderBudgets{Layers: 2}, build.Input{SourceURL: layersURL, Version: "v1"}, oci.LimitLayers, "render-max-layers",
			[]string{"3 layers, over the limit of 2", "fewer layers"}},
		// Zero budgets are the defaults: the bomb of 1 GiB stops at 128 MiB.
		{"uncompressed bytes", config.RenderBudgets{}, build.Input{SourceURL: bombURL, Version: "v1"}, oci.LimitUncompressedBytes, "render-max-uncompressed-bytes",
			[]string{bombURL + "@sha256:", "over the limit of 128Mi"}},
		{"objects", config.RenderBudgets{Objects: 100}, build.Input{SourceURL: manyURL, Version: "1.0.0", Render: render.Options{
			ReleaseName: "many", TargetNamespace: "many", Values: map[string]any{"count": 101}}}, manifests.LimitObjects, "render-max-objects",
			[]string{"more than the limit of 100 objects", "render fewer objects"}},
		{"output bytes of the artifact", config.RenderBudgets{OutputBytes: int64(len("\n---\n" + compact))}, build.Input{SourceURL: compactURL, Version: "v1",
			Render: render.Options{TargetNamespace: "x"}}, render.LimitOutputBytes, "render-max-output-bytes",
			[]string{"output bytes, over the limit of"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &build.Builder{Sources: &oci.Client{}, Images: &images.Resolver{}, Budgets: c.budgets}
			_, err := b.Build(ctx, c.in)
			if got := reason(t, err); got != build.ReasonBudgetExceeded {
				t.Fatalf("reason %s, want %s: %v", got, build.ReasonBudgetExceeded, err)
			}
			t.Log(err)
			var le *oci.LimitError
			if !errors.As(err, &le) || le.Limit != c.limit {
				t.Fatalf("error %v does not hold the limit %q", err, c.limit)
			}
			for _, want := range append(c.says, "render budget of "+c.limit, "raise the controller's --"+c.flag) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q does not say %q", err, want)
				}
			}
		})
	}

	t.Run("within every budget", func(t *testing.T) {
		in := build.Input{SourceURL: compactURL, Version: "v1", Render: render.Options{TargetNamespace: "x"}}
		built, err := builder().Build(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		// The case above is the artifact's own check: the bundle's YAML fits, the manifests do not.
		if len(built.Manifests) <= len("\n---\n"+compact) {
			t.Fatalf("the manifests (%d bytes) are not longer than the bundle's YAML (%d)", len(built.Manifests), len("\n---\n"+compact))
		}
		in = build.Input{SourceURL: manyURL, Version: "1.0.0", Render: render.Options{
			ReleaseName: "many", TargetNamespace: "many", Values: map[string]any{"count": 100}}}
		b := &build.Builder{Sources: &oci.Client{}, Images: &images.Resolver{}, Budgets: config.RenderBudgets{Objects: 100}}
		if built, err := b.Build(ctx, in); err != nil || built.Objects != 100 {
			t.Fatalf("100 objects within 100: %v", err)
		}
	})
}
