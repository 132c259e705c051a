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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
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
// cluster: the release manifest, then every hook that is neither a test nor a delete hook (see
// deployableHook). It returns one
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
		manifest, keep, err := deployableHook(h)
		if err != nil {
			return nil, fmt.Errorf("render chart %s: hook %s: %w", chrt.Name(), h.Path, err)
		}
		if keep {
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, manifest)
		}
	}
	return out.Bytes(), nil
}

// hookAnnotation is Helm's annotation that makes a resource a hook, and says when it runs.
const hookAnnotation = "helm.sh/hook"

// deployableHook returns what of a hook Kokumi deploys. Test hooks are dropped. Delete hooks
// (pre-delete, post-delete) are dropped too: Argo CD would run them when an Application goes,
// and Kokumi deletes Applications when a cluster leaves or a gate holds, while what runs there
// keeps running; an unreachable cluster would also block the deletion. A hook with other events
// as well keeps those, without its delete events.
func deployableHook(h *release.Hook) (manifest string, keep bool, err error) {
	var kept []string
	dropped := false
	for _, e := range h.Events {
		switch e {
		case release.HookTest, release.HookPreDelete, release.HookPostDelete:
			dropped = true
		default:
			kept = append(kept, e.String())
		}
	}
	if len(kept) == 0 {
		return "", false, nil
	}
	if !dropped {
		return h.Manifest, true, nil
	}
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(h.Manifest), &obj); err != nil {
		return "", false, fmt.Errorf("parse: %w", err)
	}
	if err := unstructured.SetNestedField(obj, strings.Join(kept, ","), "metadata", "annotations", hookAnnotation); err != nil {
		return "", false, fmt.Errorf("set %s: %w", hookAnnotation, err)
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return "", false, fmt.Errorf("write: %w", err)
	}
	return strings.TrimSpace(string(out)), true, nil
}
