// Package chart packages Kokumi's Helm chart (charts/kokumi) with the build's version and pushes
// it to an OCI registry, as `helm package` and `helm push` do, with the Helm SDK.
package chart

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
)

// Package loads the chart directory dir, sets its version and appVersion (the version of
// Kokumi's image the chart installs by default), and returns the chart archive (.tgz) with its
// file name, kokumi-<version>.tgz. The version must be SemVer, as Helm requires.
func Package(dir, version, appVersion string) ([]byte, string, error) {
	c, err := loader.LoadDir(dir)
	if err != nil {
		return nil, "", fmt.Errorf("load chart %s: %w", dir, err)
	}
	c.Metadata.Version = strings.TrimPrefix(version, "v")
	c.Metadata.AppVersion = appVersion
	tmp, err := os.MkdirTemp("", "kokumi-chart-")
	if err != nil {
		return nil, "", fmt.Errorf("package chart: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	path, err := chartutil.Save(c, tmp)
	if err != nil {
		return nil, "", fmt.Errorf("package chart %s %s: %w", c.Name(), c.Metadata.Version, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("package chart: %w", err)
	}
	return data, filepath.Base(path), nil
}

// PushOptions say how to reach the registry.
type PushOptions struct {
	// PlainHTTP talks HTTP rather than HTTPS, for a registry on loopback.
	PlainHTTP bool
	// Username and Password sign in; empty uses what `helm registry login` stored.
	Username, Password string
	// Created is the time the artifact says it was made (Helm's org.opencontainers.image.created);
	// zero is now.
	Created time.Time
}

// Push pushes a chart archive to repository, such as oci://registry.example.com/charts, as
// <repository>/<name>:<version>, and returns that reference and the manifest's digest.
func Push(archive []byte, repository string, o PushOptions) (string, string, error) {
	c, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return "", "", fmt.Errorf("load chart archive: %w", err)
	}
	var opts []registry.ClientOption
	if o.PlainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	if o.Username != "" {
		opts = append(opts, registry.ClientOptBasicAuth(o.Username, o.Password))
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return "", "", fmt.Errorf("registry client: %w", err)
	}
	ref := strings.TrimSuffix(strings.TrimPrefix(repository, "oci://"), "/") + "/" + c.Name() + ":" + c.Metadata.Version
	var pushOpts []registry.PushOption
	if !o.Created.IsZero() {
		pushOpts = append(pushOpts, registry.PushOptCreationTime(o.Created.UTC().Format(time.RFC3339)))
	}
	res, err := client.Push(archive, ref, pushOpts...)
	if err != nil {
		return "", "", fmt.Errorf("push chart to %s: %w", ref, err)
	}
	return res.Ref, res.Manifest.Digest, nil
}
