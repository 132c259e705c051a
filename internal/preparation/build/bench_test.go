package build_test

import (
	"context"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// BenchmarkPrepare measures what an Order costs end to end for the podinfo-like chart: pull
// from a loopback registry, render with the Helm SDK, pin two image tags, pack and push.
func BenchmarkPrepare(b *testing.B) {
	f := newFixture(b)
	bld := builder()
	ctx := context.Background()
	in := f.input()
	repo := ocitest.Repo(f.reg, "kokumi/bench/podinfo")
	b.ReportAllocs()
	for b.Loop() {
		built, err := bld.Build(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bld.Push(ctx, repo, in, built, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHelmRenderOnly measures the Helm SDK's render of the same chart and values alone,
// the floor BenchmarkPrepare stands on.
func BenchmarkHelmRenderOnly(b *testing.B) {
	f := newFixture(b)
	chart := ocitest.PodinfoChart(b)
	in := f.input()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := render.Helm(ctx, chart, render.HelmOptions{
			ReleaseName: in.Render.ReleaseName, Namespace: in.Render.TargetNamespace, Values: in.Render.Values,
		}); err != nil {
			b.Fatal(err)
		}
	}
}
