package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
)

// DevOptions configures `kokumi dev`.
type DevOptions struct {
	// Assets are the binaries and CRDs to run from.
	Assets Assets
	// StateDir holds the fleet's state, its logs and the kubeconfig; a second run resumes it.
	StateDir string
	// Members names the member clusters (default edge-1, edge-2, edge-3).
	Members []string
	// ExampleDir is a kustomization applied into ExampleNamespace at start.
	ExampleDir string
	// ExampleNamespace receives the example; the Environment edge lives there.
	ExampleNamespace string
	// Out receives what runs where and what to try.
	Out io.Writer
	// RunController runs Kokumi's controller and its server against the hub, each as its own
	// identity of ids, until ctx ends.
	RunController func(ctx context.Context, ids *Identities, o ControllerSettings) error
}

// ControllerSettings is what Kokumi's controller must know of the fleet it runs in.
type ControllerSettings struct {
	// ArgoCDNamespace is where Argo CD runs on the hub.
	ArgoCDNamespace string
	// Namespace is Kokumi's own namespace on the hub.
	Namespace string
	// Registry is the host:port of the bundled registry.
	Registry string
	// UIAddr is the loopback address the API and UI listen on.
	UIAddr string
	// UIToken is the server's opt-in admin token: it logs in to the UI and writes as the
	// server's ServiceAccount, which may not approve.
	UIToken string
}

// DefaultMembers are the member clusters of `kokumi dev`.
var DefaultMembers = []string{"edge-1", "edge-2", "edge-3"}

// DemoPluginMember is the member `kokumi dev` leaves for the quickstart to register with the
// kubectl plugin (`kubectl kokumi cluster add edge-3 --label environment=edge`), as a person
// registers a cluster; it registers the others itself.
const DemoPluginMember = "edge-3"

// DemoEnvironment is the Environment `kokumi dev` sets up for the spec's example.
const DemoEnvironment = "edge"

// DemoStagingEnvironment is the stage the demo's Environment edge requires.
const DemoStagingEnvironment = "staging"

// DemoStagingOrder is the Order the demo adds to deploy the example's Product to staging.
const DemoStagingOrder = "podinfo-staging"

// DemoSoak is how long a release runs healthily in staging before edge takes it.
const DemoSoak = 20 * time.Second

// DemoProduct is the Product of the spec's example, which the demo points at the demo chart.
const DemoProduct = "podinfo-fleet"

// DemoTargetNamespace is the namespace the example deploys into on every member.
const DemoTargetNamespace = "podinfo"

// DemoApproverFile is the file, relative to a checkout, that makes the demo's second person:
// the ServiceAccount DemoApprover of the namespace platform, who reads it and approves its
// roll-outs (kokumi-approver), which the demo's admin token may not.
const DemoApproverFile = "examples/approver.yaml"

// DemoApprover is the ServiceAccount DemoApproverFile makes.
const DemoApprover = "approver"

// ApproverSteps are the kubectl commands (without kubectl) of the one command the demo prints
// to make the approver and a token to sign in with: apply DemoApproverFile, then create a token
// of DemoApprover in namespace.
func ApproverSteps(namespace string) [][]string {
	return [][]string{{"apply", "-f", DemoApproverFile}, {"create", "token", DemoApprover, "-n", namespace}}
}

// RunDev starts the local fleet, registers its members with Kokumi, sets up the Environment
// edge, applies the example, runs the controller, prints what runs where, and stops everything
// when ctx ends.
func RunDev(ctx context.Context, o DevOptions) (err error) {
	if len(o.Members) == 0 {
		o.Members = DefaultMembers
	}
	started := time.Now()
	fleet, err := StartFleet(ctx, FleetOptions{Assets: o.Assets, StateDir: o.StateDir, Members: o.Members, Progress: o.Out})
	defer func() {
		fmt.Fprintln(o.Out, "stopping the fleet")
		if stopErr := fleet.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	if err != nil {
		return err
	}
	demo, err := fleet.PushDemo(ctx, o.Assets.DemoChartDir())
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(o.StateDir, "kubeconfig")
	if err := fleet.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	if err := fleet.RegisterDemoClusters(ctx, DemoPluginMember); err != nil {
		return err
	}
	// A two-stage pipeline: staging (the first member) runs a release first; edge takes it once
	// it ran there healthily for DemoSoak.
	for _, e := range []EnvironmentSetup{
		{Name: DemoStagingEnvironment, Selector: map[string]string{StagingLabel: DemoStagingEnvironment}},
		{Name: DemoEnvironment, Requires: []v1.StageRequirement{{Environment: DemoStagingEnvironment, Soak: &metav1.Duration{Duration: DemoSoak}, Match: v1.MatchRelease}}},
	} {
		e.Namespace, e.Project, e.TargetNamespaces = o.ExampleNamespace, DemoEnvironment, []string{DemoTargetNamespace}
		if err := fleet.SetUpEnvironment(ctx, e); err != nil {
			return err
		}
	}
	if err := kubectl(ctx, o.Assets, kubeconfig, "apply", "-n", o.ExampleNamespace, "-k", o.ExampleDir); err != nil {
		return fmt.Errorf("apply the example: %w", err)
	}
	if err := fleet.StagingOrder(ctx, o.ExampleNamespace); err != nil {
		return err
	}
	// The example names podinfo's published chart; the demo points it at the same chart in the
	// bundled registry, so that it needs no internet.
	if err := kubectl(ctx, o.Assets, kubeconfig, "patch", "-n", o.ExampleNamespace, "product", DemoProduct, "--type=merge", "-p", demoProductPatch(demo)); err != nil {
		return fmt.Errorf("point the example at the demo chart: %w", err)
	}

	// The controller and the server run as their own ServiceAccounts, with the shipped roles.
	ids, err := InstallIdentities(ctx, fleet.Hub.Config, o.Assets.Root)
	if err != nil {
		return err
	}
	ui, err := fleet.ports.addr("ui")
	if err != nil {
		return err
	}
	tokenPath := filepath.Join(o.StateDir, "ui-token")
	token, err := loadOrCreateToken(tokenPath)
	if err != nil {
		return err
	}

	errc := make(chan error, 1)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		errc <- o.RunController(runCtx, ids, ControllerSettings{
			ArgoCDNamespace: fleet.ArgoCDNamespace, Namespace: KokumiNamespace, Registry: fleet.Registry,
			UIAddr: ui, UIToken: token,
		})
	}()

	printFleet(o, fleet, demo, kubeconfig, uiInfo{addr: ui, token: token, tokenPath: tokenPath}, time.Since(started))
	hub, err := fleet.AdminClient()
	if err != nil {
		return err
	}
	go reportDeployed(runCtx, hub, o.ExampleNamespace, o.Out, started)

	select {
	case <-ctx.Done():
		cancel()
		// The controller stops because ctx ended; its error says only that.
		if err := <-errc; err != nil && ctx.Err() == nil {
			return fmt.Errorf("controller stopped: %w", err)
		}
		return nil
	case err := <-errc:
		return fmt.Errorf("controller stopped: %w", err)
	}
}

// WriteKubeconfig writes a kubeconfig with one context per cluster (the hub's is the current
// one), each as a cluster admin.
func (f *Fleet) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	for _, c := range append([]*Cluster{f.Hub}, f.Members()...) {
		one, err := clientcmd.LoadFromFile(c.Kubeconfig)
		if err != nil {
			return fmt.Errorf("read kubeconfig of %s: %w", c.Name, err)
		}
		cfg.Clusters[c.Name] = one.Clusters[c.Name]
		cfg.AuthInfos[c.Name] = one.AuthInfos[c.Name]
		cfg.Contexts[c.Name] = one.Contexts[c.Name]
	}
	cfg.CurrentContext = f.Hub.Name
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// kubectl runs the built kubectl against kubeconfig.
func kubectl(ctx context.Context, a Assets, kubeconfig string, args ...string) error {
	cmd := exec.CommandContext(ctx, a.Kubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

// loadOrCreateToken reads the UI token kept at path, or makes one and keeps it there, so that
// a restarted fleet logs in with the same token.
func loadOrCreateToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil && len(bytes.TrimSpace(data)) > 0 {
		return string(bytes.TrimSpace(data)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read the UI token: %w", err)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a UI token: %w", err)
	}
	token := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the UI token: %w", err)
	}
	return token, nil
}

// uiInfo is where the UI listens and how to log in.
type uiInfo struct{ addr, token, tokenPath string }

func printFleet(o DevOptions, f *Fleet, demo *Demo, kubeconfig string, ui uiInfo, took time.Duration) {
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nKokumi runs on a local fleet (up in %s; state in %s).\n\n", took.Round(100*time.Millisecond), o.StateDir)
	fmt.Fprintf(w, "CLUSTER\tAPI SERVER\tRUNS\n")
	fmt.Fprintf(w, "hub\t%s\tKokumi's controller and server (%s), argocd-application-controller, argocd-repo-server (%s), redis (%s), the bundled registry (%s), kube-controller-manager (garbage collector, namespace, ClusterRole aggregation, Job, TTL after finished, ServiceAccount, node lifecycle), kube-scheduler, KWOK (node %s: verification Jobs run there)\n", f.Hub.Server, ui.addr, f.RepoServer, f.Redis, f.Registry, NodeName)
	for _, m := range f.Members() {
		fmt.Fprintf(w, "%s\t%s\tkube-controller-manager, kube-scheduler, KWOK (node %s)\n", m.Name, m.Server, NodeName)
	}
	_ = w.Flush()
	pids := f.Pids()
	names := make([]string, 0, len(pids))
	for n := range pids {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(o.Out, "\nThe bundled registry holds the demo chart %s:%s (%s)\nand its image %s (%s);\nit signs in only Kokumi's pusher and Argo CD's puller (Secret %s/%s on the hub).\n",
		demo.ChartURL, demo.ChartVersion, demo.ChartDigest, demo.Image, demo.ImageDigest, KokumiNamespace, oci.RegistryCredentialsSecret)
	fmt.Fprintf(o.Out, "\nProcesses (logs in %s):\n", f.LogDir())
	for _, n := range names {
		fmt.Fprintf(o.Out, "  %-40s pid %d\n", n, pids[n])
	}
	k := o.Assets.Kubectl()
	ns := o.ExampleNamespace
	fmt.Fprintf(o.Out, `
Versions: %s
UI: http://%s (token %s, kept in %s: the server's admin token, which may not approve)
Kubeconfig: %s (contexts: hub, %s)

Try:
  export KUBECONFIG=%s PATH=%s:$PATH
  %s kokumi cluster add %s --label %s=%s   # register %s with the plugin, bin/kubectl-kokumi
  %s get clusters,environments -A
  %s get orders,servings -n %s        # staging runs each release first; edge takes it after a %s soak
  %s get serving podinfo-edge -n %s -o wide
  %s get serving podinfo-edge -n %s \
    -o jsonpath='{range .status.targets[*]}{.cluster}{"\t"}{.conditions[0].reason}{"\t"}{.revision}{"\n"}{end}'   # the clusters not healthy: none prints nothing
  %s -n %s get applications -l delivery.kokumi.dev/serving=podinfo-edge,delivery.kokumi.dev/serving-namespace=%s
  %s --context edge-1 get deployments,pods -n %s
  %s   # a second person, who may approve: sign in to the UI with the token it prints

Press Ctrl-C to stop; everything started here stops with it.
`, formatVersions(o.Assets.Versions()), ui.addr, ui.token, ui.tokenPath, kubeconfig, strings.Join(memberNames(f), ", "),
		kubeconfig, filepath.Join(o.Assets.Root, "bin"), k, DemoPluginMember, EnvironmentLabel, DemoEnvironment, DemoPluginMember, k, k, ns, DemoSoak, k, ns, k, ns, k, f.ArgoCDNamespace, ns, k, DemoTargetNamespace, approverCommand(k, ns))
}

// approverCommand is the one command, with kubectl k, of ApproverSteps.
func approverCommand(k, namespace string) string {
	var steps []string
	for _, s := range ApproverSteps(namespace) {
		steps = append(steps, k+" "+strings.Join(s, " "))
	}
	return strings.Join(steps, " && ")
}

func memberNames(f *Fleet) []string {
	var out []string
	for _, m := range f.Members() {
		out = append(out, m.Name)
	}
	return out
}

func formatVersions(v map[string]string) string {
	var parts []string
	for _, k := range []string{"kubernetes", "etcd", "argocd", "kwok"} {
		if v[k] != "" {
			parts = append(parts, k+" "+v[k])
		}
	}
	return strings.Join(parts, ", ")
}
