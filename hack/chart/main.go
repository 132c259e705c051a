// Command chart packages Kokumi's Helm chart with the build's version and, with --push, pushes it
// to an OCI registry: `make chart` and `make chart CHART_REPO=oci://…` run it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/kokumi-dev/kokumi/internal/dev/chart"
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
	dryRun := flag.Bool("dry-run-install", false, "install the chart with server-side dry run on the cluster of $KUBECONFIG (or --kubeconfig) and report what the API server refuses or warns of, Pod Security among it")
	namespace := flag.String("namespace", "kokumi-system", "the release's namespace, for --dry-run-install")
	valuesFile := flag.String("values", "", "a values file, for --dry-run-install")
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
	if *dryRun {
		if err := dryRunInstall(archive, *namespace, *valuesFile); err != nil {
			return err
		}
	}
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

// dryRunInstall installs the chart archive in dry run on the cluster of the kubeconfig and
// prints what the API server said.
func dryRunInstall(archive []byte, namespace, valuesFile string) error {
	values := map[string]any{}
	if valuesFile != "" {
		data, err := os.ReadFile(valuesFile)
		if err != nil {
			return fmt.Errorf("read values: %w", err)
		}
		if err := yaml.Unmarshal(data, &values); err != nil {
			return fmt.Errorf("values file %s: %w", valuesFile, err)
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report, err := chart.DryRunInstall(ctx, cfg, archive, "kokumi", namespace, values)
	if err != nil {
		return err
	}
	for _, f := range report.Findings {
		if f.Err != nil {
			fmt.Printf("refused  %s: %v\n", f.Object, f.Err)
		}
		for _, w := range f.Warnings {
			fmt.Printf("warning  %s: %s\n", f.Object, w)
		}
	}
	fmt.Printf("server-side dry run on %s: %d objects, %d workload Pods, %d findings\n", cfg.Host, report.Objects, report.Pods, len(report.Findings))
	if !report.OK() {
		return fmt.Errorf("the API server refused or warned of %d objects", len(report.Findings))
	}
	return nil
}
