// Package harness starts a real kube-apiserver and etcd, with Kokumi's CRDs and Argo CD's real
// CRDs installed, for the tests of one package. Start it once in TestMain.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kokumi-dev/kokumi/internal/controller"
	"github.com/kokumi-dev/kokumi/internal/sandbox"
)

// Env is a running control plane and an admin client for it.
type Env struct {
	*sandbox.ControlPlane
	// Assets are the binaries and CRDs it runs from.
	Assets sandbox.Assets
	// Scheme knows the built-in kinds and Kokumi's.
	Scheme *runtime.Scheme
	// Client is a cluster admin.
	Client client.Client
	// Kubeconfig is a kubeconfig file for the admin, for kubectl.
	Kubeconfig string

	tmp string
}

// Start starts a control plane with every CRD installed.
func Start() (*Env, error) {
	assets, err := sandbox.FindAssets()
	if err != nil {
		return nil, err
	}
	cp, err := sandbox.StartControlPlane(assets)
	if err != nil {
		return nil, err
	}
	scheme, err := controller.NewScheme()
	if err != nil {
		_ = cp.Stop()
		return nil, err
	}
	e := &Env{ControlPlane: cp, Assets: assets, Scheme: scheme}
	e.Client, err = client.New(cp.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("create client: %w", err)
	}
	e.tmp, err = os.MkdirTemp("", "kokumi-harness-")
	if err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("create temporary directory: %w", err)
	}
	e.Kubeconfig = filepath.Join(e.tmp, "kubeconfig")
	if err := cp.WriteKubeconfig(e.Kubeconfig); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

// Stop stops the control plane and removes its files.
func (e *Env) Stop() error {
	err := e.ControlPlane.Stop()
	if e.tmp != "" {
		_ = os.RemoveAll(e.tmp)
	}
	return err
}

// Kubectl runs the built kubectl against the control plane and returns its standard output.
func (e *Env) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.Assets.Kubectl(), append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %v: %w: %s", args, err, stderr.String())
	}
	return stdout.String(), nil
}

// CreateNamespace creates a namespace, or does nothing if it exists.
func (e *Env) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// Main starts a control plane, runs the package's tests, stops it and exits. Use it from TestMain:
//
//	func TestMain(m *testing.M) { harness.Main(m, &env) }
func Main(m interface{ Run() int }, env **Env) {
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start test control plane:", err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop test control plane:", err)
	}
	os.Exit(code)
}

// RunWithManager starts mgr, runs the tests, then stops mgr and waits for it, returning the
// tests' exit code.
func RunWithManager(ctx context.Context, mgr interface{ Start(context.Context) error }, run func() int) int {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	code := run()
	cancel()
	<-done
	return code
}
