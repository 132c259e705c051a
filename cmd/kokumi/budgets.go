package main

import (
	"flag"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kokumi-dev/kokumi/internal/config"
)

// bindBudgetFlags binds the render budgets, with the defaults d.
func bindBudgetFlags(fs *flag.FlagSet, b *config.RenderBudgets, d config.RenderBudgets) {
	*b = d
	fs.Var(bytesValue{&b.PulledBytes}, config.FlagPulledBytes, "the most bytes one render pulls from the source's registry, manifest and layers, as a `size`: 100Mi, 1Gi or bytes")
	fs.IntVar(&b.Layers, config.FlagLayers, d.Layers, "the most layers a source's manifest may list")
	fs.Var(bytesValue{&b.UncompressedBytes}, config.FlagUncompressedBytes, "the most bytes one render decompresses out of the source's layers, counted as they are decompressed, as a `size`")
	fs.IntVar(&b.Objects, config.FlagObjects, d.Objects, "the most objects one render may make")
	fs.Var(bytesValue{&b.OutputBytes}, config.FlagOutputBytes, "the most bytes of YAML one render may make (the Helm output, a bundle's files, the artifact's manifests), as a `size`")
	fs.Var(bytesValue{&b.Memory}, config.FlagMemory, "the most memory one render takes, in a process of its own, as a `size`: past it the Order fails BudgetExceeded")
	fs.DurationVar(&b.Timeout, config.FlagRenderTimeout, d.Timeout, "the most wall and CPU time one render of a chart or bundle takes: past it its process is killed and the Order fails RenderTimeout")
}

// bytesValue is a flag of a size in bytes: a quantity as Kubernetes writes them (100Mi, 1Gi,
// 500M) or a number of bytes, more than zero.
type bytesValue struct{ p *int64 }

// String implements flag.Value.
func (v bytesValue) String() string {
	if v.p == nil {
		return "0"
	}
	return resource.NewQuantity(*v.p, resource.BinarySI).String()
}

// Set implements flag.Value.
func (v bytesValue) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a size such as 100Mi or 104857600", s)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("%q is not a whole number of bytes more than zero", s)
	}
	*v.p = n
	return nil
}
