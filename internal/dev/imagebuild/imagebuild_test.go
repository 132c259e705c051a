package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestTarGzipIsDeterministicAndComplete(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	file := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(file, []byte("\x7fELF fake"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := tarGzip([]entry{
		{name: "tmp/", mode: 0o1777},
		{name: "etc/ssl/certs/ca.crt", mode: 0o644, data: []byte("cert")},
		{name: "kokumi", mode: 0o755, file: file},
		{name: "etc/passwd", mode: 0o644, data: []byte("root")},
	}, mtime)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tarGzip([]entry{
		{name: "etc/passwd", mode: 0o644, data: []byte("root")},
		{name: "kokumi", mode: 0o755, file: file},
		{name: "etc/ssl/certs/ca.crt", mode: 0o644, data: []byte("cert")},
		{name: "tmp/", mode: 0o1777},
	}, mtime.In(time.FixedZone("elsewhere", 3600)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the same entries in another order gave other bytes")
	}

	zr, err := gzip.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header has time %v and name %q, want neither", zr.ModTime, zr.Name)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s owned by %d:%d (%q:%q), want 0:0", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(mtime) {
			t.Errorf("%s modified %v, want %v", h.Name, h.ModTime, mtime)
		}
		want := map[string]int64{"tmp/": 0o1777, "kokumi": 0o755, "etc/passwd": 0o644, "etc/": 0o755}
		if m, ok := want[h.Name]; ok && h.Mode != m {
			t.Errorf("%s mode %o, want %o", h.Name, h.Mode, m)
		}
		if h.Name == "kokumi" {
			body, _ := io.ReadAll(tr)
			if string(body) != "\x7fELF fake" {
				t.Errorf("kokumi holds %q", body)
			}
		}
	}
	got := strings.Join(names, " ")
	if want := "etc/ etc/passwd etc/ssl/ etc/ssl/certs/ etc/ssl/certs/ca.crt kokumi tmp/"; got != want {
		t.Errorf("entries %q, want %q", got, want)
	}
}

// buildInfo is the build information of a kokumi binary as `go version -m` prints it.
// (debug.ParseBuildInfo leaves GoVersion to the caller.)
const buildInfo = "path\tgithub.com/kokumi-dev/kokumi/cmd/kokumi\n" +
	"mod\tgithub.com/kokumi-dev/kokumi\t(devel)\t\n" +
	"dep\tgithub.com/google/go-containerregistry\tv0.22.1\th1:RZuuSYhTvlDvtsK+NkutoCZ//C0X2ebLK8X8l3ULs84=\n" +
	"dep\tgithub.com/docker/cli\tv29.7.2+incompatible\th1:dlkwallR8XqfeVnA2ELEhdwvb4lsSwuB4IgsG8Q9cLY=\n" +
	"dep\texample.com/old\tv1.0.0\n" +
	"=>\texample.com/New\tv1.1.0\th1:RZuuSYhTvlDvtsK+NkutoCZ//C0X2ebLK8X8l3ULs84=\n" +
	"build\t-trimpath=true\n" +
	"build\tCGO_ENABLED=0\n" +
	"build\tGOARCH=amd64\n" +
	"build\tGOOS=linux\n"

func TestSPDXOfBuildInfo(t *testing.T) {
	info, err := debug.ParseBuildInfo(buildInfo)
	if err != nil {
		t.Fatal(err)
	}
	info.GoVersion = "go1.26.8"
	in := sbomInput{info: info, binarySHA: strings.Repeat("ab", 32), path: "/kokumi", version: "v1.2.3",
		commit: "abc123", platform: "linux/amd64", created: time.Unix(1700000000, 0)}
	raw, err := spdxJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	again, err := spdxJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, again) {
		t.Fatal("the same build information gave two documents")
	}
	var doc SPDXDocument
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.CreationInfo.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("document header %s %s %s", doc.SPDXVersion, doc.DataLicense, doc.CreationInfo.Created)
	}
	ids := map[string]bool{}
	byName := map[string]SPDXPackage{}
	for _, p := range doc.Packages {
		if ids[p.SPDXID] {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
		byName[p.Name] = p
	}
	main := doc.Packages[0]
	if main.Name != "github.com/kokumi-dev/kokumi" || main.Checksums[0].ChecksumValue != in.binarySHA ||
		main.Purl() != "pkg:golang/github.com/kokumi-dev/kokumi@v1.2.3" || !strings.Contains(main.Comment, "CGO_ENABLED=0") {
		t.Errorf("main package %+v", main)
	}
	if p := byName["stdlib"]; p.VersionInfo != "go1.26.8" || p.Purl() != "pkg:golang/stdlib@go1.26.8" {
		t.Errorf("stdlib %+v", p)
	}
	ggcr := byName["github.com/google/go-containerregistry"]
	// h1:RZuu… is base64 of this SHA-256.
	if ggcr.VersionInfo != "v0.22.1" || ggcr.Purl() != "pkg:golang/github.com/google/go-containerregistry@v0.22.1" ||
		len(ggcr.Checksums) != 1 || ggcr.Checksums[0].ChecksumValue != "459bae498853be50efb6c2be364bada0267ffc2d17d9e6cb2bc5fc97750bb3ce" ||
		ggcr.DownloadLocation != "https://proxy.golang.org/github.com/google/go-containerregistry/@v/v0.22.1.zip" {
		t.Errorf("go-containerregistry %+v", ggcr)
	}
	if cli := byName["github.com/docker/cli"]; cli.Purl() != "pkg:golang/github.com/docker/cli@v29.7.2%2Bincompatible" {
		t.Errorf("docker/cli %+v", cli)
	}
	if n := byName["example.com/New"]; n.VersionInfo != "v1.1.0" || !strings.Contains(n.Comment, "example.com/old v1.0.0 replaced") ||
		n.DownloadLocation != "https://proxy.golang.org/example.com/!new/@v/v1.1.0.zip" {
		t.Errorf("replaced module %+v", n)
	}
	if len(doc.Packages) != 5 || len(doc.Relationships) != 5 || doc.DocumentDescribes[0] != main.SPDXID {
		t.Errorf("%d packages, %d relationships, describes %v", len(doc.Packages), len(doc.Relationships), doc.DocumentDescribes)
	}
}

func TestPurlAndProxyEscaping(t *testing.T) {
	if got := purlRef("github.com/docker/cli", "v29.7.2+incompatible").ReferenceLocator; got != "pkg:golang/github.com/docker/cli@v29.7.2%2Bincompatible" {
		t.Errorf("purl %s", got)
	}
	if got := proxyEscape("github.com/BurntSushi/toml"); got != "github.com/!burnt!sushi/toml" {
		t.Errorf("proxy path %s", got)
	}
}

func TestArtifactRefersToItsSubject(t *testing.T) {
	subject := v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: 42, Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}}
	img, err := newArtifact(MediaTypeSPDX, []byte(`{"spdxVersion":"SPDX-2.3"}`), subject, map[string]string{"a": "b"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != MediaTypeSPDX || m.Subject == nil || m.Subject.Digest != subject.Digest ||
		m.Config.MediaType != MediaTypeEmptyJSON || m.Config.Size != 2 || len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeSPDX {
		t.Errorf("artifact manifest %+v", m)
	}
	// It round-trips through an OCI layout.
	lp, err := layout.Write(t.TempDir(), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	back, err := lp.Image(d)
	if err != nil {
		t.Fatal(err)
	}
	l, err := back.LayerByDigest(m.Layers[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := l.Compressed()
	body, _ := io.ReadAll(rc)
	if string(body) != `{"spdxVersion":"SPDX-2.3"}` {
		t.Errorf("blob %q", body)
	}
	cfg, err := back.RawConfigFile()
	if err != nil || string(cfg) != "{}" {
		t.Errorf("config %q %v", cfg, err)
	}
}

func TestClearLayoutRefusesOtherDirectories(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := clearLayout(dir); err == nil {
		t.Fatal("cleared a directory that is not a layout")
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Fatal(err)
	}
}

func TestLicenseOf(t *testing.T) {
	for text, want := range map[string]string{
		"Apache License\n Version 2.0, January 2004":                                 "Apache-2.0",
		"MIT License\n\nPermission is hereby granted, free of charge, to any person": "MIT",
		"All rights reserved.": noAssertion,
	} {
		if got := licenseOf(text); got != want {
			t.Errorf("licenseOf(%q) = %s, want %s", text, got, want)
		}
	}
}

func TestParsePlatforms(t *testing.T) {
	ps, err := ParsePlatforms(DefaultPlatforms)
	if err != nil || len(ps) != 2 || ps[0].Architecture != "amd64" || ps[1].Architecture != "arm64" {
		t.Fatalf("%v %v", ps, err)
	}
	for _, bad := range []string{"", "windows/amd64", "linux/amd64,linux/amd64", "linux"} {
		if _, err := ParsePlatforms(bad); err == nil {
			t.Errorf("ParsePlatforms(%q) took it", bad)
		}
	}
}
