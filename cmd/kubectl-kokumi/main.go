// Command kubectl-kokumi is the kubectl plugin `kubectl kokumi`: put it on the PATH and run
// `kubectl kokumi --help`.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kokumi-dev/kokumi/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
