package imagebuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Linker variables the build sets.
const (
	// VersionVar is the variable holding Kokumi's version.
	VersionVar = "github.com/kokumi-dev/kokumi/internal/version.Version"
	// CommitVar is the variable holding the commit Kokumi was built from.
	CommitVar = "github.com/kokumi-dev/kokumi/internal/version.Commit"
	// MainPackage is the package of the kokumi command.
	MainPackage = "./cmd/kokumi"
)

// linkerValue is what a version or commit may be: it goes into -ldflags -X unquoted.
var linkerValue = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+~-]*$`)

// goBuild compiles ./cmd/kokumi of the module in dir for platform into out: a static binary
// (CGO_ENABLED=0) with no paths of the build machine (-trimpath), no VCS stamp, no symbol
// table or DWARF (-s -w), and the version and commit set. The environment is pinned where it
// would change the binary (GOFLAGS, GOWORK, GOAMD64/GOARM64/GOARM), so the same tree and Go
// toolchain give the same bytes on any machine; the Go build cache is used.
func goBuild(ctx context.Context, goCmd, dir string, p v1.Platform, version, commit, out string) error {
	ldflags := fmt.Sprintf("-s -w -X %s=%s -X %s=%s", VersionVar, version, CommitVar, commit)
	cmd := exec.CommandContext(ctx, goCmd, "build",
		"-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, MainPackage)
	cmd.Dir = dir
	env, err := goEnv(p)
	if err != nil {
		return err
	}
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", MainPackage, platformString(p), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// goEnv is the environment that makes go build target p.
func goEnv(p v1.Platform) ([]string, error) {
	if p.OS != "linux" {
		return nil, fmt.Errorf("platform %s: the image is for linux only", platformString(p))
	}
	env := []string{
		"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture,
		"GOFLAGS=", "GOWORK=off", "GOEXPERIMENT=",
	}
	switch p.Architecture {
	case "amd64":
		level := "v1"
		if p.Variant != "" {
			level = p.Variant
		}
		env = append(env, "GOAMD64="+level)
	case "arm64":
		if p.Variant != "" && p.Variant != "v8" {
			return nil, fmt.Errorf("platform %s: only the v8 variant of arm64 is built", platformString(p))
		}
		env = append(env, "GOARM64=v8.0")
	case "arm":
		level := "7"
		if p.Variant != "" {
			level = strings.TrimPrefix(p.Variant, "v")
		}
		env = append(env, "GOARM="+level)
	default:
		if p.Variant != "" {
			return nil, fmt.Errorf("platform %s: variants of %s are not supported", platformString(p), p.Architecture)
		}
	}
	return env, nil
}

// platformString is os/arch[/variant].
func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ParsePlatforms parses a comma-separated list of os/arch[/variant] platforms.
func ParsePlatforms(list string) ([]v1.Platform, error) {
	var out []v1.Platform
	seen := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := v1.ParsePlatform(s)
		if err != nil {
			return nil, fmt.Errorf("parse platform %q: %w", s, err)
		}
		if p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want os/arch", s)
		}
		if _, err := goEnv(*p); err != nil {
			return nil, err
		}
		if seen[platformString(*p)] {
			return nil, fmt.Errorf("platform %s is listed twice", s)
		}
		seen[platformString(*p)] = true
		out = append(out, *p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no platform in %q", list)
	}
	return out, nil
}

// binaryName is the file a platform's binary is built into.
func binaryName(tmp string, p v1.Platform) string {
	return filepath.Join(tmp, strings.ReplaceAll(platformString(p), "/", "-"), "kokumi")
}
