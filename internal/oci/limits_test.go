package oci_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
)

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestUntarGzWithinStopsAZipBombAtTheLimit(t *testing.T) {
	bomb := ocitest.ZipBomb(t, 1<<30, tar.TypeReg)
	t.Logf("a gzipped tar of 1 GiB of files of zeros: %d bytes", len(bomb))
	const limit = 40 << 20
	var err error
	alloc := allocated(func() { _, _, err = oci.UntarGzWithin(bomb, true, 0, limit) })
	le := ocitest.LimitError(t, err, oci.LimitUncompressedBytes, limit)
	if le.Seen <= limit {
		t.Errorf("seen %d, want more than the limit", le.Seen)
	}
	if !strings.Contains(err.Error(), "over the limit of 40Mi") {
		t.Errorf("message %q does not name the limit", err)
	}
	if alloc > limit+8<<20 {
		t.Errorf("allocated %d MiB reading a bomb with a limit of 40 MiB", alloc>>20)
	}
}

func TestUntarGzWithinCountsTheBytesOfEntriesItSkips(t *testing.T) {
	// Entries of a type Kokumi does not read are decompressed all the same, to be skipped.
	bomb := ocitest.ZipBomb(t, 1<<30, tar.TypeCont)
	const limit = 40 << 20
	start := time.Now()
	var err error
	alloc := allocated(func() { _, _, err = oci.UntarGzWithin(bomb, true, 0, limit) })
	le := ocitest.LimitError(t, err, oci.LimitUncompressedBytes, limit)
	if le.Seen != 0 || !strings.Contains(err.Error(), "more than the limit of 40Mi uncompressed bytes") {
		t.Errorf("seen %d, message %q: want more than the limit", le.Seen, err)
	}
	if alloc > 8<<20 {
		t.Errorf("allocated %d MiB skipping entries", alloc>>20)
	}
	t.Logf("stopped after %v, %d KiB allocated", time.Since(start), alloc>>10)
}

func TestTheUncompressedBudgetIsSharedByLayersAndExactAtItsLimit(t *testing.T) {
	layer, err := oci.TarGz(map[string][]byte{"a.yaml": []byte("kind: A\n"), "b.yaml": bytes.Repeat([]byte("x"), 3000)})
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	var size bytes.Buffer
	if _, err := size.ReadFrom(gz); err != nil {
		t.Fatal(err)
	}
	n := int64(size.Len())

	files, used, err := oci.UntarGzWithin(layer, true, 0, n)
	if err != nil || used != n || len(files) != 2 || string(files["a.yaml"]) != "kind: A\n" {
		t.Fatalf("a layer of exactly the limit: %d files, used %d of %d, %v", len(files), used, n, err)
	}
	_, _, err = oci.UntarGzWithin(layer, true, 0, n-1)
	_ = ocitest.LimitError(t, err, oci.LimitUncompressedBytes, n-1)

	// A second layer starts from what the first used.
	if _, used2, err := oci.UntarGzWithin(layer, true, used, 2*n); err != nil || used2 != 2*n {
		t.Fatalf("two layers within twice the size: used %d of %d, %v", used2, 2*n, err)
	}
	_, _, err = oci.UntarGzWithin(layer, true, used, 2*n-1)
	_ = ocitest.LimitError(t, err, oci.LimitUncompressedBytes, 2*n-1)

	// Without a budget, a layer reads as UntarGz does.
	if files, _, err := oci.UntarGzWithin(layer, true, 0, 0); err != nil || len(files) != 2 {
		t.Errorf("no budget: %d files, %v", len(files), err)
	}
}

func TestUntarGzRefusesSparseFiles(t *testing.T) {
	// A PAX sparse file whose holes read as zeros that were never decompressed, so never
	// counted: a few of them would hold many times the budget. Made by hand: archive/tar
	// writes no sparse files.
	var buf bytes.Buffer
	block := func(b []byte) {
		buf.Write(b)
		if pad := len(b) % 512; pad != 0 {
			buf.Write(make([]byte, 512-pad))
		}
	}
	header := func(name string, typeflag byte, size int) []byte {
		var h bytes.Buffer
		tw := tar.NewWriter(&h)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(size), Mode: 0o644, Format: tar.FormatUSTAR}); err != nil {
			t.Fatal(err)
		}
		b := h.Bytes()[:512]
		// archive/tar writes no PAX header of its own choosing: set the type and checksum.
		b[156] = typeflag
		copy(b[148:156], "        ")
		sum := 0
		for _, c := range b {
			sum += int(c)
		}
		copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
		return b
	}
	record := func(k, v string) string {
		// A PAX record is "<length> <key>=<value>\n", its length counting its own digits.
		n := len(k) + len(v) + 3
		n += len(strconv.Itoa(n + len(strconv.Itoa(n))))
		return strconv.Itoa(n) + " " + k + "=" + v + "\n"
	}
	records := record("GNU.sparse.major", "1") + record("GNU.sparse.minor", "0") +
		record("GNU.sparse.name", "huge.yaml") + record("GNU.sparse.realsize", "1048576")
	block(header("PaxHeaders/huge.yaml", tar.TypeXHeader, len(records)))
	block([]byte(records))
	block(header("huge.yaml", tar.TypeReg, 512+1))
	block([]byte("1\n0\n1\n"))
	block([]byte("x"))
	buf.Write(make([]byte, 1024))

	// It is what it claims: archive/tar reads it as a regular file of 1 MiB.
	hdr, err := tar.NewReader(bytes.NewReader(buf.Bytes())).Next()
	if err != nil || hdr.Typeflag != tar.TypeReg || hdr.Size != 1<<20 {
		t.Fatalf("the handmade sparse file reads as %+v, %v", hdr, err)
	}
	_, _, err = oci.UntarGzWithin(buf.Bytes(), false, 0, 40<<20)
	if err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("a sparse file read: %v", err)
	}
}

func TestGunzipWithinStopsAtTheLimit(t *testing.T) {
	bomb := ocitest.ZipBomb(t, 1<<30, tar.TypeReg)
	const limit = 8 << 20
	var err error
	alloc := allocated(func() { _, err = oci.GunzipWithin(bomb, 0, limit) })
	_ = ocitest.LimitError(t, err, oci.LimitUncompressedBytes, limit)
	if alloc > 4<<20 {
		t.Errorf("allocated %d MiB counting a gzip stream", alloc>>20)
	}
	var small bytes.Buffer
	gz := gzip.NewWriter(&small)
	_, _ = gz.Write([]byte("hello"))
	_ = gz.Close()
	if used, err := oci.GunzipWithin(small.Bytes(), 10, 15); err != nil || used != 15 {
		t.Errorf("5 bytes after 10 within 15: used %d, %v", used, err)
	}
	_, err = oci.GunzipWithin(small.Bytes(), 10, 14)
	_ = ocitest.LimitError(t, err, oci.LimitUncompressedBytes, 14)
}

// blobCounter counts the blob requests a client sends.
type blobCounter struct{ n atomic.Int64 }

func (c *blobCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, "/blobs/") {
		c.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestPullWithinRefusesTooManyLayersAndBytesBeforeFetchingALayer(t *testing.T) {
	reg := ocitest.Start(t)
	repo := ocitest.Repo(reg, "bundles/big")
	big := make([]byte, 2<<20)
	_, _ = rand.Read(big)
	ocitest.PushLayers(t, repo, "big", oci.MediaTypeLayerTar, big)
	ocitest.PushLayers(t, repo, "many", oci.MediaTypeLayerTar, []byte("a"), []byte("b"), []byte("c"))
	ctx := context.Background()
	blobs := &blobCounter{}
	c := &oci.Client{HTTPClient: &http.Client{Transport: blobs}}

	_, err := c.PullWithin(ctx, repo, "big", oci.PullLimits{Bytes: 1 << 20})
	le := ocitest.LimitError(t, err, oci.LimitPulledBytes, 1<<20)
	if le.Seen <= 2<<20 || le.Seen > 2<<20+4096 {
		t.Errorf("seen %d, want the manifest and the 2 MiB layer", le.Seen)
	}
	_, err = c.PullWithin(ctx, repo, "many", oci.PullLimits{Layers: 2})
	if le := ocitest.LimitError(t, err, oci.LimitLayers, 2); le.Seen != 3 || err.Error() != "3 layers, over the limit of 2" {
		t.Errorf("seen %d: %v", le.Seen, err)
	}
	if n := blobs.n.Load(); n != 0 {
		t.Errorf("%d blobs fetched for pulls over their limits", n)
	}

	// At the limit exactly, the pull goes through.
	pulled, err := c.PullWithin(ctx, repo, "big", oci.PullLimits{Bytes: le.Seen, Layers: 1})
	if err != nil || len(pulled.Layers) != 1 || !bytes.Equal(pulled.Layers[0].Data, big) {
		t.Fatalf("pull within the limits: %v", err)
	}
	if _, err := c.PullWithin(ctx, repo, "many", oci.PullLimits{Layers: 3}); err != nil {
		t.Fatalf("3 layers within 3: %v", err)
	}
}

func TestPullWithinStopsAtTheDeclaredSizeOfAnEndlessLayer(t *testing.T) {
	// A registry that declares a small layer, or a huge one, and serves endless bytes for it.
	small := make([]byte, 1024)
	layerDigest := digest.FromBytes(small)
	var served, blobGets atomic.Int64
	manifest := func(size int64) []byte {
		m, _ := json.Marshal(ocispec.Manifest{
			Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: ocispec.DescriptorEmptyJSON,
			Layers: []ocispec.Descriptor{{MediaType: oci.MediaTypeLayerTar, Digest: layerDigest, Size: size}},
		})
		return m
	}
	manifests := map[string][]byte{"small": manifest(1024), "huge": manifest(100 << 20)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v2/" || r.URL.Path == "/v2":
			w.WriteHeader(http.StatusOK)
		case strings.Contains(r.URL.Path, "/manifests/"):
			m, ok := manifests[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
			w.Header().Set("Docker-Content-Digest", digest.FromBytes(m).String())
			w.Header().Set("Content-Length", strconv.Itoa(len(m)))
			if r.Method != http.MethodHead {
				_, _ = w.Write(m)
			}
		case strings.Contains(r.URL.Path, "/blobs/"):
			blobGets.Add(1)
			chunk := make([]byte, 64<<10)
			for {
				n, err := w.Write(chunk)
				served.Add(int64(n))
				if err != nil || served.Load() > 1<<30 {
					return
				}
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	c := &oci.Client{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := c.PullWithin(ctx, host+"/evil/layer", "huge", oci.PullLimits{Bytes: 64 << 20})
	_ = ocitest.LimitError(t, err, oci.LimitPulledBytes, 64<<20)
	if n := blobGets.Load(); n != 0 {
		t.Errorf("a layer declared over the limit was fetched %d times", n)
	}

	_, err = c.PullWithin(ctx, host+"/evil/layer", "small", oci.PullLimits{Bytes: 64 << 20})
	if err == nil {
		t.Fatal("an endless layer pulled")
	}
	if n := served.Load(); n > 64<<20 {
		t.Errorf("the client read on: the registry served %d MiB for a layer of 1 KiB", n>>20)
	}
	t.Logf("%v; the registry got %d KiB out", err, served.Load()>>10)
}
