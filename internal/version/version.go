// Package version holds the build's version, set by the linker.
package version

import (
	"fmt"
	"runtime"
)

// Version is the Kokumi version, set with -ldflags "-X github.com/kokumi-dev/kokumi/internal/version.Version=…".
var Version = "dev"

// Commit is the source commit the binary was built from, set with -ldflags "-X github.com/kokumi-dev/kokumi/internal/version.Commit=…".
var Commit = ""

// String is the line `kokumi version` prints: the version, the commit when known, the Go
// version and the platform.
func String() string {
	commit := Commit
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("kokumi %s (commit %s, %s, %s/%s)", Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
