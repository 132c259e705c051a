// Command benchrender measures how fast Kokumi renders when many Orders change together: for
// each N of -n, N Orders over 100 namespaces (one Product each, the podinfo-like chart) are
// created, then the Products move to the chart's next version, each pass timed until every
// Order has a Ready Preparation at its version; in the same run a bare pipeline does the second
// pass's work without Kokumi. It prints a Markdown table. `make bench-render` runs it; see
// docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kokumi-dev/kokumi/internal/dev/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchrender:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		ns         = flag.String("n", "100,1000", "comma-separated numbers of Orders, one run each")
		namespaces = flag.Int("namespaces", 100, "how many namespaces the Orders are spread over, one Product each")
		workers    = flag.Int("bare-workers", 2, "how many Orders the bare pipeline works on at a time (the controller's --render-workers)")
		out        = flag.String("out", "", "also write the table to this file")
		timeout    = flag.Duration("timeout", 10*time.Minute, "the longest each wait may take")
		keep       = flag.Bool("keep", false, "keep each run's work directory (logs)")
		profile    = flag.String("profile", "", "write 15 s CPU profiles of the API server, of the controller and of this process (its registry and watch), taken at the change pass's start, into this directory (apiserver-N.pprof, controller-N.pprof, bench-N.pprof)")
		kokumi     = flag.String("kokumi", "", "the kokumi binary to run (default: go build ./cmd/kokumi)")
		maxRatio   = flag.Float64("max-ratio", 0, "fail when Kokumi's change pass takes more than this times the bare pipeline's (0: never)")
		extra      bench.ListFlag
	)
	flag.Var(&extra, "controller-arg", "one more flag of `kokumi controller`, such as --controller-arg=--render-workers=4 (repeatable)")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	sizes, err := bench.Sizes("n", *ns)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bin, cleanup, err := bench.KokumiBinary(ctx, *kokumi)
	if err != nil {
		return err
	}
	defer cleanup()
	began := time.Now()
	var (
		table  strings.Builder
		failed []string
		rows   []*bench.RenderRow
	)
	table.WriteString(bench.RenderHeader)
	var details strings.Builder
	for _, n := range sizes {
		row, err := bench.RunRender(ctx, bench.RenderOptions{
			N: n, Namespaces: *namespaces, KokumiBinary: bin, ControllerArgs: extra, BareWorkers: *workers,
			Timeout: *timeout, KeepWorkDir: *keep, Log: os.Stderr, ProfileDir: *profile,
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "N = %d failed: %v\n", n, err)
			failed = append(failed, fmt.Sprintf("N = %d: %v", n, err))
			if row == nil {
				continue
			}
			row.Notes = append(row.Notes, "the run failed: "+err.Error())
		}
		rows = append(rows, row)
		table.WriteString(row.Markdown())
		details.WriteString("\n" + row.Details())
		fmt.Fprint(os.Stderr, "\n"+bench.RenderHeader+row.Markdown()+"\n"+row.Details())
		if ctx.Err() != nil {
			break
		}
	}
	text := table.String() + details.String()
	fmt.Printf("\n%s\n(%d runs in %s)\n", text, len(rows), time.Since(began).Round(time.Second))
	if *out != "" {
		if err := os.WriteFile(*out, []byte(text), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *out, err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d runs failed: %s", len(failed), len(sizes), strings.Join(failed, "; "))
	}
	if *maxRatio > 0 {
		for _, r := range rows {
			if got := r.Ratio(); got > *maxRatio {
				return fmt.Errorf("at N = %d, Kokumi's change pass took %.2f× the bare pipeline's, more than %.2f×", r.N, got, *maxRatio)
			}
		}
	}
	return nil
}
