// Package image tests Kokumi's container image as `make image` builds it: pushed to a real
// registry on loopback and pulled back with go-containerregistry, rebuilt for the same digest,
// its amd64 binary run, and written as an OCI layout by the hack/image command.
//
// The first build cross-compiles kokumi for amd64 and arm64, which takes minutes on a cold Go
// build cache: run with a long timeout, e.g. go test ./test/image -timeout 30m.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/kokumi-dev/kokumi/internal/dev/imagebuild"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// testVersion is the version the tests build; the binary must print it.
const testVersion = "v9.9.9-imagetest"

// build is the image built once for the tests that only read it.
var build struct {
	once sync.Once
	opts imagebuild.Options
	im   *imagebuild.Image
	took time.Duration
	err  error
}

// root is Kokumi's module root.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// options are the build options of every build of the tests, so they all build the same image.
func options(t *testing.T) imagebuild.Options {
	t.Helper()
	dir := root(t)
	created, err := imagebuild.SourceDateEpoch(dir)
	if err != nil {
		t.Fatal(err)
	}
	commit := imagebuild.GitCommit(dir)
	if commit == "" {
		commit = "0123456789abcdef0123456789abcdef01234567"
	}
	return imagebuild.Options{Dir: dir, Version: testVersion, Commit: commit, Created: created, Log: testLog{t}}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// built builds the image the first time a test asks for it.
func built(t *testing.T) *imagebuild.Image {
	t.Helper()
	build.once.Do(func() {
		start := time.Now()
		build.opts = options(t)
		build.im, build.err = imagebuild.Build(context.Background(), build.opts)
		build.took = time.Since(start)
	})
	if build.err != nil {
		t.Fatalf("build image: %v", build.err)
	}
	return build.im
}

// file is an entry of an image's layers.
type file struct {
	hdr  *tar.Header
	data []byte
}

// files reads every entry of every layer of img.
func files(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]file{}
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			t.Fatal(err)
		}
		if mt != types.OCILayer {
			t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if _, dup := out[h.Name]; dup {
				t.Errorf("%s is in two layers", h.Name)
			}
			out[h.Name] = file{hdr: h, data: data}
		}
		rc.Close()
	}
	return out
}

// wantFiles are the entries of the image, and their modes: nothing else.
var wantFiles = map[string]int64{
	"etc/":                              0o755,
	"etc/group":                         0o644,
	"etc/passwd":                        0o644,
	"etc/ssl/":                          0o755,
	"etc/ssl/certs/":                    0o755,
	"etc/ssl/certs/ca-certificates.crt": 0o644,
	"tmp/":                              0o1777,
	"kokumi":                            0o755,
}

var shells = map[string]bool{"sh": true, "bash": true, "ash": true, "dash": true, "zsh": true, "ksh": true, "busybox": true, "toybox": true}

// checkFiles checks the image holds exactly wantFiles, as root, dated created, and no shell.
func checkFiles(t *testing.T, p v1.Platform, fs map[string]file, created time.Time) {
	t.Helper()
	var names []string
	for n := range fs {
		names = append(names, n)
		if shells[path.Base(strings.TrimSuffix(n, "/"))] || strings.HasPrefix(n, "bin/") || strings.HasPrefix(n, "usr/") {
			t.Errorf("%s: image holds a shell or a bin directory: %s", p, n)
		}
	}
	sort.Strings(names)
	var want []string
	for n := range wantFiles {
		want = append(want, n)
	}
	sort.Strings(want)
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("%s: image holds\n  %s\nwant\n  %s", p, strings.Join(names, " "), strings.Join(want, " "))
	}
	for n, f := range fs {
		if m, ok := wantFiles[n]; ok && f.hdr.Mode != m {
			t.Errorf("%s: %s mode %o, want %o", p, n, f.hdr.Mode, m)
		}
		if f.hdr.Uid != 0 || f.hdr.Gid != 0 {
			t.Errorf("%s: %s owned by %d:%d", p, n, f.hdr.Uid, f.hdr.Gid)
		}
		if !f.hdr.ModTime.Equal(created) {
			t.Errorf("%s: %s modified %v, want the commit time %v", p, n, f.hdr.ModTime, created)
		}
		isDir := strings.HasSuffix(n, "/")
		if isDir != (f.hdr.Typeflag == tar.TypeDir) || (!isDir && f.hdr.Typeflag != tar.TypeReg) {
			t.Errorf("%s: %s has type %c", p, n, f.hdr.Typeflag)
		}
	}
	if !strings.Contains(string(fs["etc/passwd"].data), "\nnonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd does not name nonroot 65532:65532:\n%s", p, fs["etc/passwd"].data)
	}
	if !strings.Contains(string(fs["etc/group"].data), "\nnonroot:x:65532:") {
		t.Errorf("%s: /etc/group does not name nonroot 65532:\n%s", p, fs["etc/group"].data)
	}
	host, err := os.ReadFile(imagebuild.CABundle)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fs["etc/ssl/certs/ca-certificates.crt"].data, host) {
		t.Errorf("%s: the CA bundle is not the build machine's", p)
	}
	checkELF(t, p, fs["kokumi"].data)
}

// checkELF checks the binary is a static ELF executable of p's architecture.
func checkELF(t *testing.T, p v1.Platform, bin []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: /kokumi is not ELF: %v", p, err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
	if f.Machine != want {
		t.Errorf("%s: /kokumi is for %s", p, f.Machine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: /kokumi is dynamically linked", p)
		}
	}
	info, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: /kokumi has no Go build information: %v", p, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// (-trimpath keeps -ldflags out of the build information: the version is in the data.)
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" || settings["GOARCH"] != p.Architecture || settings["GOOS"] != "linux" {
		t.Errorf("%s: /kokumi built with %v", p, settings)
	}
	if !bytes.Contains(bin, []byte(testVersion)) {
		t.Errorf("%s: /kokumi does not hold its version %s", p, testVersion)
	}
	if f.Section(".symtab") != nil || f.Section(".debug_info") != nil {
		t.Errorf("%s: /kokumi has a symbol table or DWARF (built without -s -w)", p)
	}
}

// checkConfig checks how the image runs and its labels.
func checkConfig(t *testing.T, p v1.Platform, img v1.Image, im *imagebuild.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("%s: config is for %s/%s", p, cf.OS, cf.Architecture)
	}
	if strings.Join(c.Entrypoint, " ") != "/kokumi" || len(c.Cmd) != 0 || c.User != "65532:65532" || c.WorkingDir != "/" {
		t.Errorf("%s: entrypoint %q cmd %q user %q workdir %q", p, c.Entrypoint, c.Cmd, c.User, c.WorkingDir)
	}
	if strings.Join(c.Env, " ") != "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" {
		t.Errorf("%s: env %q", p, c.Env)
	}
	created := im.Created.UTC().Format(time.RFC3339)
	want := map[string]string{
		"org.opencontainers.image.title":       "kokumi",
		"org.opencontainers.image.description": imagebuild.Description,
		"org.opencontainers.image.version":     testVersion,
		"org.opencontainers.image.revision":    im.Commit,
		"org.opencontainers.image.source":      "https://github.com/kokumi-dev/kokumi",
		"org.opencontainers.image.created":     created,
	}
	if _, err := os.Stat(filepath.Join(root(t), "LICENSE")); err == nil {
		want["org.opencontainers.image.licenses"] = c.Labels["org.opencontainers.image.licenses"]
		if want["org.opencontainers.image.licenses"] == "" {
			t.Errorf("%s: there is a LICENSE but no licenses label", p)
		}
	}
	if fmt.Sprint(c.Labels) != fmt.Sprint(want) {
		t.Errorf("%s: labels\n  %v\nwant\n  %v", p, c.Labels, want)
	}
	if !cf.Created.Equal(im.Created) {
		t.Errorf("%s: created %v, want %v", p, cf.Created.Time, im.Created)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(im.Created) {
			t.Errorf("%s: history created %v", p, h.Created.Time)
		}
	}
}

// spdx is what the tests read of an SPDX document.
type spdx struct {
	SPDXVersion  string `json:"spdxVersion"`
	CreationInfo struct {
		Created string `json:"created"`
	} `json:"creationInfo"`
	DocumentNamespace string `json:"documentNamespace"`
	Packages          []struct {
		Name        string `json:"name"`
		VersionInfo string `json:"versionInfo"`
		Checksums   []struct {
			Algorithm     string `json:"algorithm"`
			ChecksumValue string `json:"checksumValue"`
		} `json:"checksums"`
		ExternalRefs []struct {
			ReferenceType    string `json:"referenceType"`
			ReferenceLocator string `json:"referenceLocator"`
		} `json:"externalRefs"`
	} `json:"packages"`
}

// checkSBOM checks an SBOM document lists the binary and every module it was built with.
func checkSBOM(t *testing.T, p v1.Platform, raw []byte, bin []byte, im *imagebuild.Image) {
	t.Helper()
	var doc spdx
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: SBOM is not JSON: %v", p, err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != im.Created.UTC().Format(time.RFC3339) {
		t.Errorf("%s: SBOM %s created %s", p, doc.SPDXVersion, doc.CreationInfo.Created)
	}
	info, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	type pkg struct{ sum, purl string }
	pkgs := map[string]pkg{}
	for _, sp := range doc.Packages {
		var k pkg
		for _, c := range sp.Checksums {
			if c.Algorithm == "SHA256" {
				k.sum = c.ChecksumValue
			}
		}
		for _, r := range sp.ExternalRefs {
			if r.ReferenceType == "purl" {
				k.purl = r.ReferenceLocator
			}
		}
		pkgs[sp.Name+"@"+sp.VersionInfo] = k
	}
	binSum := sha256.Sum256(bin)
	if got := pkgs["github.com/kokumi-dev/kokumi@"+testVersion]; got.sum != hex.EncodeToString(binSum[:]) {
		t.Errorf("%s: SBOM main package %+v, binary sha256 %x", p, got, binSum)
	}
	if _, ok := pkgs["stdlib@"+info.GoVersion]; !ok {
		t.Errorf("%s: SBOM has no stdlib %s", p, info.GoVersion)
	}
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		got, ok := pkgs[m.Path+"@"+m.Version]
		if !ok {
			t.Errorf("%s: SBOM does not list %s %s", p, m.Path, m.Version)
			continue
		}
		if !strings.HasPrefix(got.purl, "pkg:golang/"+m.Path+"@") {
			t.Errorf("%s: %s has purl %q", p, m.Path, got.purl)
		}
		if m.Sum != "" {
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(m.Sum, "h1:"))
			if err != nil || got.sum != hex.EncodeToString(raw) {
				t.Errorf("%s: %s checksum %q, go.sum hash %s", p, m.Path, got.sum, m.Sum)
			}
		}
	}
	for _, want := range []string{"sigs.k8s.io/controller-runtime", "helm.sh/helm/v4"} {
		found := false
		for k := range pkgs {
			found = found || strings.HasPrefix(k, want+"@v")
		}
		if !found {
			t.Errorf("%s: SBOM does not list %s", p, want)
		}
	}
	if len(doc.Packages) != len(info.Deps)+2 {
		t.Errorf("%s: SBOM lists %d packages for %d modules", p, len(doc.Packages), len(info.Deps))
	}
}

// checkSBOMManifest checks an SBOM artifact's manifest and returns its document.
func checkSBOMManifest(t *testing.T, p v1.Platform, sbom v1.Image, subject v1.Hash) []byte {
	t.Helper()
	m, err := sbom.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.ArtifactType != "application/spdx+json" || m.Subject == nil || m.Subject.Digest != subject ||
		m.Config.MediaType != "application/vnd.oci.empty.v1+json" || len(m.Layers) != 1 || m.Layers[0].MediaType != "application/spdx+json" {
		t.Fatalf("%s: SBOM manifest %+v", p, m)
	}
	l, err := sbom.LayerByDigest(m.Layers[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestImagePushedToRegistry(t *testing.T) {
	im := built(t)
	t.Logf("built in %s", build.took.Round(time.Millisecond))
	reg := ocitest.Start(t)
	ref := ocitest.Repo(reg, "kokumi-dev/kokumi") + ":" + testVersion
	pushed, err := imagebuild.Push(context.Background(), im, ref, imagebuild.PushOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	want, err := im.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if pushed.DigestStr() != want.String() {
		t.Errorf("pushed %s, built %s", pushed, want)
	}

	// Pull it back by tag.
	tag, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d != want {
		t.Errorf("tag %s is %s, want %s", ref, d, want)
	}
	if err := validate.Index(idx); err != nil {
		t.Errorf("pulled index does not validate: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || m.Annotations["org.opencontainers.image.version"] != testVersion {
		t.Errorf("index media type %s annotations %v", m.MediaType, m.Annotations)
	}
	var platforms []string
	var baseLayers []v1.Hash
	for _, desc := range m.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		p := *desc.Platform
		platforms = append(platforms, p.String())
		img, err := remote.Image(tag.Context().Digest(desc.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		checkConfig(t, p, img, im)
		fs := files(t, img)
		checkFiles(t, p, fs, im.Created)
		ls, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		d, _ := ls[0].Digest()
		baseLayers = append(baseLayers, d)

		// The SBOM is a referrer of the platform's image.
		refs, err := remote.Referrers(tag.Context().Digest(desc.Digest.String()))
		if err != nil {
			t.Fatalf("%s: referrers: %v", p, err)
		}
		rm, err := refs.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var sboms []v1.Descriptor
		for _, r := range rm.Manifests {
			if r.ArtifactType == "application/spdx+json" {
				sboms = append(sboms, r)
			}
		}
		if len(sboms) != 1 {
			t.Fatalf("%s: %d SBOM referrers in %+v", p, len(sboms), rm.Manifests)
		}
		sbom, err := remote.Image(tag.Context().Digest(sboms[0].Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		doc := checkSBOMManifest(t, p, sbom, desc.Digest)
		checkSBOM(t, p, doc, fs["kokumi"].data, im)

		if p.Architecture == runtime.GOARCH && p.OS == runtime.GOOS {
			runVersion(t, fs["kokumi"].data, im)
		}
	}
	sort.Strings(platforms)
	if strings.Join(platforms, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("index platforms %v, want exactly linux/amd64 and linux/arm64", platforms)
	}
	if len(baseLayers) == 2 && baseLayers[0] != baseLayers[1] {
		t.Errorf("the platforms' base layers differ: %v", baseLayers)
	}
}

// runVersion runs the image's binary on this machine: `kokumi version` names the version built.
func runVersion(t *testing.T, bin []byte, im *imagebuild.Image) {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "kokumi")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("kokumi version: %v\n%s", err, out)
	}
	want := fmt.Sprintf("kokumi %s (commit %s, %s, %s/%s)", testVersion, im.Commit, info.GoVersion, runtime.GOOS, runtime.GOARCH)
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("kokumi version printed %q, want %q", got, want)
	}
}

// TestRebuildGivesTheSameDigest builds the image a second time from the same tree.
func TestRebuildGivesTheSameDigest(t *testing.T) {
	first := built(t)
	start := time.Now()
	// The same options (commit and time) as the first build: a commit made meanwhile must not count.
	opts := build.opts
	opts.Log = testLog{t}
	second, err := imagebuild.Build(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuilt in %s (the first build took %s)", time.Since(start).Round(time.Millisecond), build.took.Round(time.Millisecond))
	a, _ := first.Digest()
	b, _ := second.Digest()
	if a != b {
		t.Errorf("two builds of the same tree gave %s and %s", a, b)
	}
	for i := range first.Platforms {
		fp, sp := first.Platforms[i], second.Platforms[i]
		fd, _ := fp.Image.Digest()
		sd, _ := sp.Image.Digest()
		fl, _ := fp.Image.Layers()
		sl, _ := sp.Image.Layers()
		for j := range fl {
			x, _ := fl[j].Digest()
			y, _ := sl[j].Digest()
			if x != y {
				t.Errorf("%s: layer %d is %s then %s", fp.Platform, j, x, y)
			}
		}
		if fd != sd {
			t.Errorf("%s: image %s then %s", fp.Platform, fd, sd)
			if !bytes.Equal(fp.SPDX, sp.SPDX) {
				t.Logf("%s: the binaries differ too (see the SBOMs' main checksum): did the tree change during the test?", fp.Platform)
			}
		}
		fs, _ := fp.SBOM.Digest()
		ss, _ := sp.SBOM.Digest()
		if fs != ss || !bytes.Equal(fp.SPDX, sp.SPDX) {
			t.Errorf("%s: SBOM %s then %s", fp.Platform, fs, ss)
		}
	}
}

// TestLayoutFromCommand runs hack/image as `make image` does, writing an OCI layout, and
// reads it back with go-containerregistry's layout package.
func TestLayoutFromCommand(t *testing.T) {
	im := built(t)
	want, _ := im.Digest()
	dir := filepath.Join(t.TempDir(), "layout")
	cmd := exec.Command("go", "run", "./hack/image", "--output", dir, "--version", testVersion, "--commit", im.Commit)
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", im.Created.Unix()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./hack/image: %v\n%s", err, stderr.String())
	}
	t.Logf("go run ./hack/image took %s:\n%s%s", time.Since(start).Round(time.Millisecond), stderr.String(), out)
	printed := regexp.MustCompile(`(?m)^digest: (sha256:[0-9a-f]{64})$`).FindSubmatch(out)
	if printed == nil || string(printed[1]) != want.String() {
		t.Errorf("command printed %q, the library built %s", out, want)
	}
	if !strings.Contains(string(out), "reference: oci:"+dir+":"+testVersion) {
		t.Errorf("command printed no reference: %q", out)
	}

	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	top, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var index *v1.Descriptor
	var sboms []v1.Descriptor
	for i, d := range top.Manifests {
		switch {
		case d.Annotations["org.opencontainers.image.ref.name"] == testVersion:
			index = &top.Manifests[i]
		case d.ArtifactType == "application/spdx+json":
			sboms = append(sboms, d)
		default:
			t.Errorf("unexpected entry in index.json: %+v", d)
		}
	}
	if index == nil || index.Digest != want || index.MediaType != types.OCIImageIndex {
		t.Fatalf("index.json lists %+v, want the index %s named %s", top.Manifests, want, testVersion)
	}
	idx, err := ii.ImageIndex(index.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Errorf("layout index does not validate: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 || len(sboms) != 2 {
		t.Fatalf("%d images and %d SBOMs in the layout", len(m.Manifests), len(sboms))
	}
	for i, desc := range m.Manifests {
		p := *desc.Platform
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkConfig(t, p, img, im)
		fs := files(t, img)
		checkFiles(t, p, fs, im.Created)
		found := false
		for _, s := range sboms {
			sbom, err := ii.Image(s.Digest)
			if err != nil {
				t.Fatal(err)
			}
			sm, err := sbom.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if sm.Subject == nil || sm.Subject.Digest != desc.Digest {
				continue
			}
			found = true
			doc := checkSBOMManifest(t, p, sbom, desc.Digest)
			checkSBOM(t, p, doc, fs["kokumi"].data, im)
			if !bytes.Equal(doc, im.Platforms[i].SPDX) {
				t.Errorf("%s: the command's SBOM differs from the library's", p)
			}
		}
		if !found {
			t.Errorf("%s: no SBOM in the layout refers to image %s", p, desc.Digest)
		}
	}
}
