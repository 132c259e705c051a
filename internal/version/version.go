// Package version holds the build's version, set by the linker.
package version

// Version is the Kokumi version, set with -ldflags "-X github.com/kokumi-dev/kokumi/internal/version.Version=…".
var Version = "dev"
