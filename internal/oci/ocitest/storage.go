package ocitest

import (
	"testing"

	"github.com/kokumi-dev/kokumi/internal/oci/registry"
)

// BlobBytes measures the blob store of a registry whose content is in dir (see registry.BlobBytes).
func BlobBytes(tb testing.TB, dir string) int64 {
	tb.Helper()
	n, err := registry.BlobBytes(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
