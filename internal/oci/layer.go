package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// epoch is the modification time of every entry of a layer Kokumi writes, so that the same
// files always give the same bytes.
var epoch = time.Unix(0, 0).UTC()

// maxLayerFile is the largest file Kokumi reads out of a layer.
const maxLayerFile = 64 << 20

// TarGz packs files (path → content) into a gzipped tar whose bytes depend on the files only:
// entries sorted by path, fixed times, modes and owners, no gzip name or time.
func TarGz(files map[string][]byte) ([]byte, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, fmt.Errorf("create gzip writer: %w", err)
	}
	tw := tar.NewWriter(gz)
	for _, name := range names {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     name,
			Mode:     0o644,
			Size:     int64(len(files[name])),
			ModTime:  epoch,
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("write tar header %s: %w", name, err)
		}
		if _, err := tw.Write(files[name]); err != nil {
			return nil, fmt.Errorf("write tar entry %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("close gzip: %w", err)
	}
	return buf.Bytes(), nil
}

// UntarGz reads the regular files of a gzipped (or, when gzipped is false, plain) tar,
// path → content. Paths are cleaned; entries that climb out of the archive and sparse files are
// refused. No file may be larger than 64 MiB.
func UntarGz(data []byte, gzipped bool) (map[string][]byte, error) {
	files, _, err := UntarGzWithin(data, gzipped, 0, 0)
	return files, err
}

// UntarGzWithin is UntarGz within a budget of uncompressed bytes that several layers share:
// used bytes were read out of layers before, and at most limit may be read in all (0: no budget,
// but no file larger than 64 MiB). Bytes are counted as they are decompressed, tar headers and
// padding included, so a small layer that decompresses to gigabytes stops at the limit with a
// *LimitError, holding no more than the limit. It returns the files and the bytes used in all.
func UntarGzWithin(data []byte, gzipped bool, used, limit int64) (map[string][]byte, int64, error) {
	var r io.Reader = bytes.NewReader(data)
	if gzipped {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return nil, used, fmt.Errorf("open gzip: %w", err)
		}
		defer func() { _ = gz.Close() }()
		r = gz
	}
	counted := &countingReader{r: r, n: used, max: limit, limit: LimitUncompressedBytes}
	tr := tar.NewReader(counted)
	files := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, counted.n, nil
		}
		if err != nil {
			return nil, counted.n, readError("read tar", err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		if name == ".." || strings.HasPrefix(name, "../") {
			return nil, counted.n, fmt.Errorf("tar entry %q leaves the archive", hdr.Name)
		}
		if isSparse(hdr) {
			// Its holes read as zeros that were never decompressed, and so never counted.
			return nil, counted.n, fmt.Errorf("tar entry %q is a sparse file: only regular files are read", hdr.Name)
		}
		switch {
		case limit > 0 && hdr.Size > limit-counted.n:
			// Its header says it does not fit: do not decompress it to find out.
			return nil, counted.n, &LimitError{Limit: LimitUncompressedBytes, Max: limit, Seen: counted.n + hdr.Size}
		case limit <= 0 && hdr.Size > maxLayerFile:
			return nil, counted.n, fmt.Errorf("tar entry %q is larger than %d bytes", hdr.Name, maxLayerFile)
		}
		content := make([]byte, hdr.Size)
		if _, err := io.ReadFull(tr, content); err != nil {
			return nil, counted.n, readError(fmt.Sprintf("read tar entry %q", hdr.Name), err)
		}
		files[name] = content
	}
}

// readError wraps err with what was read, and returns a *LimitError as it is.
func readError(what string, err error) error {
	var le *LimitError
	if errors.As(err, &le) {
		return le
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isSparse says whether a tar entry is a GNU sparse file in PAX form.
func isSparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// GunzipWithin reads a gzip stream through without keeping it, within a budget of uncompressed
// bytes as UntarGzWithin counts them, and returns the bytes used in all, or a *LimitError as soon
// as the stream goes over.
func GunzipWithin(data []byte, used, limit int64) (int64, error) {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return used, fmt.Errorf("open gzip: %w", err)
	}
	defer func() { _ = gz.Close() }()
	counted := &countingReader{r: gz, n: used, max: limit, limit: LimitUncompressedBytes}
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return counted.n, readError("read gzip", err)
	}
	return counted.n, nil
}
