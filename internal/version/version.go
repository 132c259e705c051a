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
func String() string { return Of("kokumi") }

// Of is the version line of the program named program, such as kubectl-kokumi: the version,
// the commit when known, the Go version and the platform.
func Of(program string) string {
	commit := Commit
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", program, Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
