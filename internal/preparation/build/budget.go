package build

import (
	"errors"
	"strings"

	"github.com/kokumi-dev/kokumi/internal/manifests"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/render"
	"github.com/kokumi-dev/kokumi/internal/render/isolate"
)

// budgetFixes says, per limit, the controller flag that raises it and what the source's
// author can do instead.
var budgetFixes = map[string]struct{ flag, smaller string }{
	oci.LimitPulledBytes:       {config.FlagPulledBytes, "push a smaller chart or bundle"},
	oci.LimitLayers:            {config.FlagLayers, "push the bundle in fewer layers"},
	oci.LimitUncompressedBytes: {config.FlagUncompressedBytes, "make the chart or bundle smaller"},
	manifests.LimitObjects:     {config.FlagObjects, "make the chart or bundle render fewer objects"},
	render.LimitOutputBytes:    {config.FlagOutputBytes, "make the chart or bundle render less YAML"},
	render.LimitDecodedBytes:   {config.FlagOutputBytes, "make the chart or bundle render fewer keys and values (each costs the controller some 32 to 48 bytes of memory beyond its text)"},
	render.LimitObjectBytes:    {config.FlagOutputBytes, "make the chart or bundle render smaller objects"},
	render.LimitMemory:         {config.FlagMemory, "make the chart's templates loop less (a range in a range, or a value passed through tpl, makes gigabytes)"},
}

// timedOut returns the RenderTimeout failure of source when err is an *isolate.TimeoutError.
func timedOut(err error, source string) *Error {
	var te *isolate.TimeoutError
	if !errors.As(err, &te) {
		return nil
	}
	return fail(ReasonRenderTimeout, "%s: %w, and its process was killed: make the chart's templates end sooner (a loop that never ends, or a range in a range), or have an admin raise the controller's --%s",
		source, te, config.FlagRenderTimeout)
}

// pullLimits are the budgets a pull of the source is held to.
func pullLimits(b config.RenderBudgets) oci.PullLimits {
	return oci.PullLimits{Bytes: b.PulledBytes, Layers: b.Layers}
}

// renderLimits are the budgets the render of the source is held to.
func renderLimits(b config.RenderBudgets) render.Limits {
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
func checkOutput(b config.RenderBudgets, manifests []byte) error {
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
