package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kokumi-dev/kokumi/internal/dev/bench"
)

// The fleet view's row: with --fleet N, the bench also measures the fleet view's API
// (GET …/environments/{name}/fleet) of `kokumi server` over N clusters, --fleet-orders Orders
// each with an Application on every cluster, and counts the server's writes (docs/performance.md).
var (
	fleetClusters = flag.Int("fleet", 0, "also measure the fleet view's API at this many clusters, each running an Application of every --fleet-orders Order (0: not)")
	fleetOrders   = flag.Int("fleet-orders", 1, "with --fleet, how many Orders deploy to every cluster")
)

// fleetTable measures the fleet view when --fleet asks for it, and returns its table ("" when it
// does not) and why the run failed.
func fleetTable(ctx context.Context, bin string, timeout time.Duration, keep bool) (string, error) {
	if *fleetClusters <= 0 || ctx.Err() != nil {
		return "", nil
	}
	row, err := bench.RunFleetView(ctx, bench.FleetViewOptions{Options: bench.Options{
		N: *fleetClusters, KokumiBinary: bin, Timeout: timeout, KeepWorkDir: keep, Log: os.Stderr,
	}, Orders: *fleetOrders})
	if row == nil {
		return "", err
	}
	if err != nil {
		row.Notes = append(row.Notes, "the run failed: "+err.Error())
		err = fmt.Errorf("fleet view at N = %d: %w", *fleetClusters, err)
	}
	table := bench.FleetViewHeader + row.Markdown()
	fmt.Fprint(os.Stderr, "\n"+table+"\n")
	return table, err
}
