// Command bench brings up a hub (kube-apiserver and etcd with Argo CD's CRDs), N fake member
// clusters, the built `kokumi controller` and its peers (a bare client and Argo CD's
// ApplicationSet controller), for each N of -n, and prints a Markdown table of what Kokumi
// takes to fan out, and its ratios to the bare client. `make bench` runs it. With --memory it
// measures instead the controller's start and memory over --memory-servings Servings of
// --memory-clusters clusters each, their Applications put straight into etcd (`make
// bench-memory`). With --rollout it also times, at each of its sizes, a Serving's promotion
// through a two-wave roll-out policy against the same promotion all at once. See
// docs/performance.md. With --stall it times instead a tenant's promotion while other tenants'
// HTTP gates hang (`make bench-stall`). With --fleet it also times the fleet view's API (fleet.go).
package main

import (
	"context"
	"errors"
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
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		ns        = flag.String("n", "100,1000,10000", "comma-separated numbers of member clusters, one run each")
		out       = flag.String("out", "", "also write the table to this file")
		writers   = flag.Int("application-writers", 0, "the controller's --application-writers (0: its default)")
		probe     = flag.Duration("probe-period", 0, "the controller's --probe-period (0: its default)")
		beside    = flag.Bool("bare-beside", true, "run the bare client's writes once the controller probed the N Clusters Ready and idles, into a namespace it does not watch (the API server holding the Clusters, the members answering probes, as in Kokumi's phases); false: before the controller starts")
		informer  = flag.Bool("bare-informer", true, "give the bare client an informer of its own (a controller-runtime informer as its identity, in a process of its own: hack/bench/informer) for the length of its phases, so that the API server sends each of its writes to two watchers as it sends Kokumi's (the controller's informer and the benchmark's observer); false: the observer alone")
		asCtrl    = flag.Bool("bare-as-controller", true, "run the bare client as the controller's ServiceAccount into Argo CD's namespace (its authentication, authorization and API priority), as Kokumi writes; false: as an admin into a namespace of its own")
		appSet    = flag.Bool("applicationset", true, "measure Argo CD's ApplicationSet controller too (bin/fleet/argocd, make fleet-assets)")
		updates   = flag.Int("applicationset-updates", 16, "the ApplicationSet controller's --concurrent-application-updates (Argo CD's default is 1)")
		quiet     = flag.Duration("quiet", time.Minute, "how long the controller's writes are counted once everything settled (0 skips)")
		argoCD    = flag.Bool("argocd-status", true, "write Synced and Healthy into every Application before the quiet window, as Argo CD would")
		health    = flag.Int("health-changes", 20, "with --argocd-status, how many times one Application is reported Degraded and Healthy again, each timed until the Serving's status counts it")
		timeout   = flag.Duration("timeout", 10*time.Minute, "the longest each wait may take")
		keep      = flag.Bool("keep", false, "keep each run's work directory (logs, audit log)")
		kokumi    = flag.String("kokumi", "", "the kokumi binary to run (default: go build ./cmd/kokumi)")
		extra     bench.ListFlag
		maxRatio  = flag.Float64("max-ratio", 0, "fail when Kokumi's Serving → N, change → N or Order deleted → 0 over the bare client's same writes exceeds this (0: never)")
		memory    = flag.Bool("memory", false, "measure the controller's start and memory with --memory-servings × --memory-clusters Applications put into etcd, instead of the fan-out (-n is not used)")
		servings  = flag.Int("memory-servings", 100, "with --memory, how many Servings")
		clusters  = flag.Int("memory-clusters", 1000, "with --memory, how many clusters every Serving deploys to")
		memLimit  = flag.String("gomemlimit", "", "the controller's GOMEMLIMIT, such as 900MiB, the Helm chart's (default: none for the fan-out, 900MiB with --memory)")
		rollouts  = flag.String("rollout", "", "comma-separated numbers of member clusters to time a two-wave roll-out at, against all at once, one run each (empty: none)")
		soak      = flag.Duration("rollout-soak", 5*time.Second, "with --rollout, the canary wave's soak")
		delay     = flag.Duration("rollout-health-delay", 100*time.Millisecond, "with --rollout, how long after Kokumi points an Application at a revision it is reported Synced and Healthy there")
		stall     = flag.Int("stall", 0, "measure instead a tenant's promotion to this many clusters with no other Serving, then while --stall-gated Servings of other tenants verify against an endpoint that holds each request --stall-hang (-n is not used); pass --controller-arg=--verify-allowed-cidrs=127.0.0.1/32 so that the controller reaches it")
		gated     = flag.Int("stall-gated", 8, "with --stall, how many gated Servings")
		hang      = flag.Duration("stall-hang", time.Minute, "with --stall, how long the gated Servings' endpoint holds each request (and their checks' timeout, at most 60s)")
		stallHold = flag.Int("stall-hanging", 0, "with --stall, how many checks must hang before the gated promotion is timed (0: --stall-gated; 4 for a controller that runs checks in its Serving workers)")
		stallMax  = flag.Float64("stall-max-ratio", 0, "with --stall, fail when the gated promotion takes more than this many times the ungated one (0: never)")
		profile   = flag.String("profile-dir", "", "write CPU profiles of the controller over Serving → N, change → N and Order deleted → 0 (5 s each, controller-<phase>-<N>-<i>.pprof) and its heap after the quiet window into this directory")
		bareClus  = flag.Bool("bare-clusters", true, "time the bare client onboarding and offboarding the N Clusters too")
		memLive   = flag.Bool("memory-live", false, "with --memory, start the controller before the Applications are put into etcd and create the Servings once it holds them all (no cold start's first list)")
	)
	flag.Var(&extra, "controller-arg", "one more flag of `kokumi controller`, such as --controller-arg=--foo=1 (repeatable)")
	flag.Parse()
	// The library's clients log through controller-runtime: errors only.
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	var sizes, rolloutSizes []int
	if *ns != "" {
		var err error
		if sizes, err = bench.Sizes("n", *ns); err != nil {
			return err
		}
	}
	if *rollouts != "" {
		var err error
		if rolloutSizes, err = bench.Sizes("rollout", *rollouts); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	bin, cleanup, err := bench.KokumiBinary(ctx, *kokumi)
	if err != nil {
		return err
	}
	defer cleanup()
	began := time.Now()
	if *memory {
		row, err := bench.RunMemory(ctx, bench.MemoryOptions{Options: bench.Options{
			N: *clusters, KokumiBinary: bin, ControllerArgs: extra, Timeout: *timeout, KeepWorkDir: *keep, Log: os.Stderr,
			GoMemLimit: *memLimit,
		}, Servings: *servings, Live: *memLive})
		if row == nil {
			return err
		}
		if err != nil {
			row.Notes = append(row.Notes, "the run failed: "+err.Error())
		}
		table := bench.MemoryHeader + row.Markdown()
		if d := row.Details(); d != "" {
			table += "\n" + d
		}
		fmt.Printf("\n%s\n(in %s)\n", table, time.Since(began).Round(time.Second))
		if *out != "" {
			if werr := os.WriteFile(*out, []byte(table), 0o644); werr != nil {
				return fmt.Errorf("write %s: %w", *out, werr)
			}
		}
		return err
	}
	if *stall > 0 {
		row, err := bench.RunStall(ctx, bench.StallOptions{Options: bench.Options{
			N: *stall, KokumiBinary: bin, ControllerArgs: extra, Timeout: *timeout, KeepWorkDir: *keep, Log: os.Stderr,
		}, Gated: *gated, Hang: *hang, Hanging: *stallHold, HealthDelay: *delay})
		if row == nil {
			return err
		}
		table := bench.StallTable([]bench.StallRow{*row})
		fmt.Printf("\n%s\n(in %s)\n", table, time.Since(began).Round(time.Second))
		if *out != "" {
			if werr := os.WriteFile(*out, []byte(table), 0o644); werr != nil {
				return fmt.Errorf("write %s: %w", *out, werr)
			}
		}
		if err == nil && *stallMax > 0 && row.Ratio() > *stallMax {
			err = fmt.Errorf("the promotion took %.2f× as long with %d gated Servings hanging, more than %.2f×", row.Ratio(), *gated, *stallMax)
		}
		return err
	}
	var (
		rows   []bench.Row
		failed []string
	)
	for _, n := range sizes {
		row, err := bench.Run(ctx, bench.Options{
			N: n, KokumiBinary: bin, ApplicationWriters: *writers, ProbePeriod: *probe, ControllerArgs: extra, GoMemLimit: *memLimit,
			AppSet: *appSet, AppSetUpdates: *updates, Quiet: *quiet, ArgoCDStatus: *argoCD, HealthChanges: *health, BareAsController: *asCtrl, BareBeside: *beside, BareInformer: *informer,
			ProfileDir: *profile, SkipBareClusters: !*bareClus, Timeout: *timeout, KeepWorkDir: *keep, Log: os.Stderr,
		})
		if err != nil {
			// What was measured is printed all the same; the command fails at the end.
			fmt.Fprintf(os.Stderr, "N = %d failed: %v\n", n, err)
			failed = append(failed, fmt.Sprintf("N = %d: %v", n, err))
			if row == nil {
				row = &bench.Row{N: n, QuietWrites: -1}
			}
			row.Notes = append(row.Notes, "the run failed: "+err.Error())
		}
		rows = append(rows, *row)
		fmt.Fprint(os.Stderr, "\n"+bench.Header+row.Markdown()+"\n"+bench.CPUHeader+row.CPUMarkdown()+"\n")
		if ctx.Err() != nil {
			break
		}
	}
	var rolloutRows []bench.RolloutRow
	for _, n := range rolloutSizes {
		if ctx.Err() != nil {
			break
		}
		row, err := bench.RunRollout(ctx, bench.RolloutOptions{Options: bench.Options{
			N: n, KokumiBinary: bin, ApplicationWriters: *writers, ProbePeriod: *probe, ControllerArgs: extra, GoMemLimit: *memLimit,
			Timeout: *timeout, KeepWorkDir: *keep, Log: os.Stderr,
		}, Soak: *soak, HealthDelay: *delay})
		if err != nil {
			fmt.Fprintf(os.Stderr, "roll-out at N = %d failed: %v\n", n, err)
			failed = append(failed, fmt.Sprintf("roll-out at N = %d: %v", n, err))
			if row == nil {
				row = &bench.RolloutRow{N: n}
			}
			row.Notes = append(row.Notes, "the run failed: "+err.Error())
		}
		rolloutRows = append(rolloutRows, *row)
		fmt.Fprint(os.Stderr, "\n"+bench.RolloutHeader+row.Markdown()+"\n")
	}
	var table string
	if len(rows) > 0 {
		table = bench.Table(rows)
	}
	if len(rolloutRows) > 0 {
		if table != "" {
			table += "\n"
		}
		table += bench.RolloutTable(rolloutRows)
	}
	if fleet, err := fleetTable(ctx, bin, *timeout, *keep); fleet != "" || err != nil {
		table += "\n" + fleet
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	fmt.Printf("\n%s\n(%d runs in %s)\n", table, len(rows)+len(rolloutRows), time.Since(began).Round(time.Second))
	if *out != "" {
		if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *out, err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d runs failed: %s", len(failed), len(sizes)+len(rolloutSizes), strings.Join(failed, "; "))
	}
	if *maxRatio > 0 {
		var over []string
		for _, r := range rows {
			over = append(over, r.Over(*maxRatio)...)
		}
		if len(over) > 0 {
			return errors.New(strings.Join(over, "; "))
		}
	}
	return nil
}
