//go:build e2e

// Package e2e drives a real local fleet (a hub and member kube-apiservers, kube-controller-manager,
// kube-scheduler and KWOK on each, real Argo CD, the bundled registry) through the spec's
// scenarios, with Kokumi's controller running against the hub, whose verification Jobs the
// hub's Job controller runs. Run it with `make e2e`.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/internal/egress"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/bundled"
	"github.com/kokumi-dev/kokumi/internal/render/isolate"
	"github.com/kokumi-dev/kokumi/internal/server"
)

// The fleet every test of the package drives, started once.
var (
	fleet  *sandbox.Fleet
	assets sandbox.Assets
	hub    client.Client
	demo   *sandbox.Demo
	// registryCreds are the bundled registry's pusher and puller.
	registryCreds oci.RegistryCredentials
	// kubeconfig has a context per cluster, the hub's current, for kubectl.
	kubeconfig string
)

func TestMain(m *testing.M) {
	isolate.MainIfChild() // a render the Order reconciler started: the test binary is its child
	os.Exit(run(m))
}

func run(m *testing.M) int {
	started := time.Now()
	var err error
	if assets, err = sandbox.FindAssets(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := assets.CheckFleet(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	v := assets.Versions()
	fmt.Printf("e2e: kubernetes %s, argo-cd %s, kwok %s, etcd %s\n", v["kubernetes"], v["argocd"], v["kwok"], v["etcd"])
	state, err := os.MkdirTemp("", "kokumi-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The controller's log, set before the fleet starts: envtest logs through it as it installs
	// the CRDs, and controller-runtime takes only the first logger it is given.
	logFile, err := controllerLog(state)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer logFile.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fleet, err = sandbox.StartFleet(ctx, sandbox.FleetOptions{
		Assets: assets, StateDir: state, Members: append(slices.Clone(sandbox.DefaultMembers), wideMembers...), Progress: os.Stdout,
	})
	defer func() {
		if err := fleet.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		if os.Getenv("KOKUMI_E2E_KEEP") == "" {
			_ = os.RemoveAll(state)
		} else {
			fmt.Println("e2e: state kept in", state)
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err, "(logs in", fleet.LogDir()+")")
		return 1
	}
	if hub, err = fleet.AdminClient(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The bundled registry signs in only the pusher and the puller of the hub's Secret.
	if registryCreds, err = fleet.RegistryCredentials(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if demo, err = fleet.PushDemo(ctx, assets.DemoChartDir()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kubeconfig = filepath.Join(state, "kubeconfig")
	if err := fleet.WriteKubeconfig(kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stopController, err := startController()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopController()
	// The controller keeps the bundled registry's puller for the API server; Argo CD gets each
	// namespace's puller once the namespace has Orders.
	if err := waitPullerSecret(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("e2e: fleet of %d members up in %s (logs in %s)\n", len(fleet.Members()), time.Since(started).Round(100*time.Millisecond), fleet.LogDir())
	code := m.Run()
	if rss, err := fleet.RSS(); err == nil {
		fmt.Printf("e2e: resident memory of the fleet: %d MiB\n", rss>>20)
	}
	fmt.Printf("e2e: took %s in all\n", time.Since(started).Round(time.Second))
	return code
}

// wideMembers join the e2e's fleet beside sandbox.DefaultMembers for the per-cluster
// comparison, which judges a wave of four clusters against a baseline of four: registered with
// wideLabel alone, which no other scenario's Environment selects, they stay out of the others.
var wideMembers = []string{"wide-1", "wide-2", "wide-3", "wide-4", "wide-5"}

// wideLabel is the label of the Clusters the per-cluster comparison's Environment selects.
const wideLabel = "fleet"

// edgeMembers returns the members the scenarios deploy to, by name: every member but
// wideMembers.
func edgeMembers() []*sandbox.Cluster {
	var out []*sandbox.Cluster
	for _, c := range fleet.Members() {
		if !slices.Contains(wideMembers, c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// uiToken logs in to the server the e2e runs beside the controller, at uiBase.
const uiToken = "e2e-token"

var uiBase string

// controllerLog creates the controller's log among the fleet's on state and makes it
// controller-runtime's.
func controllerLog(state string) (*os.File, error) {
	dir := sandbox.LogDir(state)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the fleet's log directory: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "kokumi-controller.log"))
	if err != nil {
		return nil, fmt.Errorf("create the controller's log: %w", err)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(f)))
	return f, nil
}

// startController runs Kokumi's controller and server against the hub, as `kokumi dev` does,
// with a short probe period so that a stopped member is noticed within seconds.
func startController() (stop func(), err error) {
	cfg := config.Default()
	cfg.Namespace = sandbox.KokumiNamespace
	cfg.ArgoCDNamespace = fleet.ArgoCDNamespace
	cfg.BundledRegistry = fleet.Registry
	cfg.ProbePeriod = 3 * time.Second
	// The controller runs on the host, beside the gates' endpoints: loopback is allowed.
	cfg.VerifyAllowedCIDRs = egress.Loopback
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the UI: %w", err)
	}
	uiBase = "http://" + ln.Addr().String()
	ui := func(mgr ctrl.Manager, shared controller.Shared) error {
		c := shared.Config
		return server.AddToManager(mgr, shared.ArgoCD, server.Options{AdminToken: uiToken, ArgoCDNamespace: c.ArgoCDNamespace, Namespace: c.Namespace, BundledRegistry: c.BundledRegistry}, ln)
	}
	mgr, err := controller.NewManager(fleet.Hub.Config, controller.Options{MetricsAddr: "0", ProbeAddr: "0", Config: cfg, Also: []controller.Setup{ui}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "controller:", err)
		}
	}, nil
}

// waitPullerSecret waits for the Secret of the puller the controller keeps for the API server
// in Kokumi's namespace, as it does installed.
func waitPullerSecret(ctx context.Context) error {
	key := client.ObjectKey{Namespace: sandbox.KokumiNamespace, Name: bundled.PullerSecret}
	deadline := time.Now().Add(time.Minute)
	for {
		var s corev1.Secret
		err := hub.Get(ctx, key, &s)
		if err == nil && string(s.Data["password"]) == registryCreds.Puller.Password {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("its password is not the puller's")
			}
			return fmt.Errorf("the controller did not keep the bundled registry's puller in %s: %w", key, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// member returns a clientset of a member cluster as its admin.
func member(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	c := fleet.Member(name)
	if c == nil {
		t.Fatalf("no member %s", name)
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// eventually polls cond every 250 ms until it returns nil or timeout passes, then fails with
// cond's last error.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
		last = cond(callCtx)
		callCancel()
		if last == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s: %v", what, timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
