// Command kokumi is Kokumi's one binary: the controller, the API and UI server, the local fleet,
// the bundled registry, the public key of deployment records, the admission check of
// Applications, and its version.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kokumi-dev/kokumi/internal/render/isolate"

	"github.com/kokumi-dev/kokumi/internal/version"
)

const usage = `kokumi turns intent into immutable artifacts and deploys them through Argo CD.

Usage:
  kokumi controller [flags]   run the controller manager
  kokumi server [flags]       serve the API and the web UI
  kokumi dev [flags]          run a local control plane with Kokumi (make demo)
  kokumi registry [flags]     serve the bundled OCI registry
  kokumi public-key [flags]   print the public key that verifies deployment records
  kokumi admission [flags]    serve the admission check of Argo CD Applications (records required by stages)
  kokumi version              print the version

Run "kokumi <command> -h" for a command's flags.
`

func main() {
	isolate.MainIfChild() // a render, in a process of its own: it exits
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode is 0 for success and for -h/--help (a command printed its flags), 1 otherwise, when
// it says what failed.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintln(stderr, "kokumi:", err)
		return 1
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("no command given")
	}
	switch args[0] {
	case "controller":
		return runController(ctx, args[1:], stderr)
	case "server":
		return runServer(ctx, args[1:], stderr)
	case "dev":
		return runDev(ctx, args[1:], stdout, stderr)
	case "registry":
		return runRegistry(ctx, args[1:], stdout, stderr)
	case "admission":
		return runAdmission(ctx, args[1:], stderr)
	case "public-key":
		return runPublicKey(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version.String())
		return nil
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kokumi "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
