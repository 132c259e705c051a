package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"text/template"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"

	"github.com/kokumi-dev/kokumi/internal/oci"
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
	// KubeVersion is the Kubernetes version the chart sees (.Capabilities.KubeVersion, and what
	// its kubeVersion constraint is checked against); empty is the Helm SDK's default.
	KubeVersion string
	// Limits bound the archive's uncompressed bytes and the output's bytes (not its objects:
	// Render counts those).
	Limits Limits
}

// quiet discards the Helm SDK's own logging: failures come back as errors.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Helm renders a chart archive (.tgz) with the Helm SDK, as `helm template` does without a
// cluster: the release manifest, then every hook, tests and delete hooks included (Render
// deploys neither: see deployable). It returns one YAML stream. Within o.Limits, the archive
// is decompressed once, counting, before Helm loads it, and the output is measured as soon as
// Helm's template engine returns it.
func Helm(ctx context.Context, chartArchive []byte, o HelmOptions) ([]byte, error) {
	if o.Limits.UncompressedBytes > 0 {
		if _, err := oci.GunzipWithin(chartArchive, 0, o.Limits.UncompressedBytes); err != nil {
			return nil, fmt.Errorf("load chart: %w", err)
		}
	}
	chrt, err := loader.LoadArchive(bytes.NewReader(chartArchive))
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	cfg := action.NewConfiguration()
	cfg.SetLogger(quiet.Handler())
	var exceeded atomic.Pointer[oci.LimitError]
	if o.Limits.OutputBytes > 0 {
		cfg.CustomTemplateFuncs = boundedFuncs(o.Limits.OutputBytes, &exceeded)
	}
	install := action.NewInstall(cfg)
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName = o.ReleaseName
	install.Namespace = o.Namespace
	install.IncludeCRDs = o.IncludeCRDs
	if o.KubeVersion != "" {
		kv, err := common.ParseKubeVersion(o.KubeVersion)
		if err != nil {
			return nil, fmt.Errorf("render chart %s: %w", chrt.Name(), err)
		}
		install.KubeVersion = kv
	}
	values := o.Values
	if values == nil {
		values = map[string]any{}
	}
	rel, err := install.RunWithContext(ctx, chrt, values)
	if le := exceeded.Load(); le != nil {
		// Helm's engine rewrites template errors into new ones: the limit is not in its chain.
		return nil, fmt.Errorf("render chart %s %s: a template asked for too much: %w", chrt.Name(), chrt.Metadata.Version, le)
	}
	if err != nil {
		return nil, fmt.Errorf("render chart %s %s: %w", chrt.Name(), chrt.Metadata.Version, err)
	}
	r, ok := rel.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("render chart %s: unexpected release type %T", chrt.Name(), rel)
	}
	overOutput := func(n int) error {
		if o.Limits.OutputBytes > 0 && int64(n) > o.Limits.OutputBytes {
			return fmt.Errorf("render chart %s %s: %w", chrt.Name(), chrt.Metadata.Version,
				&oci.LimitError{Limit: LimitOutputBytes, Max: o.Limits.OutputBytes, Seen: int64(n)})
		}
		return nil
	}
	manifest := strings.TrimSpace(r.Manifest)
	if err := overOutput(len(manifest) + 1); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteString(manifest)
	out.WriteString("\n")
	for _, h := range r.Hooks {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, strings.TrimSpace(h.Manifest))
		if err := overOutput(out.Len()); err != nil {
			return nil, err
		}
	}
	return out.Bytes(), nil
}

// boundedFuncs are the template functions that make a list or a string as long as they are
// asked to (until, untilStep, repeat), with sprig's meaning, except that they refuse to make
// one of more than max bytes (a list of ints takes 8 bytes an item) and record the refusal in
// exceeded: `range until 2000000000` would otherwise allocate 16 GB before the template writes
// a byte. Templates that loop in loops are not bounded so: only Helm's engine runs them.
func boundedFuncs(max int64, exceeded *atomic.Pointer[oci.LimitError]) template.FuncMap {
	over := func(size uint64) error {
		if size <= uint64(max) {
			return nil
		}
		le := &oci.LimitError{Limit: LimitOutputBytes, Max: max}
		if size <= math.MaxInt64 {
			le.Seen = int64(size)
		}
		exceeded.Store(le)
		return le
	}
	untilStep := func(start, stop, step int) ([]int, error) {
		// How many items sprig's loop makes, in arithmetic that cannot overflow.
		var span, stride uint64
		switch {
		case stop < start && step < 0:
			span, stride = uint64(start)-uint64(stop), uint64(-step)
		case stop > start && step > 0:
			span, stride = uint64(stop)-uint64(start), uint64(step)
		}
		var n uint64
		if stride > 0 {
			n = span / stride
			if span%stride != 0 {
				n++
			}
		}
		if n > math.MaxInt64/8 {
			return nil, over(math.MaxUint64)
		}
		if err := over(8 * n); err != nil {
			return nil, err
		}
		v := make([]int, 0, n)
		for i, k := start, uint64(0); k < n; i, k = i+step, k+1 {
			v = append(v, i)
		}
		return v, nil
	}
	return template.FuncMap{
		"until": func(count int) ([]int, error) {
			if count < 0 {
				return untilStep(0, count, -1)
			}
			return untilStep(0, count, 1)
		},
		"untilStep": untilStep,
		"repeat": func(count int, str string) (string, error) {
			if count < 0 {
				return "", errors.New("repeat: negative count")
			}
			if len(str) > 0 && uint64(count) > math.MaxUint64/uint64(len(str)) {
				return "", over(math.MaxUint64)
			}
			if err := over(uint64(count) * uint64(len(str))); err != nil {
				return "", err
			}
			return strings.Repeat(str, count), nil
		},
	}
}
