package render

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
)

// HelmOptions says how a chart is rendered.
type HelmOptions struct {
	// ReleaseName is the release name (.Release.Name).
	ReleaseName string
	// Namespace is the namespace the chart renders into (.Release.Namespace).
	Namespace string
	// Values are the user values, merged over the chart's.
	Values map[string]any
	// IncludeCRDs renders the chart's crds/ directory too.
	IncludeCRDs bool
}

// quiet discards the Helm SDK's own logging: failures come back as errors.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Helm renders a chart archive (.tgz) with the Helm SDK, as `helm template` does without a
// cluster: the release manifest, then every hook that is not a test hook. It returns one
// YAML stream.
func Helm(ctx context.Context, chartArchive []byte, o HelmOptions) ([]byte, error) {
	chrt, err := loader.LoadArchive(bytes.NewReader(chartArchive))
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	cfg := action.NewConfiguration()
	cfg.SetLogger(quiet.Handler())
	install := action.NewInstall(cfg)
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName = o.ReleaseName
	install.Namespace = o.Namespace
	install.IncludeCRDs = o.IncludeCRDs
	values := o.Values
	if values == nil {
		values = map[string]any{}
	}
	rel, err := install.RunWithContext(ctx, chrt, values)
	if err != nil {
		return nil, fmt.Errorf("render chart %s %s: %w", chrt.Name(), chrt.Metadata.Version, err)
	}
	r, ok := rel.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("render chart %s: unexpected release type %T", chrt.Name(), rel)
	}
	var out bytes.Buffer
	out.WriteString(strings.TrimSpace(r.Manifest))
	out.WriteString("\n")
	for _, h := range r.Hooks {
		if isTestHook(h) {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return out.Bytes(), nil
}

func isTestHook(h *release.Hook) bool {
	for _, e := range h.Events {
		if e == release.HookTest {
			return true
		}
	}
	return false
}
