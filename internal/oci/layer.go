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
// path → content. Paths are cleaned; entries that climb out of the archive are refused.
func UntarGz(data []byte, gzipped bool) (map[string][]byte, error) {
	var r io.Reader = bytes.NewReader(data)
	if gzipped {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("open gzip: %w", err)
		}
		defer func() { _ = gz.Close() }()
		r = gz
	}
	tr := tar.NewReader(r)
	files := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read tar: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		if name == ".." || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("tar entry %q leaves the archive", hdr.Name)
		}
		if hdr.Size > maxLayerFile {
			return nil, fmt.Errorf("tar entry %q is larger than %d bytes", hdr.Name, maxLayerFile)
		}
		content, err := io.ReadAll(io.LimitReader(tr, maxLayerFile))
		if err != nil {
			return nil, fmt.Errorf("read tar entry %q: %w", hdr.Name, err)
		}
		files[name] = content
	}
}
