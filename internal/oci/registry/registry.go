// Package registry is the bundled OCI registry (distribution v3) behind Kokumi's sign-in of a
// pusher and a puller, with its garbage collection; kept apart from the clients in oci so that
// what only pulls or pushes links no registry server.
package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"

	"github.com/kokumi-dev/kokumi/internal/oci"

	// The filesystem storage driver registers itself.
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/sirupsen/logrus"
)

// Options configures the bundled registry.
type Options struct {
	// Dir is where the registry stores its content.
	Dir string
	// Verbose logs every request.
	Verbose bool
	// Credentials gives the pusher (pulls and pushes) and the puller (pulls); nobody else
	// gets in. The registry reads them again every 30 seconds, and after a failed sign-in at
	// most once a second, so that new credentials take effect without a restart. Either
	// Credentials or NoAuth must be set.
	Credentials func() (oci.RegistryCredentials, error)
	// NoAuth lets whoever reaches the registry pull and push: for tests only.
	NoAuth bool
	// GCPeriod is how often the registry collects its garbage (see Registry.CollectGarbage);
	// 0 never does by itself.
	GCPeriod time.Duration
	// GCGrace keeps from a collection the blobs (and their links in repositories) written
	// within it, so that a push whose manifest comes after its blobs is not cut in two; 0 keeps
	// none of them.
	GCGrace time.Duration
}

// DefaultGCGrace is the GCGrace of `kokumi registry`: longer than any push takes between its
// first blob and its manifest.
const DefaultGCGrace = 10 * time.Minute

// NewHandler returns the bundled OCI registry (distribution v3) as o says: content
// under o.Dir, /v2/ behind Kokumi's authorization (unless o.NoAuth), manifests deleted by the
// pusher alone (conditionally on the repository's last push, see oci.ManifestsSuffix), the
// catalog and the lists of manifests to the pusher alone, garbage collected every o.GCPeriod, and HealthPath for probes. ctx ends its
// background work.
func NewHandler(ctx context.Context, o Options) (http.Handler, error) {
	h, _, err := newHandler(ctx, o)
	return h, err
}

// newHandler is NewHandler, with the collector of the registry's garbage.
// distribution logs through logrus, every request at info level and every 404 as an error:
// o.Verbose keeps those, otherwise only fatal ones are logged.
func newHandler(ctx context.Context, o Options) (http.Handler, *collector, error) {
	if o.Credentials == nil && !o.NoAuth {
		return nil, nil, errors.New("the bundled registry needs credentials (or NoAuth, for tests only)")
	}
	if o.Verbose {
		logrus.SetLevel(logrus.InfoLevel)
	} else {
		logrus.SetLevel(logrus.FatalLevel)
	}
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"filesystem": configuration.Parameters{"rootdirectory": o.Dir},
			// The authorizer lets the pusher alone delete manifests; blobs go by collection.
			"delete": configuration.Parameters{"enabled": true},
			"maintenance": configuration.Parameters{
				"uploadpurging": map[any]any{"enabled": false},
			},
		},
	}
	// The catalog is read by the pusher alone (the authorizer), a page at a time.
	cfg.Catalog.MaxEntries = 1000
	cfg.HTTP.Headers = http.Header{"X-Content-Type-Options": []string{"nosniff"}}
	var source func() (oci.RegistryCredentials, error)
	if !o.NoAuth {
		source = o.Credentials
	}
	gc, err := newCollector(ctx, o.Dir, o.GCGrace)
	if err != nil {
		return nil, nil, err
	}
	if o.GCPeriod > 0 {
		gc.background.Add(1)
		go gc.every(ctx, o.GCPeriod)
	}
	inv := &inventory{next: gc.hold(handlers.NewApp(ctx, cfg)), driver: gc.driver, started: time.Now(), asked: map[string]time.Time{}}
	return &authorizer{next: inv, source: source, now: time.Now}, gc, nil
}

// Registry is a running bundled registry.
type Registry struct {
	// Addr is the host:port it listens on.
	Addr string

	server *http.Server
	gc     *collector
	cancel context.CancelFunc
	done   chan error
}

// Start serves the bundled registry on addr (host:port; port 0 picks one) with its
// content under dir, until Stop, without authentication: for tests only.
func Start(addr, dir string, verbose bool) (*Registry, error) {
	return StartWithOptions(addr, Options{Dir: dir, Verbose: verbose, NoAuth: true})
}

// StartWithOptions serves the bundled registry on addr as o says, until Stop.
func StartWithOptions(addr string, o Options) (*Registry, error) {
	ctx, cancel := context.WithCancel(context.Background())
	handler, gc, err := newHandler(ctx, o)
	if err != nil {
		cancel()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	r := &Registry{
		Addr:   ln.Addr().String(),
		server: &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second},
		gc:     gc,
		cancel: cancel,
		done:   make(chan error, 1),
	}
	go func() {
		err := r.server.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		r.done <- err
	}()
	return r, nil
}

// Stop stops the registry and waits for it, and for its garbage collection.
func (r *Registry) Stop() error {
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.server.Shutdown(shutdownCtx)
	r.cancel()
	r.gc.background.Wait() // a collection under way ends before the content may go
	if serveErr := <-r.done; serveErr != nil && err == nil {
		err = serveErr
	}
	if err != nil {
		return fmt.Errorf("stop registry on %s: %w", r.Addr, err)
	}
	return nil
}

// CollectGarbage runs distribution's garbage collection now (see GarbageCollection).
func (r *Registry) CollectGarbage(ctx context.Context) (GarbageCollection, error) {
	return r.gc.collect(ctx)
}

// gcRetryAfter is the Retry-After, in seconds, of a write refused while the garbage is collected.
const gcRetryAfter = 10

// GarbageCollection is what one collection of the registry's garbage did.
type GarbageCollection struct {
	// BlobBytesBefore and BlobBytesAfter are the size of the blob store before and after.
	BlobBytesBefore, BlobBytesAfter int64
	// Took is how long writes were held.
	Took time.Duration
}

// collector runs distribution's garbage collection (mark and sweep): it deletes the blobs no
// manifest of any repository references, such as the layers of deleted manifests. The
// collection is not safe against concurrent writes (a blob pushed while it marks, for a
// manifest pushed after, would be swept), so the registry takes no write while it runs: it
// starts once the writes in flight have ended, and until it ends every write (any method but
// GET and HEAD) gets 503 with Retry-After. Reads go on, and uploads in progress are not
// touched. A push that straddles it (its blobs before, its manifest after) keeps its blobs
// when they were written within the grace; otherwise its manifest is refused, naming a blob
// that is gone, and the push is made again.
type collector struct {
	dir      string
	grace    time.Duration
	driver   storagedriver.StorageDriver
	registry distribution.Namespace

	// writes is held for reading by each write and for writing by a collection (one at a
	// time).
	writes sync.RWMutex
	// background is the periodic collection, until its context ends.
	background sync.WaitGroup
}

func newCollector(ctx context.Context, dir string, grace time.Duration) (*collector, error) {
	d, err := factory.Create(ctx, "filesystem", map[string]any{"rootdirectory": dir})
	if err != nil {
		return nil, fmt.Errorf("open the registry's storage in %s: %w", dir, err)
	}
	reg, err := storage.NewRegistry(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("open the registry's storage in %s: %w", dir, err)
	}
	return &collector{dir: dir, grace: grace, driver: d, registry: reg}, nil
}

// hold serves next, refusing writes while a collection runs.
func (c *collector) hold(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		if !c.writes.TryRLock() {
			w.Header().Set("Retry-After", strconv.Itoa(gcRetryAfter))
			registryError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "the registry is collecting its garbage and takes no write until it ends: try again shortly")
			return
		}
		defer c.writes.RUnlock()
		next.ServeHTTP(w, r)
	})
}

// collect waits for the writes in flight, then marks and sweeps with every write refused.
func (c *collector) collect(ctx context.Context) (GarbageCollection, error) {
	c.writes.Lock()
	defer c.writes.Unlock()
	start := time.Now()
	var gc GarbageCollection
	var err error
	if gc.BlobBytesBefore, err = BlobBytes(c.dir); err != nil {
		return gc, err
	}
	if _, err := os.Stat(filepath.Join(c.dir, "docker", "registry", "v2", "repositories")); errors.Is(err, fs.ErrNotExist) {
		gc.BlobBytesAfter, gc.Took = gc.BlobBytesBefore, time.Since(start)
		return gc, nil // nothing was ever pushed
	}
	sweep := graceDriver{StorageDriver: c.driver, keepAfter: start.Add(-c.grace)}
	if err := storage.MarkAndSweep(ctx, sweep, c.registry, storage.GCOpts{Quiet: true}); err != nil {
		return gc, fmt.Errorf("collect the registry's garbage in %s: %w", c.dir, err)
	}
	if gc.BlobBytesAfter, err = BlobBytes(c.dir); err != nil {
		return gc, err
	}
	gc.Took = time.Since(start)
	return gc, nil
}

// BlobBytes is the size of the blob store of the registry whose content is in dir: the bytes
// of every blob it holds, referenced or not.
func BlobBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(filepath.Join(dir, "docker", "registry", "v2", "blobs"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measure the registry's blobs in %s: %w", dir, err)
	}
	return n, nil
}

// graceDriver is the storage as a collection sweeps it: it keeps the blobs and the links to
// blobs in repositories written after keepAfter.
type graceDriver struct {
	storagedriver.StorageDriver
	keepAfter time.Time
}

// Delete implements storagedriver.StorageDriver.
func (d graceDriver) Delete(ctx context.Context, path string) error {
	if strings.HasPrefix(path, "/docker/registry/v2/blobs/") || strings.Contains(path, "/_layers/") {
		if info, err := d.Stat(ctx, path); err == nil && info.ModTime().After(d.keepAfter) {
			return nil
		}
	}
	return d.StorageDriver.Delete(ctx, path)
}

// every collects the garbage every period until ctx ends, and logs what each collection did.
func (c *collector) every(ctx context.Context, period time.Duration) {
	defer c.background.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gc, err := c.collect(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Printf("kokumi registry: %v; trying again in %s", err, period)
			continue
		}
		log.Printf("kokumi registry: collected the garbage: %d bytes of blobs freed, %d kept, writes held for %s",
			gc.BlobBytesBefore-gc.BlobBytesAfter, gc.BlobBytesAfter, gc.Took.Round(time.Millisecond))
	}
}
