package ocitest

import (
	"testing"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// BlobBytes measures the blob store of a registry whose content is in dir (see oci.BlobBytes).
func BlobBytes(tb testing.TB, dir string) int64 {
	tb.Helper()
	n, err := oci.BlobBytes(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
