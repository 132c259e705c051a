package preparation

import (
	"errors"
	"strings"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// Budgets bound what one render may take inside the controller, so that a large or hostile
// source fails its Order (BudgetExceeded) instead of exhausting the controller's memory, which
// would stop every Order of every tenant. A field of zero or less means its default.
//
// The defaults leave large real charts room (the biggest public charts are a few MiB pulled and
// render some hundreds of objects, a few MiB of YAML) and bound what one render holds to about
// 400 MiB at worst, a source at every limit at once (objects parsed from YAML take about four
// times its bytes): the Order reconciler renders two at a time under the controller's 1 GiB.
type Budgets struct {
	// PulledBytes is the most bytes pulled from the source's registry: the manifest and every
	// layer, as the manifest declares them, checked before any layer is fetched. Default 100 MiB.
	PulledBytes int64
	// Layers is the most layers the source's manifest may list. Default 256.
	Layers int
	// UncompressedBytes is the most bytes decompressed out of the source's layers in all (the
	// chart archive, the bundle's tar layers), counted as they are decompressed: a layer that
	// decompresses to gigabytes stops there. Default 128 MiB, above Helm's own 100 MiB limit of
	// a chart.
	UncompressedBytes int64
	// Objects is the most objects the source may render to. Default 10,000.
	Objects int
	// OutputBytes is the most bytes of YAML the source may render to: the Helm output, the
	// bundle's joined files, and the manifests of the artifact pushed. Default 32 MiB.
	OutputBytes int64
}

// DefaultBudgets returns the budgets used when none are given.
func DefaultBudgets() Budgets {
	return Budgets{
		PulledBytes:       100 << 20,
		Layers:            256,
		UncompressedBytes: 128 << 20,
		Objects:           10_000,
		OutputBytes:       32 << 20,
	}
}

// WithDefaults returns the budgets with every field of zero or less set to its default.
func (b Budgets) WithDefaults() Budgets {
	d := DefaultBudgets()
	if b.PulledBytes <= 0 {
		b.PulledBytes = d.PulledBytes
	}
	if b.Layers <= 0 {
		b.Layers = d.Layers
	}
	if b.UncompressedBytes <= 0 {
		b.UncompressedBytes = d.UncompressedBytes
	}
	if b.Objects <= 0 {
		b.Objects = d.Objects
	}
	if b.OutputBytes <= 0 {
		b.OutputBytes = d.OutputBytes
	}
	return b
}

// The controller's flags that set each budget; a BudgetExceeded message names the one to raise.
const (
	// FlagPulledBytes sets Budgets.PulledBytes.
	FlagPulledBytes = "render-max-pulled-bytes"
	// FlagLayers sets Budgets.Layers.
	FlagLayers = "render-max-layers"
	// FlagUncompressedBytes sets Budgets.UncompressedBytes.
	FlagUncompressedBytes = "render-max-uncompressed-bytes"
	// FlagObjects sets Budgets.Objects.
	FlagObjects = "render-max-objects"
	// FlagOutputBytes sets Budgets.OutputBytes.
	FlagOutputBytes = "render-max-output-bytes"
)

// budgetFixes says, per limit, the controller flag that raises it and what the source's
// author can do instead.
var budgetFixes = map[string]struct{ flag, smaller string }{
	oci.LimitPulledBytes:       {FlagPulledBytes, "push a smaller chart or bundle"},
	oci.LimitLayers:            {FlagLayers, "push the bundle in fewer layers"},
	oci.LimitUncompressedBytes: {FlagUncompressedBytes, "make the chart or bundle smaller"},
	render.LimitObjects:        {FlagObjects, "make the chart or bundle render fewer objects"},
	render.LimitOutputBytes:    {FlagOutputBytes, "make the chart or bundle render less YAML"},
}

// pullLimits are the budgets a pull of the source is held to.
func (b Budgets) pullLimits() oci.PullLimits {
	return oci.PullLimits{Bytes: b.PulledBytes, Layers: b.Layers}
}

// renderLimits are the budgets the render of the source is held to.
func (b Budgets) renderLimits() render.Limits {
	return render.Limits{UncompressedBytes: b.UncompressedBytes, Objects: b.Objects, OutputBytes: b.OutputBytes}
}

// overBudget returns the BudgetExceeded failure of source (a reference to the chart or
// bundle) when err is an *oci.LimitError, else nil. The message names the budget, its limit,
// what was seen, and both fixes; the *oci.LimitError stays in the chain.
func overBudget(err error, source string) *Error {
	var le *oci.LimitError
	if !errors.As(err, &le) {
		return nil
	}
	fix := budgetFixes[le.Limit]
	return fail(ReasonBudgetExceeded, "%s goes over the render budget of %s: %w: %s, or have an admin raise the controller's --%s",
		source, le.Limit, le, fix.smaller, fix.flag)
}

// checkOutput fails manifests larger than the output budget.
func (b Budgets) checkOutput(manifests []byte) error {
	if int64(len(manifests)) > b.OutputBytes {
		return &oci.LimitError{Limit: render.LimitOutputBytes, Max: b.OutputBytes, Seen: int64(len(manifests))}
	}
	return nil
}

// sourceRef is how a message names the source: url:version or url@digest.
func sourceRef(url, version string) string {
	switch {
	case version == "":
		return url + ":latest"
	case strings.HasPrefix(version, "sha256:"):
		return url + "@" + version
	default:
		return url + ":" + version
	}
}
