// Package render turns a Product's source into manifests: it reads a pulled OCI Helm chart or
// manifest bundle, renders the chart with the Helm SDK, and puts every namespaced object
// without a namespace into the target namespace.
package render

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// ErrNoManifests means the source holds neither a Helm chart nor YAML files.
var ErrNoManifests = errors.New("the source holds neither a Helm chart layer (" + oci.MediaTypeHelmChart +
	") nor YAML files (tar or tar+gzip layers, or layers titled *.yaml)")

// Options says how a source is rendered.
type Options struct {
	// ReleaseName is the Helm release name; unused for a bundle.
	ReleaseName string
	// TargetNamespace is where the manifests render into and deploy.
	TargetNamespace string
	// Values are the Helm values; unused for a bundle.
	Values map[string]any
	// IncludeCRDs renders a chart's crds/ directory too.
	IncludeCRDs bool
	// RequireChart fails a source that is not a Helm chart (the Product asked for a Helm render).
	RequireChart bool
}

// Result is what a source rendered to.
type Result struct {
	// Chart is true when the source was a Helm chart.
	Chart bool
	// Objects are the rendered objects, in render order, each with its namespace set.
	Objects []*unstructured.Unstructured
}

// TargetNamespace is where an Order deploys: its own target namespace, else its Product's,
// else the Order's namespace.
func TargetNamespace(order, product, orderNamespace string) string {
	switch {
	case order != "":
		return order
	case product != "":
		return product
	default:
		return orderNamespace
	}
}

// ReleaseName is the Product's release name, else the Order's name.
func ReleaseName(product, orderName string) string {
	if product != "" {
		return product
	}
	return orderName
}

// Render renders the layers of a pulled source: a Helm chart layer with the Helm SDK,
// otherwise the YAML files of the bundle.
func Render(ctx context.Context, layers []oci.Layer, o Options) (*Result, error) {
	var stream []byte
	chart := findChart(layers)
	switch {
	case chart != nil:
		out, err := Helm(ctx, chart, HelmOptions{
			ReleaseName: o.ReleaseName, Namespace: o.TargetNamespace, Values: o.Values, IncludeCRDs: o.IncludeCRDs,
		})
		if err != nil {
			return nil, err
		}
		stream = out
	case o.RequireChart:
		return nil, fmt.Errorf("spec.render.helm is set but the source is not a Helm chart (no %s layer)", oci.MediaTypeHelmChart)
	default:
		out, err := bundle(layers)
		if err != nil {
			return nil, err
		}
		stream = out
	}
	objs, err := Parse(stream)
	if err != nil {
		return nil, err
	}
	SetNamespace(objs, o.TargetNamespace)
	return &Result{Chart: chart != nil, Objects: objs}, nil
}

func findChart(layers []oci.Layer) []byte {
	for _, l := range layers {
		if l.MediaType == oci.MediaTypeHelmChart {
			return l.Data
		}
	}
	return nil
}

// bundle joins the YAML files of a manifest bundle into one stream: per layer in manifest
// order, files sorted by path.
func bundle(layers []oci.Layer) ([]byte, error) {
	var out []byte
	found := false
	add := func(content []byte) {
		found = true
		out = append(out, "\n---\n"...)
		out = append(out, content...)
	}
	for _, l := range layers {
		switch {
		case l.MediaType == oci.MediaTypeLayerTarGzip || l.MediaType == oci.MediaTypeLayerTar ||
			l.MediaType == "application/vnd.docker.image.rootfs.diff.tar.gzip":
			if l.Title != "" && isYAML(l.Title) {
				add(l.Data)
				continue
			}
			files, err := oci.UntarGz(l.Data, l.MediaType != oci.MediaTypeLayerTar)
			if err != nil {
				return nil, fmt.Errorf("read bundle layer: %w", err)
			}
			names := make([]string, 0, len(files))
			for name := range files {
				if isYAML(name) {
					names = append(names, name)
				}
			}
			sort.Strings(names)
			for _, name := range names {
				add(files[name])
			}
		case isYAML(l.Title):
			add(l.Data)
		}
	}
	if !found {
		return nil, ErrNoManifests
	}
	return out, nil
}

func isYAML(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}
