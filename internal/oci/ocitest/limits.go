package ocitest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// BombFile is the size of each file of a ZipBomb.
const BombFile = 16 << 20

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// ZipBomb returns a gzipped tar layer of files of BombFile zero bytes each, named
// zeros-0000.yaml and on, uncompressed bytes of content in all (rounded up to BombFile), with
// entries of tar type typeflag (tar.TypeReg for regular files). It takes a few KiB per file
// and is made without the uncompressed bytes ever existing: a gzip stream may be several gzip
// members one after the other, so each header is a member of its own and the zeros of a file
// are one member, compressed once and repeated.
func ZipBomb(tb testing.TB, uncompressed int64, typeflag byte) []byte {
	tb.Helper()
	member := func(r io.Reader) []byte {
		var buf bytes.Buffer
		gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := io.Copy(gz, r); err != nil {
			tb.Fatal(err)
		}
		if err := gz.Close(); err != nil {
			tb.Fatal(err)
		}
		return buf.Bytes()
	}
	content := member(io.LimitReader(zeros{}, BombFile))
	var out bytes.Buffer
	for i := int64(0); i*BombFile < uncompressed; i++ {
		var header bytes.Buffer
		tw := tar.NewWriter(&header)
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: typeflag, Name: fmt.Sprintf("zeros-%04d.yaml", i), Mode: 0o644, Size: BombFile, Format: tar.FormatUSTAR,
		}); err != nil {
			tb.Fatal(err)
		}
		// The header block alone: the file's data is the member of zeros.
		out.Write(member(&header))
		out.Write(content)
	}
	// The end of the archive: two zero blocks.
	out.Write(member(io.LimitReader(zeros{}, 2*512)))
	return out.Bytes()
}

// PushLayers pushes an artifact of the given layers, each of mediaType (no config), to
// host/repo:tag and returns the manifest digest.
func PushLayers(tb testing.TB, repository, tag, mediaType string, layers ...[]byte) string {
	tb.Helper()
	descs := make([]ocispec.Descriptor, len(layers))
	for i, l := range layers {
		descs[i] = content.NewDescriptorFromBytes(mediaType, l)
	}
	return push(tb, repository, tag, ocispec.MediaTypeEmptyJSON, ocispec.DescriptorEmptyJSON.Data, descs, layers)
}

// ManyObjectsChart is a tiny chart named many whose one template renders .Values.count
// ConfigMaps (default 1): a few hundred bytes that render to as many objects as asked.
func ManyObjectsChart(tb testing.TB) []byte {
	tb.Helper()
	return Chart(tb, "many", map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: many\nversion: 1.0.0\n",
		"values.yaml": "count: 1\n",
		"templates/many.yaml": `{{- range $i := until (int .Values.count) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm-{{ $i }}
data:
  index: "{{ $i }}"
{{- end }}
`,
	})
}

// LimitError checks that err is an *oci.LimitError of limit and max, and returns it.
func LimitError(t testing.TB, err error, limit string, max int64) *oci.LimitError {
	t.Helper()
	var le *oci.LimitError
	if !errors.As(err, &le) {
		t.Fatalf("error %v is not an *oci.LimitError", err)
	}
	if le.Limit != limit || le.Max != max {
		t.Fatalf("limit %q of %d, want %q of %d (%v)", le.Limit, le.Max, limit, max, err)
	}
	return le
}
