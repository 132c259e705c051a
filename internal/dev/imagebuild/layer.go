package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is one file or directory of a layer. Every entry is owned by root (0:0) and carries the
// layer's one modification time, so the archive depends only on names, modes and contents.
type entry struct {
	// name is the path inside the image, without a leading slash; directories end in "/".
	name string
	// mode holds the permission bits (and the sticky bit for directories).
	mode int64
	// data is a file's content, unless file names a file on disk to copy.
	data []byte
	// file is a path on the build machine whose content the entry gets.
	file string
}

func (e entry) isDir() bool { return strings.HasSuffix(e.name, "/") }

// withParents adds the directories the entries live in (mode 0755) that are not listed already,
// so every path in the layer has its parents.
func withParents(entries []entry) []entry {
	have := map[string]bool{}
	for _, e := range entries {
		have[e.name] = true
	}
	out := append([]entry(nil), entries...)
	for _, e := range entries {
		for dir := path.Dir(strings.TrimSuffix(e.name, "/")); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if name := dir + "/"; !have[name] {
				have[name] = true
				out = append(out, entry{name: name, mode: 0o755})
			}
		}
	}
	return out
}

// tarGzip writes the entries, their parent directories added and all sorted by name, as a
// gzipped tar: USTAR headers owned by 0:0 with mtime as every modification time, and a gzip
// stream with no name and no time in its header, so the same entries always give the same
// bytes (with the same Go toolchain, whose compress/flate is deterministic).
func tarGzip(entries []entry, mtime time.Time) ([]byte, error) {
	entries = withParents(entries)
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	for i := 1; i < len(entries); i++ {
		if entries[i].name == entries[i-1].name {
			return nil, fmt.Errorf("layer lists %s twice", entries[i].name)
		}
	}

	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, fmt.Errorf("start gzip stream: %w", err)
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := writeEntry(tw, e, mtime.UTC()); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar stream: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("close gzip stream: %w", err)
	}
	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, e entry, mtime time.Time) error {
	hdr := &tar.Header{
		Name:    e.name,
		Mode:    e.mode,
		ModTime: mtime,
		Format:  tar.FormatUSTAR,
	}
	if e.isDir() {
		hdr.Typeflag = tar.TypeDir
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write tar header of %s: %w", e.name, err)
		}
		return nil
	}
	hdr.Typeflag = tar.TypeReg
	var content io.Reader = bytes.NewReader(e.data)
	hdr.Size = int64(len(e.data))
	if e.file != "" {
		f, err := os.Open(e.file)
		if err != nil {
			return fmt.Errorf("open %s for /%s: %w", e.file, e.name, err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("stat %s: %w", e.file, err)
		}
		hdr.Size = fi.Size()
		content = f
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write tar header of %s: %w", e.name, err)
	}
	n, err := io.Copy(tw, content)
	if err != nil {
		return fmt.Errorf("write %s into the layer: %w", e.name, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("write %s into the layer: %d bytes of %d (did the file change?)", e.name, n, hdr.Size)
	}
	return nil
}

// layer makes an OCI gzip layer of a gzipped tar, keeping its bytes as they are (so its
// digest is the digest of those bytes).
func layer(tgz []byte) (v1.Layer, error) {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tgz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("make layer: %w", err)
	}
	return l, nil
}
