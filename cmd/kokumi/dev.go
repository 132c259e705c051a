package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/internal/egress"
	"github.com/kokumi-dev/kokumi/internal/server"
)

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev", stderr)
	stateDir := fs.String("state-dir", ".kokumi-dev", "directory of the fleet's state, logs and kubeconfig; a second run resumes it")
	members := fs.String("members", strings.Join(sandbox.DefaultMembers, ","), "comma-separated names of the member clusters")
	example := fs.String("example", "examples/multi-cluster", "kustomization applied at start")
	exampleNS := fs.String("example-namespace", "platform", "namespace the example and the Environment edge live in")
	if err := fs.Parse(args); err != nil {
		return err
	}
	assets, err := sandbox.FindAssets()
	if err != nil {
		return err
	}
	state, err := filepath.Abs(*stateDir)
	if err != nil {
		return fmt.Errorf("resolve state directory: %w", err)
	}
	// The controller logs beside the fleet's processes, so that the terminal shows the fleet.
	logPath := filepath.Join(sandbox.LogDir(state), "kokumi-controller.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open controller log: %w", err)
	}
	defer logFile.Close()
	ctrl.SetLogger(zap.New(zap.WriteTo(logFile)))
	return sandbox.RunDev(ctx, sandbox.DevOptions{
		Assets:           assets,
		StateDir:         state,
		Members:          commaList(*members),
		ExampleDir:       *example,
		ExampleNamespace: *exampleNS,
		Out:              stdout,
		RunController: func(ctx context.Context, ids *sandbox.Identities, s sandbox.ControllerSettings) error {
			cfg := config.Default()
			cfg.Namespace = s.Namespace
			cfg.ArgoCDNamespace = s.ArgoCDNamespace
			cfg.BundledRegistry = s.Registry
			// Three members: probe them every 10 s, so that a stopped one is held within
			// about 13 s (docs/quickstart.md), not the 38 s of the default 30 s period.
			cfg.ProbePeriod = devProbePeriod
			// The controller runs on the host, beside what its gates check: loopback is allowed.
			cfg.VerifyAllowedCIDRs = egress.Loopback
			// As installed: the controller and the server are two managers, each as its own
			// ServiceAccount. The demo keeps its admin token, which writes as the server and so
			// may not approve; people may also sign in with a token of the hub.
			ctrlMgr, err := controller.NewManager(ids.Controller, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg})
			if err != nil {
				return err
			}
			ui := serverSetup(server.Options{Addr: s.UIAddr, AdminToken: s.UIToken, Namespace: cfg.Namespace, BundledRegistry: cfg.BundledRegistry})
			serverMgr, err := controller.NewManager(ids.Server, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg}, ui)
			if err != nil {
				return err
			}
			errc := make(chan error, 2)
			go func() { errc <- ctrlMgr.Start(ctx) }()
			go func() { errc <- serverMgr.Start(ctx) }()
			// The first to stop (ctx ended, or a failure) says why; the other stops with ctx.
			return <-errc
		},
	})
}

// devProbePeriod is how often `kokumi dev` probes its members.
const devProbePeriod = 10 * time.Second
