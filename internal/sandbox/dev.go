package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
)

// DevOptions configures `kokumi dev`.
type DevOptions struct {
	// Assets are the binaries and CRDs to run from.
	Assets Assets
	// StateDir holds the kubeconfig and the local state.
	StateDir string
	// ExampleDir is a kustomization applied into ExampleNamespace at start.
	ExampleDir string
	// ExampleNamespace receives the example.
	ExampleNamespace string
	// Out receives what runs where and what to try.
	Out io.Writer
	// RunController runs Kokumi's controller against the control plane until ctx ends.
	RunController func(ctx context.Context, cp *ControlPlane) error
}

// RunDev starts a local control plane with Kokumi's and Argo CD's CRDs, applies the example,
// runs the controller, prints how to reach it, and stops everything when ctx ends.
func RunDev(ctx context.Context, o DevOptions) (err error) {
	cp, err := StartControlPlane(o.Assets)
	if err != nil {
		return err
	}
	defer func() {
		if stopErr := cp.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	kubeconfig := filepath.Join(o.StateDir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	kubectl := func(args ...string) error {
		cmd := exec.CommandContext(ctx, o.Assets.Kubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("kubectl %v: %w: %s", args, err, out.String())
		}
		return nil
	}
	if err := kubectl("create", "namespace", o.ExampleNamespace); err != nil {
		return err
	}
	if err := kubectl("apply", "-n", o.ExampleNamespace, "-k", o.ExampleDir); err != nil {
		return fmt.Errorf("apply the example: %w", err)
	}

	errc := make(chan error, 1)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { errc <- o.RunController(runCtx, cp) }()

	fmt.Fprintf(o.Out, `Kokumi runs on a local control plane.

  API server:  %s
  kubeconfig:  %s
  example:     %s applied in namespace %s

Try:
  export KUBECONFIG=%s
  %s get kokumi -n %s
  %s get order podinfo-edge -n %s -o yaml

Press Ctrl-C to stop; everything started here stops with it.
`, cp.Server(), kubeconfig, o.ExampleDir, o.ExampleNamespace, kubeconfig,
		o.Assets.Kubectl(), o.ExampleNamespace, o.Assets.Kubectl(), o.ExampleNamespace)

	select {
	case <-ctx.Done():
		cancel()
		<-errc
		fmt.Fprintln(o.Out, "stopping")
		return nil
	case err := <-errc:
		return fmt.Errorf("controller stopped: %w", err)
	}
}
