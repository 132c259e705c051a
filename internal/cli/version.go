package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kokumi-dev/kokumi/internal/version"
)

// Program is the plugin's binary, as its version line names it.
const Program = "kubectl-kokumi"

func newVersionCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Long: `Print the version of this plugin, the commit it was built from, the Go version and the
platform. It reads no kubeconfig and reaches no cluster. Kokumi's own version is the one its
controller prints (kokumi version), or the tag of its image:

  kubectl -n kokumi-system get deployment kokumi-controller -o jsonpath='{.spec.template.spec.containers[0].image}'`,
		Example: `  kubectl kokumi version`,
		Args:    exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(o.streams.Out, version.Of(Program))
			return err
		},
	}
}
