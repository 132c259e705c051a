// Package cli is the kubectl plugin `kubectl kokumi`: what people do with Kokumi from a
// terminal. It reads and writes as the kubeconfig's user (--kubeconfig, --context,
// -n/--namespace and the other flags work as they do for kubectl), so the API server's RBAC
// decides what each person may do, and it applies the same rules as Kokumi's API server: the
// cluster table of `status` is the UI's, `promote` and `rollback` make the server's checks
// (internal/stages.Manual), and `pause`, `resume` and `abort` follow the server's rule
// (internal/rollout.Ask).
package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/config"
)

// DisplayName is how the plugin is run.
const DisplayName = "kubectl kokumi"

// options are the flags every command shares.
type options struct {
	streams genericiooptions.IOStreams
	flags   *genericclioptions.ConfigFlags

	// argoCDNamespace is where Argo CD's Applications live.
	argoCDNamespace string
	// kokumiNamespace is where Kokumi runs: its public keys of deployment records.
	kokumiNamespace string
	// bundledRegistry is the bundled registry's address, as Kokumi is configured.
	bundledRegistry string
	// registryInsecure reaches the registries of artifacts and records over plain HTTP.
	registryInsecure bool
}

// NewCommand returns the root command of the plugin, writing to streams.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{streams: streams, flags: genericclioptions.NewConfigFlags(true)}
	defaults := config.Default()
	root := &cobra.Command{
		Use:   "kokumi",
		Short: "Look at and promote Kokumi's Servings and Preparations from a terminal",
		Long: `kubectl kokumi shows what Kokumi deploys and promotes Preparations by hand.

An Order renders Preparations (immutable OCI artifacts); its Serving, of the same name,
deploys one of them to every cluster of the Order's Environment. Every command acts as
the user of your kubeconfig: the Kubernetes RBAC of the namespace decides what you may do.
A kubeconfig user with a client certificate stays that user with --token (the API server
checks the certificate first): for a token, use a kubeconfig user without one (--user).`,
		Example: `  # Where does the Serving web of namespace shop stand, cluster by cluster?
  kubectl kokumi status web -n shop

  # Which Preparations has the Order web made, and where did they run?
  kubectl kokumi history web -n shop

  # What changes if web-7c9f is promoted over web-5b2a?
  kubectl kokumi diff web-5b2a web-7c9f -n shop --manifests

  # Which release of each Order does every cluster of the Environment prod run?
  kubectl kokumi fleet prod -n shop

  # How would a promotion roll out (waves, clusters, failure budget)?
  kubectl kokumi plan web -n shop

  # Promote it, or go back to what ran before
  kubectl kokumi promote web web-7c9f -n shop
  kubectl kokumi rollback web -n shop

  # Hold a roll-out where it stands, let it go on, or undo it
  kubectl kokumi pause web -n shop
  kubectl kokumi resume web -n shop
  kubectl kokumi abort web -n shop

  # How is delivery going: deployments, lead time, change failures, time to restore?
  kubectl kokumi dora -n shop --since 30d`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: DisplayName},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.flags.AddFlags(root.PersistentFlags())
	pf := root.PersistentFlags()
	pf.StringVar(&o.argoCDNamespace, "argocd-namespace", argocd.DefaultNamespace, "namespace of Argo CD's Applications")
	pf.StringVar(&o.kokumiNamespace, "kokumi-namespace", defaults.Namespace, "namespace Kokumi runs in (its public keys verify deployment records)")
	pf.StringVar(&o.bundledRegistry, "bundled-registry", defaults.BundledRegistry, "address of Kokumi's bundled registry, as Kokumi is configured")
	pf.BoolVar(&o.registryInsecure, "registry-insecure", false, "reach the registries of artifacts and deployment records over plain HTTP (loopback registries always are)")

	// The help flag exists before the arguments are read, so that `--help -n shop` is help.
	root.InitDefaultHelpFlag()
	root.AddCommand(newStatusCommand(o), newPromoteCommand(o), newRollbackCommand(o), newPauseCommand(o), newResumeCommand(o), newAbortCommand(o), newApproveCommand(o), newHistoryCommand(o), newDiffCommand(o), newVersionCommand(o), newClusterCommand(o))
	root.AddCommand(newPlanCommand(o), newFleetCommand(o), newDoraCommand(o))
	return root
}

// Run runs the plugin with args (without the program's name) and returns its exit code: 0 on
// success, 1 after printing the error to streams.ErrOut.
func Run(args []string, streams genericiooptions.IOStreams) int {
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(streams.ErrOut, "error: "+err.Error())
		return 1
	}
	return 0
}

// namespace is the namespace of -n, else the kubeconfig context's, else default.
func (o *options) namespace() (string, error) {
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("read the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// config is the client configuration of the kubeconfig and flags.
func (o *options) config() (*rest.Config, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("read the kubeconfig (see --kubeconfig and --context): %w", err)
	}
	return cfg, nil
}

// client returns a client of the kubeconfig's user, and the namespace to work in.
func (o *options) client() (client.Client, string, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, "", err
	}
	cfg, err := o.config()
	if err != nil {
		return nil, "", err
	}
	scheme, err := kscheme.New()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("connect to the API server at %s: %w", cfg.Host, err)
	}
	return c, ns, nil
}

// exactArgs accepts exactly the named arguments and says which are missing or extra.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		usage := strings.TrimSpace(cmd.CommandPath() + " " + strings.ToUpper(strings.Join(names, " ")))
		if len(args) < len(names) {
			return fmt.Errorf("missing %s: usage: %s (see --help)", strings.ToUpper(strings.Join(names[len(args):], " and ")), usage)
		}
		return fmt.Errorf("too many arguments (%s): usage: %s (see --help)", strings.Join(args[len(names):], " "), usage)
	}
}

// outputFormat checks -o.
func outputFormat(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return fmt.Errorf("unknown output format %q: use one of %s", format, strings.Join(allowed[1:], ", "))
}

// errWriter keeps the first write error, so that a table is written without checking each line.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
