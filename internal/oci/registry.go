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
	// The htpasswd access controller registers itself.
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	"github.com/sirupsen/logrus"
)

// NewRegistryHandler returns the bundled OCI registry (distribution v3) storing its content
// under dir. It serves /v2/ on the returned handler; ctx ends its background work.
// distribution logs through logrus, every request at info level and every 404 as an error:
// verbose keeps those, otherwise only fatal ones are logged.
func NewRegistryHandler(ctx context.Context, dir string, verbose bool) http.Handler {
	return newRegistryHandler(ctx, RegistryOptions{Dir: dir, Verbose: verbose})
}

// RegistryOptions configures the bundled registry.
type RegistryOptions struct {
	// Dir is where the registry stores its content.
	Dir string
	// Verbose logs every request.
	Verbose bool
	// HTPasswd, when set, is an htpasswd file (bcrypt) of the users who may pull and push;
	// without it the registry is open to whoever reaches it.
	HTPasswd string
}

func newRegistryHandler(ctx context.Context, o RegistryOptions) http.Handler {
	dir, verbose := o.Dir, o.Verbose
	if verbose {
		logrus.SetLevel(logrus.InfoLevel)
	} else {
		logrus.SetLevel(logrus.FatalLevel)
	}
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"filesystem": configuration.Parameters{"rootdirectory": dir},
			"delete":     configuration.Parameters{"enabled": true},
			"maintenance": configuration.Parameters{
				"uploadpurging": map[any]any{"enabled": false},
			},
		},
	}
	cfg.HTTP.Headers = http.Header{"X-Content-Type-Options": []string{"nosniff"}}
	if o.HTPasswd != "" {
		cfg.Auth = configuration.Auth{"htpasswd": configuration.Parameters{"realm": "kokumi", "path": o.HTPasswd}}
	}
	return handlers.NewApp(ctx, cfg)
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
// content under dir, until Stop.
func StartRegistry(addr, dir string, verbose bool) (*Registry, error) {
	return StartRegistryWithOptions(addr, RegistryOptions{Dir: dir, Verbose: verbose})
}

// StartRegistryWithOptions serves the bundled registry on addr as o says, until Stop.
func StartRegistryWithOptions(addr string, o RegistryOptions) (*Registry, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		Addr:   ln.Addr().String(),
		server: &http.Server{Handler: newRegistryHandler(ctx, o), ReadHeaderTimeout: 30 * time.Second},
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
