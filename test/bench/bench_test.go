//go:build bench

// Package bench is the short CI version of `make bench` (hack/bench): one run of
// internal/dev/bench for 1,000 member clusters, without the ApplicationSet controller and the quiet
// minute, failing when Kokumi's Serving → N takes more than maxRatio times the bare client's
// time to create the same Applications. It is built with the tag bench only, so that it runs
// alone (go test -tags bench ./test/bench) and not beside the other packages of go test ./...,
// whose load would skew the ratio.
package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/dev/bench"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/test/harness"
)

const (
	// clusters is the fleet's size.
	clusters = 1000
	// maxRatio is how many times the bare client's time Kokumi's fan-out may take.
	maxRatio = 3
)

func TestFanOutWithinThreeTimesTheBareClient(t *testing.T) {
	harness.QuietLogs()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	assets, err := sandbox.FindAssets()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := bench.BuildKokumi(ctx, assets.Root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	row, err := bench.Run(ctx, bench.Options{
		N: clusters, KokumiBinary: bin, Timeout: 3 * time.Minute, Log: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s%s\n%s%s", bench.Header, row.Markdown(), bench.RatioHeader, row.RatioMarkdown())
	if got := row.ServingRatio(); got > maxRatio {
		t.Errorf("Kokumi's Serving → %d Applications took %s, %.2f× the bare client's %s: more than %d×",
			clusters, row.Serving.Round(time.Millisecond), got, row.Bare.Round(time.Millisecond), maxRatio)
	}
}

// testWriter logs each write as a line of the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
