// Command chart packages Kokumi's Helm chart with the build's version and, with --push, pushes it
// to an OCI registry: `make chart` and `make chart CHART_REPO=oci://…` run it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kokumi-dev/kokumi/internal/chart"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("chart", "charts/kokumi", "the chart's directory")
	version := flag.String("version", "0.0.0-dev", "the chart's version (SemVer)")
	appVersion := flag.String("app-version", "", "the image tag the chart installs by default (default: --version)")
	output := flag.String("output", "bin/chart", "directory the chart archive is written to")
	push := flag.String("push", "", "push the chart to this OCI repository, such as oci://registry.example.com/charts")
	plainHTTP := flag.Bool("plain-http", false, "talk HTTP to the registry (a registry on loopback)")
	flag.Parse()
	if *appVersion == "" {
		*appVersion = *version
	}
	archive, name, err := chart.Package(*dir, *version, *appVersion)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*output, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", *output, err)
	}
	path := filepath.Join(*output, name)
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Println(path)
	if *push == "" {
		return nil
	}
	var created time.Time
	if epoch, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		created = time.Unix(epoch, 0)
	}
	ref, digest, err := chart.Push(archive, *push, chart.PushOptions{PlainHTTP: *plainHTTP, Created: created})
	if err != nil {
		return err
	}
	fmt.Printf("pushed %s@%s\n", ref, digest)
	return nil
}
