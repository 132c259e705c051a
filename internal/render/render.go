// Package render turns a Product's source into manifests: it reads a pulled OCI Helm chart or
// manifest bundle, renders the chart with the Helm SDK, leaves out the hooks Kokumi does not
// deploy (delete hooks, Helm's test hooks), and puts every namespaced object without a
// namespace into the target namespace.
package render

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/kokumi-dev/kokumi/internal/manifests"

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
	// Limits bound the render; build.Builder sets them from its budgets.
	Limits Limits
}

// What a render may go over besides oci's limits; an *oci.LimitError names one.
const (
	// LimitOutputBytes counts the bytes of YAML a source renders to: the Helm output, the
	// joined files of a bundle, the manifests of the artifact.
	LimitOutputBytes = "output bytes"
	// LimitMemory counts the bytes of memory a render takes, in its own process
	// (internal/render/isolate).
	LimitMemory = "memory bytes"
	// LimitDecodedBytes counts the bytes of the controller's memory a render's objects take
	// when it reads them from the render's process: each key and value some 32 to 48 bytes
	// beyond its text (internal/render/isolate).
	LimitDecodedBytes = "decoded bytes"
	// LimitObjectBytes counts the bytes of JSON one rendered object takes, as the controller
	// reads it from the render's process (internal/render/isolate).
	LimitObjectBytes = "object bytes"
)

// Limits bound a render so that a large or hostile source fails with an *oci.LimitError rather
// than exhausting memory; a zero field means no limit.
type Limits struct {
	// UncompressedBytes is the most bytes decompressed out of the source's layers in all (the
	// chart archive, the bundle's tar layers), counted as they are decompressed.
	UncompressedBytes int64
	// Objects is the most objects the source renders to.
	Objects int
	// OutputBytes is the most bytes of YAML the source renders to.
	OutputBytes int64
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
// otherwise the YAML files of the bundle. Of either it returns what Kokumi deploys: no delete
// hook and no Helm test hook, whichever annotation makes it one (see deployable).
func Render(ctx context.Context, layers []oci.Layer, o Options) (*Result, error) {
	var stream []byte
	chart := findChart(layers)
	switch {
	case chart != nil:
		out, err := Helm(ctx, chart, HelmOptions{
			ReleaseName: o.ReleaseName, Namespace: o.TargetNamespace, Values: o.Values, IncludeCRDs: o.IncludeCRDs, Limits: o.Limits,
		})
		if err != nil {
			return nil, err
		}
		stream = out
	case o.RequireChart:
		return nil, fmt.Errorf("spec.render.helm is set but the source is not a Helm chart (no %s layer)", oci.MediaTypeHelmChart)
	default:
		out, err := bundle(layers, o.Limits)
		if err != nil {
			return nil, err
		}
		stream = out
	}
	objs, err := manifests.ParseLimited(stream, o.Limits.Objects)
	if err != nil {
		return nil, err
	}
	objs = deployable(objs)
	manifests.SetNamespace(objs, o.TargetNamespace)
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
// order, files sorted by path. Within limits, the layers' files decompress to at most
// UncompressedBytes in all and the stream holds at most OutputBytes.
func bundle(layers []oci.Layer, limits Limits) ([]byte, error) {
	var out []byte
	found := false
	add := func(content []byte) error {
		found = true
		if limits.OutputBytes > 0 && int64(len(out)+len(content)) > limits.OutputBytes {
			return &oci.LimitError{Limit: LimitOutputBytes, Max: limits.OutputBytes}
		}
		out = append(out, "\n---\n"...)
		out = append(out, content...)
		return nil
	}
	var used int64
	for _, l := range layers {
		switch {
		case l.MediaType == oci.MediaTypeLayerTarGzip || l.MediaType == oci.MediaTypeLayerTar ||
			l.MediaType == "application/vnd.docker.image.rootfs.diff.tar.gzip":
			if l.Title != "" && isYAML(l.Title) {
				if err := add(l.Data); err != nil {
					return nil, err
				}
				continue
			}
			files, n, err := oci.UntarGzWithin(l.Data, l.MediaType != oci.MediaTypeLayerTar, used, limits.UncompressedBytes)
			if err != nil {
				return nil, fmt.Errorf("read bundle layer: %w", err)
			}
			used = n
			names := make([]string, 0, len(files))
			for name := range files {
				if isYAML(name) {
					names = append(names, name)
				}
			}
			sort.Strings(names)
			for _, name := range names {
				if err := add(files[name]); err != nil {
					return nil, err
				}
			}
		case isYAML(l.Title):
			if err := add(l.Data); err != nil {
				return nil, err
			}
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
