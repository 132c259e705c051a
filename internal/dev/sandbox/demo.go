package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// The demo's chart and image, pushed into the bundled registry at start so that the demo needs
// no internet: the chart is the repository's examples/demo-chart/podinfo, the image is built
// here. Both are built the same way each time, so a restarted demo pushes the same digests and
// renders no new Preparation.

// DemoImageRepository is the repository of the demo image in the bundled registry.
const DemoImageRepository = "stefanprodan/podinfo"

// DemoChartRepository is the repository of the demo chart in the bundled registry.
const DemoChartRepository = "charts/podinfo"

// upstreamImage is the image the chart's values name; the demo points it at the bundled registry.
const upstreamImage = "ghcr.io/stefanprodan/podinfo"

// fixedTime stamps every file of the chart and the image, so that their digests do not change.
var fixedTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Demo is what PushDemo pushed.
type Demo struct {
	// ChartURL is the chart's oci:// URL, as a Product names it.
	ChartURL string
	// ChartVersion is the chart's version (its tag).
	ChartVersion string
	// ChartDigest is the digest of the chart's manifest.
	ChartDigest string
	// Image is the image reference the chart deploys, by tag.
	Image string
	// ImageDigest is the digest that tag points to.
	ImageDigest string
}

// PushDemo builds the demo image and pushes it, then pushes the chart in chartDir with its image
// pointed at it, both into the registry at host:port reg (plain HTTP), signed in as pusher
// (anonymously when pusher is empty).
func PushDemo(ctx context.Context, reg string, pusher oci.Credential, chartDir string) (*Demo, error) {
	chart, err := loadChart(chartDir, reg)
	if err != nil {
		return nil, err
	}
	version := chart.Metadata.AppVersion
	imageRef := fmt.Sprintf("%s/%s:%s", reg, DemoImageRepository, version)
	imageDigest, err := pushDemoImage(ctx, imageRef, pusher)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "kokumi-demo-chart-")
	if err != nil {
		return nil, fmt.Errorf("create a temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	archivePath, err := chartutil.Save(chart, tmp)
	if err != nil {
		return nil, fmt.Errorf("package the demo chart: %w", err)
	}
	data, err := os.ReadFile(archivePath)
	if err != nil {
		return nil, fmt.Errorf("read the packaged demo chart: %w", err)
	}
	opts := []registry.ClientOption{registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard),
		registry.ClientOptCredentialsFile(filepath.Join(tmp, "registry.json"))}
	if pusher.Username != "" {
		opts = append(opts, registry.ClientOptBasicAuth(pusher.Username, pusher.Password))
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create a registry client: %w", err)
	}
	chartRef := fmt.Sprintf("%s/%s:%s", reg, DemoChartRepository, chart.Metadata.Version)
	res, err := client.Push(data, chartRef, registry.PushOptCreationTime(fixedTime.Format(time.RFC3339)))
	if err != nil {
		return nil, fmt.Errorf("push the demo chart to %s: %w", chartRef, err)
	}
	return &Demo{
		ChartURL:     "oci://" + reg + "/" + DemoChartRepository,
		ChartVersion: chart.Metadata.Version,
		ChartDigest:  res.Manifest.Digest,
		Image:        imageRef,
		ImageDigest:  imageDigest,
	}, nil
}

// loadChart loads the chart in dir with fixed file times and its image repository pointed at
// the registry reg.
func loadChart(dir, reg string) (*chartv2.Chart, error) {
	var files []*archive.BufferedFile
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == chartutil.ValuesfileName {
			data = bytes.ReplaceAll(data, []byte("repository: "+upstreamImage), []byte("repository: "+reg+"/"+DemoImageRepository))
		}
		files = append(files, &archive.BufferedFile{Name: rel, ModTime: fixedTime, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the demo chart in %s: %w", dir, err)
	}
	chart, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load the demo chart in %s: %w", dir, err)
	}
	return chart, nil
}

// pushDemoImage builds a small image (one layer holding a podinfo placeholder; the simulated
// nodes run no container) and pushes it to ref as pusher; it returns its digest.
func pushDemoImage(ctx context.Context, ref string, pusher oci.Credential) (string, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := []byte("#!/bin/sh\necho podinfo: Kokumi's demo image\n")
	if err := tw.WriteHeader(&tar.Header{Name: "podinfo", Mode: 0o755, Size: int64(len(body)), ModTime: fixedTime, Typeflag: tar.TypeReg}); err != nil {
		return "", fmt.Errorf("build the demo image: %w", err)
	}
	if _, err := tw.Write(body); err != nil {
		return "", fmt.Errorf("build the demo image: %w", err)
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("build the demo image: %w", err)
	}
	tarBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return "", fmt.Errorf("build the demo image's layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: fixedTime}, CreatedBy: "kokumi dev"}})
	if err != nil {
		return "", fmt.Errorf("build the demo image: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", fmt.Errorf("build the demo image's config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = "amd64", "linux", v1.Time{Time: fixedTime}
	cfg.Config = v1.Config{Entrypoint: []string{"./podinfo"}, WorkingDir: "/"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", fmt.Errorf("build the demo image's config: %w", err)
	}
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", ref, err)
	}
	auth := authn.Anonymous
	if pusher.Username != "" {
		auth = &authn.Basic{Username: pusher.Username, Password: pusher.Password}
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithAuth(auth)); err != nil {
		return "", fmt.Errorf("push the demo image to %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("digest of the demo image: %w", err)
	}
	return digest.String(), nil
}

// DemoChartDir is where the demo chart lives in a checkout.
func (a Assets) DemoChartDir() string {
	return filepath.Join(a.Root, "examples", "demo-chart", "podinfo")
}

// demoProductPatch is the merge patch that points the spec's example Product at the demo chart.
func demoProductPatch(d *Demo) string {
	return fmt.Sprintf(`{"spec":{"source":{"url":%q,"version":%q}}}`, d.ChartURL, d.ChartVersion)
}
