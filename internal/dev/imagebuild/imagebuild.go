// Package imagebuild builds Kokumi's container image without a container runtime, with
// go-containerregistry: ./cmd/kokumi compiled as a static binary for each platform, put FROM
// scratch with a passwd and group naming the nonroot user (65532), the build machine's CA
// bundle and an empty /tmp, in an OCI image index; and, for each platform, an SPDX 2.3 SBOM of
// the binary attached as an OCI 1.1 referrer of that platform's image. The build is
// reproducible: the same tree, toolchain and SOURCE_DATE_EPOCH give the same index digest.
// Push sends the image to a registry, WriteLayout writes it as an OCI image layout.
package imagebuild

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image holds and how it runs.
const (
	// SourceURL is Kokumi's source repository.
	SourceURL = "https://github.com/kokumi-dev/kokumi"
	// Description is the image's description label.
	Description = "Kokumi turns intent into immutable artifacts and deploys them through Argo CD."
	// Entrypoint is the path of the kokumi binary in the image.
	Entrypoint = "/kokumi"
	// User is the user and group the image runs as: nonroot.
	User = "65532:65532"
	// CABundle is the path of the CA bundle, on the build machine and in the image.
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
	// CAPackage is the Debian package that installs CABundle on the build machine.
	CAPackage = "ca-certificates"
	// MediaTypeSPDX is the media type and artifact type of the SBOMs.
	MediaTypeSPDX = "application/spdx+json"
	// DefaultPlatforms are the platforms built unless told otherwise.
	DefaultPlatforms = "linux/amd64,linux/arm64"
)

// Annotation and label keys of the OCI image spec.
const (
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelSource      = "org.opencontainers.image.source"
	LabelCreated     = "org.opencontainers.image.created"
	LabelLicenses    = "org.opencontainers.image.licenses"
	// AnnotationRefName names the image in an OCI layout's index.json.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// passwd and group name root and the nonroot user the image runs as. nonroot's home is /tmp,
// the one directory it may write to.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// Options say what to build.
type Options struct {
	// Dir is the root of Kokumi's module; "" is the current directory.
	Dir string
	// Platforms are the platforms of the index, in order; none means DefaultPlatforms.
	Platforms []v1.Platform
	// Version and Commit are linked into the binary and labelled on the image.
	Version string
	Commit  string
	// Created is the image's creation time and every file's modification time; zero means
	// SourceDateEpoch(Dir).
	Created time.Time
	// CABundle is the CA bundle copied into the image; "" means CABundle.
	CABundle string
	// Go is the go command; "" means "go" on $PATH.
	Go string
	// Log receives progress lines and timings; nil discards them.
	Log io.Writer
}

// Image is a built image: the index and, per platform, the image and its SBOM.
type Image struct {
	// Index lists the platforms' images.
	Index v1.ImageIndex
	// Platforms are the images of the index, in its order.
	Platforms []PlatformImage
	// Version and Commit are the built version and commit.
	Version string
	Commit  string
	// Created is the image's creation time.
	Created time.Time
}

// PlatformImage is one platform's image and the SBOM that refers to it.
type PlatformImage struct {
	Platform v1.Platform
	Image    v1.Image
	// SBOM is an OCI artifact (artifactType MediaTypeSPDX) whose subject is Image.
	SBOM v1.Image
	// SPDX is the SBOM's document.
	SPDX []byte
}

// Digest is the index's digest.
func (im *Image) Digest() (v1.Hash, error) {
	d, err := im.Index.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("digest image index: %w", err)
	}
	return d, nil
}

// Build compiles Kokumi for each platform and assembles the image index and the SBOMs, in
// memory (the binaries' layers are held compressed).
func Build(ctx context.Context, o Options) (*Image, error) {
	start := time.Now()
	if err := o.defaults(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}

	certs, err := os.ReadFile(o.CABundle)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("CA bundle %s not found: install Debian's %s package (apt-get install %s)", o.CABundle, CAPackage, CAPackage)
		}
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("CA bundle %s is empty: reinstall Debian's %s package (update-ca-certificates)", o.CABundle, CAPackage)
	}
	license, err := detectLicense(o.Dir)
	if err != nil {
		return nil, err
	}

	baseTgz, err := tarGzip([]entry{
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: strings.TrimPrefix(CABundle, "/"), mode: 0o644, data: certs},
		{name: "tmp/", mode: 0o1777},
	}, o.Created)
	if err != nil {
		return nil, fmt.Errorf("pack base layer: %w", err)
	}
	base, err := layer(baseTgz)
	if err != nil {
		return nil, err
	}

	tmp, err := os.MkdirTemp("", "kokumi-image-")
	if err != nil {
		return nil, fmt.Errorf("make build directory: %w", err)
	}
	defer os.RemoveAll(tmp)

	labels := map[string]string{
		LabelTitle:       "kokumi",
		LabelDescription: Description,
		LabelVersion:     o.Version,
		LabelRevision:    o.Commit,
		LabelSource:      SourceURL,
		LabelCreated:     o.Created.UTC().Format(time.RFC3339),
	}
	if o.Commit == "" {
		delete(labels, LabelRevision)
	}
	if license != "" {
		labels[LabelLicenses] = license
	}

	out := &Image{Version: o.Version, Commit: o.Commit, Created: o.Created}
	var adds []mutate.IndexAddendum
	for _, p := range o.Platforms {
		t := time.Now()
		bin := binaryName(tmp, p)
		if err := goBuild(ctx, o.Go, o.Dir, p, o.Version, o.Commit, bin); err != nil {
			return nil, err
		}
		logf("built %s for %s in %s", MainPackage, platformString(p), time.Since(t).Round(time.Millisecond))

		t = time.Now()
		pi, err := platformImage(p, bin, base, labels, license, o)
		if err != nil {
			return nil, err
		}
		logf("assembled the %s image and its SBOM in %s", platformString(p), time.Since(t).Round(time.Millisecond))
		out.Platforms = append(out.Platforms, *pi)
		platform := p
		adds = append(adds, mutate.IndexAddendum{Add: pi.Image, Descriptor: v1.Descriptor{Platform: &platform}})
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx, adds...)
	annotated, ok := mutate.Annotations(idx, labels).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotate image index: not an index")
	}
	out.Index = annotated
	d, err := out.Digest()
	if err != nil {
		return nil, err
	}
	logf("image index %s built in %s", d, time.Since(start).Round(time.Millisecond))
	return out, nil
}

func (o *Options) defaults() error {
	if o.Dir == "" {
		o.Dir = "."
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "cmd", "kokumi")); err != nil {
		return fmt.Errorf("%s is not Kokumi's module root: %w", o.Dir, err)
	}
	if len(o.Platforms) == 0 {
		ps, err := ParsePlatforms(DefaultPlatforms)
		if err != nil {
			return err
		}
		o.Platforms = ps
	}
	for _, p := range o.Platforms {
		if _, err := goEnv(p); err != nil {
			return err
		}
	}
	if o.Version == "" {
		o.Version = GitVersion(o.Dir)
	}
	if !linkerValue.MatchString(o.Version) {
		return fmt.Errorf("version %q: want letters, digits and . _ + ~ -", o.Version)
	}
	if o.Commit != "" && !linkerValue.MatchString(o.Commit) {
		return fmt.Errorf("commit %q: want letters, digits and . _ + ~ -", o.Commit)
	}
	if o.Created.IsZero() {
		t, err := SourceDateEpoch(o.Dir)
		if err != nil {
			return err
		}
		o.Created = t
	}
	o.Created = o.Created.UTC().Truncate(time.Second)
	if o.Created.Before(time.Unix(0, 0)) {
		return fmt.Errorf("creation time %s is before 1970", o.Created)
	}
	if o.CABundle == "" {
		o.CABundle = CABundle
	}
	if o.Go == "" {
		o.Go = "go"
	}
	return nil
}

// platformImage assembles one platform's image from its binary and the shared base layer, and
// the SBOM of the binary referring to it.
func platformImage(p v1.Platform, bin string, base v1.Layer, labels map[string]string, license string, o Options) (*PlatformImage, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("read Go build information of %s: %w", bin, err)
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		return nil, err
	}
	appTgz, err := tarGzip([]entry{{name: strings.TrimPrefix(Entrypoint, "/"), mode: 0o755, file: bin}}, o.Created)
	if err != nil {
		return nil, fmt.Errorf("pack %s layer for %s: %w", Entrypoint, platformString(p), err)
	}
	app, err := layer(appTgz)
	if err != nil {
		return nil, err
	}

	created := v1.Time{Time: o.Created}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      created,
		Config: v1.Config{
			User:       User,
			Entrypoint: []string{Entrypoint},
			WorkingDir: "/",
			Env:        []string{"SSL_CERT_FILE=" + CABundle},
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("configure %s image: %w", platformString(p), err)
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{
			Created: created, CreatedBy: "kokumi imagebuild: /etc/passwd, /etc/group, " + CABundle + ", /tmp",
			Comment: "nonroot user 65532 and the CA bundle of Debian's " + CAPackage,
		}},
		mutate.Addendum{Layer: app, History: v1.History{
			Created: created, CreatedBy: "kokumi imagebuild: go build -trimpath " + MainPackage + " → " + Entrypoint,
			Comment: info.GoVersion + ", " + platformString(p) + ", CGO_ENABLED=0",
		}},
	)
	if err != nil {
		return nil, fmt.Errorf("add layers to %s image: %w", platformString(p), err)
	}
	desc, err := partial.Descriptor(img)
	if err != nil {
		return nil, fmt.Errorf("describe %s image: %w", platformString(p), err)
	}

	doc, err := spdxJSON(sbomInput{
		info: info, binarySHA: sum, path: Entrypoint, version: o.Version, commit: o.Commit,
		platform: platformString(p), created: o.Created, license: license,
	})
	if err != nil {
		return nil, fmt.Errorf("SBOM of %s: %w", platformString(p), err)
	}
	sbom, err := newArtifact(MediaTypeSPDX, doc, *desc, map[string]string{
		LabelCreated: o.Created.UTC().Format(time.RFC3339),
		LabelTitle:   "kokumi " + o.Version + " " + platformString(p) + " SBOM (SPDX 2.3)",
	})
	if err != nil {
		return nil, err
	}
	return &PlatformImage{Platform: p, Image: img, SBOM: sbom, SPDX: doc}, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// detectLicense names the license of the LICENSE file in dir as an SPDX expression: "" when
// there is no LICENSE, NOASSERTION when its text is not one this knows.
func detectLicense(dir string) (string, error) {
	for _, name := range []string{"LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", name, err)
		}
		return licenseOf(string(b)), nil
	}
	return "", nil
}

func licenseOf(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	switch {
	case strings.Contains(t, "Apache License") && strings.Contains(t, "Version 2.0"):
		return "Apache-2.0"
	case strings.Contains(t, "Mozilla Public License Version 2.0"):
		return "MPL-2.0"
	case strings.Contains(t, "GNU AFFERO GENERAL PUBLIC LICENSE") && strings.Contains(t, "Version 3"):
		return "AGPL-3.0-only"
	case strings.Contains(t, "GNU GENERAL PUBLIC LICENSE") && strings.Contains(t, "Version 3"):
		return "GPL-3.0-only"
	case strings.Contains(t, "Permission is hereby granted, free of charge"):
		return "MIT"
	case strings.Contains(t, "Redistribution and use in source and binary forms") && strings.Contains(t, "Neither the name"):
		return "BSD-3-Clause"
	case strings.Contains(t, "Redistribution and use in source and binary forms"):
		return "BSD-2-Clause"
	default:
		return noAssertion
	}
}
