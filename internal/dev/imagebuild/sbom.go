package imagebuild

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SPDXDocument is the part of an SPDX 2.3 JSON document the SBOM of the image uses.
type SPDXDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      SPDXCreationInfo   `json:"creationInfo"`
	DocumentDescribes []string           `json:"documentDescribes"`
	Packages          []SPDXPackage      `json:"packages"`
	Relationships     []SPDXRelationship `json:"relationships"`
}

// SPDXCreationInfo says when and by what tool an SPDX document was made.
type SPDXCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// SPDXPackage is one package of an SPDX document: the main module, the Go standard library or
// a dependency module.
type SPDXPackage struct {
	Name                  string            `json:"name"`
	SPDXID                string            `json:"SPDXID"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	PackageFileName       string            `json:"packageFileName,omitempty"`
	Supplier              string            `json:"supplier,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []SPDXChecksum    `json:"checksums,omitempty"`
	SourceInfo            string            `json:"sourceInfo,omitempty"`
	LicenseConcluded      string            `json:"licenseConcluded"`
	LicenseDeclared       string            `json:"licenseDeclared"`
	CopyrightText         string            `json:"copyrightText"`
	Comment               string            `json:"comment,omitempty"`
	ExternalRefs          []SPDXExternalRef `json:"externalRefs,omitempty"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
}

// SPDXChecksum is a checksum of a package.
type SPDXChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

// SPDXExternalRef points a package at an outside identifier, here its package URL (purl).
type SPDXExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

// SPDXRelationship relates two SPDX elements.
type SPDXRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// Purl returns the package URL of a package, or "".
func (p SPDXPackage) Purl() string {
	for _, r := range p.ExternalRefs {
		if r.ReferenceType == "purl" {
			return r.ReferenceLocator
		}
	}
	return ""
}

// sbomInput is what an SBOM describes: a Go binary of the image and how it was built.
type sbomInput struct {
	info      *debug.BuildInfo
	binarySHA string // hex SHA-256 of the binary
	path      string // the binary's path in the image
	version   string
	commit    string
	platform  string // os/arch
	created   time.Time
	license   string // SPDX expression of the main module, or ""
}

// spdxJSON writes the SPDX 2.3 JSON document of a Go binary from its build information: the
// main module (the binary, with its SHA-256), the Go standard library at the toolchain's
// version, and every module the binary was built with, each with its version, package URL
// and, when the build knew it, its go.sum hash as a SHA-256 checksum. The same input always
// gives the same bytes: the time is the build's, the namespace is derived from the binary's
// digest and the modules are sorted.
func spdxJSON(in sbomInput) ([]byte, error) {
	if in.info == nil {
		return nil, fmt.Errorf("no Go build information")
	}
	ids := map[string]bool{}
	newID := func(name string) string {
		id := "SPDXRef-Package-" + spdxIDChars.ReplaceAllString(name, "-")
		for i := 2; ids[id]; i++ {
			id = "SPDXRef-Package-" + spdxIDChars.ReplaceAllString(name, "-") + "-" + strconv.Itoa(i)
		}
		ids[id] = true
		return id
	}

	mainPath := in.info.Main.Path
	if mainPath == "" {
		mainPath = in.info.Path
	}
	license := in.license
	if license == "" {
		license = noAssertion
	}
	download := SourceURL
	if in.commit != "" {
		download = "git+" + SourceURL + ".git@" + in.commit
	}
	mainPkg := SPDXPackage{
		Name:             mainPath,
		SPDXID:           newID("kokumi"),
		VersionInfo:      in.version,
		PackageFileName:  in.path,
		Supplier:         "Organization: Kokumi",
		DownloadLocation: download,
		Checksums:        []SPDXChecksum{{Algorithm: "SHA256", ChecksumValue: in.binarySHA}},
		LicenseConcluded: noAssertion,
		LicenseDeclared:  license,
		CopyrightText:    noAssertion,
		Comment: fmt.Sprintf("The Go binary %s of the image for %s, built with %s (%s).",
			in.path, in.platform, in.info.GoVersion, buildSettings(in.info)),
		ExternalRefs:          []SPDXExternalRef{purlRef(mainPath, in.version)},
		PrimaryPackagePurpose: "APPLICATION",
	}
	stdlib := SPDXPackage{
		Name:                  "stdlib",
		SPDXID:                newID("stdlib"),
		VersionInfo:           in.info.GoVersion,
		Supplier:              "Organization: Go",
		DownloadLocation:      "https://go.dev/dl/",
		LicenseConcluded:      noAssertion,
		LicenseDeclared:       "BSD-3-Clause",
		CopyrightText:         noAssertion,
		Comment:               "The Go standard library and runtime linked into the binary.",
		ExternalRefs:          []SPDXExternalRef{purlRef("stdlib", in.info.GoVersion)},
		PrimaryPackagePurpose: "LIBRARY",
	}
	doc := SPDXDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              fmt.Sprintf("kokumi-%s-%s", in.version, strings.ReplaceAll(in.platform, "/", "-")),
		DocumentNamespace: fmt.Sprintf("%s/spdx/kokumi-%s-%s-sha256-%s", SourceURL, in.version, strings.ReplaceAll(in.platform, "/", "-"), in.binarySHA),
		CreationInfo: SPDXCreationInfo{
			Created:  in.created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: kokumi-imagebuild", "Organization: Kokumi"},
		},
		DocumentDescribes: []string{mainPkg.SPDXID},
		Packages:          []SPDXPackage{mainPkg, stdlib},
		Relationships: []SPDXRelationship{
			{SPDXElementID: "SPDXRef-DOCUMENT", RelationshipType: "DESCRIBES", RelatedSPDXElement: mainPkg.SPDXID},
			{SPDXElementID: mainPkg.SPDXID, RelationshipType: "DEPENDS_ON", RelatedSPDXElement: stdlib.SPDXID},
		},
	}

	deps := append([]*debug.Module(nil), in.info.Deps...)
	sort.SliceStable(deps, func(i, j int) bool {
		if deps[i].Path != deps[j].Path {
			return deps[i].Path < deps[j].Path
		}
		return deps[i].Version < deps[j].Version
	})
	for _, d := range deps {
		pkg := modulePackage(d, newID)
		doc.Packages = append(doc.Packages, pkg)
		doc.Relationships = append(doc.Relationships, SPDXRelationship{
			SPDXElementID: mainPkg.SPDXID, RelationshipType: "DEPENDS_ON", RelatedSPDXElement: pkg.SPDXID,
		})
	}

	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode SPDX document: %w", err)
	}
	return append(b, '\n'), nil
}

const noAssertion = "NOASSERTION"

// spdxIDChars are the characters an SPDX identifier may not hold.
var spdxIDChars = regexp.MustCompile(`[^A-Za-z0-9.\-]+`)

// modulePackage is the SPDX package of a dependency module, as replaced when it was.
func modulePackage(d *debug.Module, newID func(string) string) SPDXPackage {
	m := d
	comment := ""
	if d.Replace != nil {
		m = d.Replace
		comment = fmt.Sprintf("%s %s replaced by %s %s.", d.Path, d.Version, m.Path, m.Version)
	}
	pkg := SPDXPackage{
		Name:                  m.Path,
		SPDXID:                newID(m.Path + "-" + m.Version),
		VersionInfo:           m.Version,
		DownloadLocation:      noAssertion,
		LicenseConcluded:      noAssertion,
		LicenseDeclared:       noAssertion,
		CopyrightText:         noAssertion,
		Comment:               comment,
		PrimaryPackagePurpose: "LIBRARY",
	}
	if m.Version != "" && m.Version != "(devel)" {
		pkg.DownloadLocation = "https://proxy.golang.org/" + proxyEscape(m.Path) + "/@v/" + proxyEscape(m.Version) + ".zip"
		pkg.ExternalRefs = []SPDXExternalRef{purlRef(m.Path, m.Version)}
	}
	if sum, ok := h1SHA256(m.Sum); ok {
		pkg.Checksums = []SPDXChecksum{{Algorithm: "SHA256", ChecksumValue: sum}}
		pkg.SourceInfo = "go.sum hash " + m.Sum
	}
	return pkg
}

// h1SHA256 turns a go.sum hash ("h1:" and the base64 of a SHA-256) into the hex SHA-256.
func h1SHA256(sum string) (string, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 32 {
		return "", false
	}
	return hex.EncodeToString(raw), true
}

// buildSettings lists the build's settings (GOOS, GOARCH, CGO_ENABLED, -trimpath, -ldflags…).
func buildSettings(info *debug.BuildInfo) string {
	parts := make([]string, 0, len(info.Settings))
	for _, s := range info.Settings {
		parts = append(parts, s.Key+"="+s.Value)
	}
	return strings.Join(parts, " ")
}

// purlRef is the package URL reference of a Go module (or of "stdlib").
func purlRef(modulePath, version string) SPDXExternalRef {
	segments := strings.Split(modulePath, "/")
	for i, s := range segments {
		segments[i] = purlEscape(s)
	}
	locator := "pkg:golang/" + strings.Join(segments, "/")
	if version != "" {
		locator += "@" + purlEscape(version)
	}
	return SPDXExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: locator}
}

// purlEscape percent-encodes what a purl segment may not hold unencoded ("+" of
// "+incompatible" becomes %2B).
func purlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_', c == '~':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// proxyEscape is the module proxy's case encoding of a path or version: each capital letter
// becomes "!" and the lower-case letter.
func proxyEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
