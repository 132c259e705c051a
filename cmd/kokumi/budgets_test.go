package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/config"
)

func parseConfig(t *testing.T, args ...string) (config.Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c config.Config
	bindConfigFlags(fs, &c)
	return c, fs.Parse(args)
}

func TestRenderBudgetFlags(t *testing.T) {
	c, err := parseConfig(t)
	if err != nil || c.RenderBudgets != config.DefaultRenderBudgets() {
		t.Fatalf("no flags: budgets %+v, %v; want the defaults", c.RenderBudgets, err)
	}
	c, err = parseConfig(t, "--render-max-pulled-bytes=1Gi", "--render-max-layers=8", "--render-max-uncompressed-bytes=300M",
		"--render-max-objects=50000", "--render-max-output-bytes=67108864", "--render-max-memory=1Gi", "--render-timeout=90s")
	if err != nil {
		t.Fatal(err)
	}
	want := config.RenderBudgets{PulledBytes: 1 << 30, Layers: 8, UncompressedBytes: 300_000_000, Objects: 50_000, OutputBytes: 64 << 20,
		Memory: 1 << 30, Timeout: 90 * time.Second}
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
	bindConfigFlags(fs, &config.Config{})
	fs.PrintDefaults()
	for _, want := range []string{"render-max-pulled-bytes size", "(default 100Mi)", "(default 128Mi)", "(default 32Mi)", "(default 10000)", "(default 512Mi)", "render-timeout duration"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, usage.String())
		}
	}
}

func TestConcurrencyFlagsSetEachReconcilersWorkers(t *testing.T) {
	c, err := parseConfig(t)
	if err != nil {
		t.Fatal(err)
	}
	for kind, want := range config.DefaultConcurrency {
		if got := c.Workers(kind); got != want {
			t.Errorf("no flags: %s runs %d at a time, want the default %d", kind, got, want)
		}
	}
	c, err = parseConfig(t, "--order-concurrency=6", "--serving-concurrency=12", "--cluster-concurrency=3", "--environment-concurrency=2")
	if err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[string]int{config.OrderConcurrency: 6, config.ServingConcurrency: 12, config.ClusterConcurrency: 3, config.EnvironmentConcurrency: 2} {
		if got := c.Workers(kind); got != want {
			t.Errorf("%s runs %d at a time, want %d", kind, got, want)
		}
	}
	for _, bad := range []string{"--order-concurrency=0", "--serving-concurrency=many", "--cluster-concurrency=-1"} {
		if _, err := parseConfig(t, bad); err == nil || !strings.Contains(err.Error(), strings.SplitN(strings.TrimPrefix(bad, "--"), "=", 2)[0]) {
			t.Errorf("%s: %v, want an error naming the flag", bad, err)
		}
	}
}
