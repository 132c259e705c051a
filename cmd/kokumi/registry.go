package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
)

// runRegistry serves the bundled OCI registry until ctx ends.
func runRegistry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("registry", stderr)
	addr := fs.String("addr", ":5000", "address to listen on")
	dir := fs.String("dir", "/var/lib/kokumi/registry", "directory the registry stores its content in")
	verbose := fs.Bool("verbose", false, "log every request")
	credsDir := fs.String("credentials-dir", "/etc/kokumi/registry-credentials",
		"directory of the Secret "+oci.RegistryCredentialsSecret+" mounted as files: the pusher (pulls and pushes), the puller (pulls) and the key of the namespaces' pullers (pull-<namespace>: pulls only kokumi/<namespace>/ and vendor/<namespace>/); read again when it changes")
	noAuth := fs.Bool("insecure-no-auth", false, "let whoever reaches the registry pull and push, without credentials: for tests only")
	gcPeriod := fs.Duration("gc-period", time.Hour,
		"how often the registry deletes the blobs no manifest references (the layers of collected Preparations); writes get 503 and Retry-After while it does; 0 turns it off")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := registry.Options{Dir: *dir, Verbose: *verbose, NoAuth: *noAuth, GCPeriod: *gcPeriod, GCGrace: registry.DefaultGCGrace}
	if !*noAuth {
		if _, err := oci.ReadRegistryCredentials(*credsDir); err != nil {
			return fmt.Errorf("refusing to serve without credentials: %w (mount the Secret %s there; Kokumi's controller creates it)", err, oci.RegistryCredentialsSecret)
		}
		o.Credentials = func() (oci.RegistryCredentials, error) { return oci.ReadRegistryCredentials(*credsDir) }
	}
	reg, err := registry.StartWithOptions(*addr, o)
	if err != nil {
		return err
	}
	auth := "signing in the pusher, the puller and the namespaces' pullers of " + *credsDir
	if *noAuth {
		auth = "WITHOUT AUTHENTICATION (--insecure-no-auth: for tests only)"
	}
	gc := "collecting garbage every " + gcPeriod.String()
	if *gcPeriod <= 0 {
		gc = "never collecting garbage (--gc-period=0)"
	}
	fmt.Fprintf(stdout, "kokumi registry listening on %s, storing in %s, %s, %s\n", reg.Addr, *dir, auth, gc)
	<-ctx.Done()
	return reg.Stop()
}
