package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"

	// The filesystem storage driver registers itself.
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/sirupsen/logrus"
)

// RegistryOptions configures the bundled registry.
type RegistryOptions struct {
	// Dir is where the registry stores its content.
	Dir string
	// Verbose logs every request.
	Verbose bool
	// Credentials gives the pusher (pulls and pushes) and the puller (pulls); nobody else
	// gets in. The registry reads them again every 30 seconds, and after a failed sign-in at
	// most once a second, so that new credentials take effect without a restart. Either
	// Credentials or NoAuth must be set.
	Credentials func() (RegistryCredentials, error)
	// NoAuth lets whoever reaches the registry pull and push: for tests only.
	NoAuth bool
}

// NewRegistryHandler returns the bundled OCI registry (distribution v3) as o says: content
// under o.Dir, /v2/ behind Kokumi's authorization (unless o.NoAuth), DELETE refused to
// everyone, and HealthPath for probes. ctx ends its background work.
// distribution logs through logrus, every request at info level and every 404 as an error:
// o.Verbose keeps those, otherwise only fatal ones are logged.
func NewRegistryHandler(ctx context.Context, o RegistryOptions) (http.Handler, error) {
	if o.Credentials == nil && !o.NoAuth {
		return nil, errors.New("the bundled registry needs credentials (or NoAuth, for tests only)")
	}
	if o.Verbose {
		logrus.SetLevel(logrus.InfoLevel)
	} else {
		logrus.SetLevel(logrus.FatalLevel)
	}
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"filesystem": configuration.Parameters{"rootdirectory": o.Dir},
			// Nothing is deleted over the API: Kokumi collects garbage itself.
			"delete": configuration.Parameters{"enabled": false},
			"maintenance": configuration.Parameters{
				"uploadpurging": map[any]any{"enabled": false},
			},
		},
	}
	cfg.HTTP.Headers = http.Header{"X-Content-Type-Options": []string{"nosniff"}}
	var source func() (RegistryCredentials, error)
	if !o.NoAuth {
		source = o.Credentials
	}
	return &authorizer{next: handlers.NewApp(ctx, cfg), source: source, now: time.Now}, nil
}

// Registry is a running bundled registry.
type Registry struct {
	// Addr is the host:port it listens on.
	Addr string

	server *http.Server
	cancel context.CancelFunc
	done   chan error
}

// StartRegistry serves the bundled registry on addr (host:port; port 0 picks one) with its
// content under dir, until Stop, without authentication: for tests only.
func StartRegistry(addr, dir string, verbose bool) (*Registry, error) {
	return StartRegistryWithOptions(addr, RegistryOptions{Dir: dir, Verbose: verbose, NoAuth: true})
}

// StartRegistryWithOptions serves the bundled registry on addr as o says, until Stop.
func StartRegistryWithOptions(addr string, o RegistryOptions) (*Registry, error) {
	ctx, cancel := context.WithCancel(context.Background())
	handler, err := NewRegistryHandler(ctx, o)
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

// Stop stops the registry and waits for it.
func (r *Registry) Stop() error {
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.server.Shutdown(shutdownCtx)
	r.cancel()
	if serveErr := <-r.done; serveErr != nil && err == nil {
		err = serveErr
	}
	if err != nil {
		return fmt.Errorf("stop registry on %s: %w", r.Addr, err)
	}
	return nil
}
