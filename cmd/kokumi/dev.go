package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/sandbox"
)

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev", stderr)
	stateDir := fs.String("state-dir", ".kokumi-dev", "directory of the local state and the kubeconfig")
	example := fs.String("example", "examples/multi-cluster", "kustomization applied at start")
	exampleNS := fs.String("example-namespace", "platform", "namespace the example is applied to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(stderr)))
	assets, err := sandbox.FindAssets()
	if err != nil {
		return err
	}
	state, err := filepath.Abs(*stateDir)
	if err != nil {
		return fmt.Errorf("resolve state directory: %w", err)
	}
	return sandbox.RunDev(ctx, sandbox.DevOptions{
		Assets:           assets,
		StateDir:         state,
		ExampleDir:       *example,
		ExampleNamespace: *exampleNS,
		Out:              stdout,
		RunController: func(ctx context.Context, cp *sandbox.ControlPlane) error {
			mgr, err := controller.NewManager(cp.Config, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: controller.DefaultConfig()})
			if err != nil {
				return err
			}
			return mgr.Start(ctx)
		},
	})
}
