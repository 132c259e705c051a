package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/preparation"
)

func parseConfig(t *testing.T, args ...string) (controller.Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c controller.Config
	bindConfigFlags(fs, &c)
	return c, fs.Parse(args)
}

func TestRenderBudgetFlags(t *testing.T) {
	c, err := parseConfig(t)
	if err != nil || c.RenderBudgets != preparation.DefaultBudgets() {
		t.Fatalf("no flags: budgets %+v, %v; want the defaults", c.RenderBudgets, err)
	}
	c, err = parseConfig(t, "--render-max-pulled-bytes=1Gi", "--render-max-layers=8", "--render-max-uncompressed-bytes=300M",
		"--render-max-objects=50000", "--render-max-output-bytes=67108864")
	if err != nil {
		t.Fatal(err)
	}
	want := preparation.Budgets{PulledBytes: 1 << 30, Layers: 8, UncompressedBytes: 300_000_000, Objects: 50_000, OutputBytes: 64 << 20}
	if c.RenderBudgets != want {
		t.Errorf("budgets %+v, want %+v", c.RenderBudgets, want)
	}
	for _, bad := range []string{"--render-max-pulled-bytes=lots", "--render-max-output-bytes=0", "--render-max-uncompressed-bytes=-1Mi", "--render-max-pulled-bytes=1.5"} {
		if _, err := parseConfig(t, bad); err == nil || !strings.Contains(err.Error(), strings.SplitN(strings.TrimPrefix(bad, "--"), "=", 2)[0]) {
			t.Errorf("%s: %v, want an error naming the flag", bad, err)
		}
	}
	var usage strings.Builder
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(&usage)
	bindConfigFlags(fs, &controller.Config{})
	fs.PrintDefaults()
	for _, want := range []string{"render-max-pulled-bytes size", "(default 100Mi)", "(default 128Mi)", "(default 32Mi)", "(default 10000)"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, usage.String())
		}
	}
}
