package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kokumi-dev/kokumi/internal/oci"
)

// runRegistry serves the bundled OCI registry until ctx ends.
func runRegistry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("registry", stderr)
	addr := fs.String("addr", ":5000", "address to listen on")
	dir := fs.String("dir", "/var/lib/kokumi/registry", "directory the registry stores its content in")
	verbose := fs.Bool("verbose", false, "log every request")
	htpasswd := fs.String("htpasswd", "", "htpasswd file (bcrypt) of the users who may pull and push; empty lets anyone who reaches it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	reg, err := oci.StartRegistryWithOptions(*addr, oci.RegistryOptions{Dir: *dir, Verbose: *verbose, HTPasswd: *htpasswd})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "kokumi registry listening on %s, storing in %s\n", reg.Addr, *dir)
	<-ctx.Done()
	return reg.Stop()
}
