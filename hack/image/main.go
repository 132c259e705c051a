// Command image builds Kokumi's container image without a container runtime (see
// docs/image.md): an OCI image index of a static kokumi binary FROM scratch for each platform,
// with an SPDX SBOM attached to each platform's image as an OCI referrer. It pushes the image
// to a registry (--push REF) or writes an OCI image layout (--output DIR, the default), then
// prints the index digest and the reference.
//
//	go run ./hack/image [--push REF [--insecure] | --output DIR] [--platforms linux/amd64,linux/arm64]
//	                    [--version V] [--commit C]
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
	"time"

	"github.com/kokumi-dev/kokumi/internal/dev/imagebuild"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
	}
}

// run builds the image as args say, prints the digest and the reference on stdout and its
// progress on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	push := fs.String("push", "", "push the image to this reference (registry/repository[:tag]) instead of writing a layout")
	output := fs.String("output", "bin/image/kokumi", "write the image as an OCI image layout in this directory (replacing a layout there)")
	insecure := fs.Bool("insecure", false, "talk plain HTTP to the registry of --push (a registry on loopback)")
	platforms := fs.String("platforms", imagebuild.DefaultPlatforms, "comma-separated os/arch platforms of the image index")
	version := fs.String("version", "", "version linked into the binary and labelled on the image (default: git describe --tags --always --dirty, else dev)")
	commit := fs.String("commit", "", "commit linked into the binary and labelled on the image (default: git rev-parse HEAD)")
	dir := fs.String("C", ".", "root of Kokumi's module")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: go run ./hack/image [--push REF [--insecure] | --output DIR] [flags]")
		fmt.Fprintln(stderr, "Builds Kokumi's image reproducibly; SOURCE_DATE_EPOCH (default: the commit time) dates it.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	outputSet := false
	fs.Visit(func(f *flag.Flag) { outputSet = outputSet || f.Name == "output" })
	if *push != "" && outputSet {
		return fmt.Errorf("give --push or --output, not both")
	}
	if *insecure && *push == "" {
		return fmt.Errorf("--insecure only applies to --push")
	}
	ps, err := imagebuild.ParsePlatforms(*platforms)
	if err != nil {
		return err
	}
	if *version == "" {
		*version = imagebuild.GitVersion(*dir)
	}
	if *commit == "" {
		*commit = imagebuild.GitCommit(*dir)
	}
	created, err := imagebuild.SourceDateEpoch(*dir)
	if err != nil {
		return err
	}

	start := time.Now()
	im, err := imagebuild.Build(ctx, imagebuild.Options{
		Dir: *dir, Platforms: ps, Version: *version, Commit: *commit, Created: created, Log: stderr,
	})
	if err != nil {
		return err
	}
	digest, err := im.Digest()
	if err != nil {
		return err
	}

	var ref string
	if *push != "" {
		pushed, err := imagebuild.Push(ctx, im, *push, imagebuild.PushOptions{Insecure: *insecure})
		if err != nil {
			return err
		}
		ref = *push + "@" + pushed.DigestStr()
	} else {
		if _, err := imagebuild.WriteLayout(im, *output); err != nil {
			return err
		}
		ref = "oci:" + *output + ":" + im.Version
	}
	fmt.Fprintf(stderr, "done in %s\n", time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "digest: %s\nreference: %s\n", digest, ref)
	return nil
}
