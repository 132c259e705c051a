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

	"github.com/kokumi-dev/kokumi/internal/render/isolate"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
	"github.com/kokumi-dev/kokumi/internal/whoami"
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
	// AdminName is how the API server names the writes of Client: a fixture that sets a
	// Serving's spec.preparationName as the admin names it in spec.promotedBy, as the shipped
	// admission policy kokumi-serving-approval asks.
	AdminName string
	// Kubeconfig is a kubeconfig file for the admin, for kubectl.
	Kubeconfig string

	tmp string
	// aggregating says whether the ClusterRole aggregation controller runs.
	aggregating bool
}

// Start starts a control plane with every CRD installed.
func Start() (*Env, error) { return start(true) }

// StartWithoutArgoCD starts a control plane with Kokumi's CRDs only; InstallArgoCDCRDs adds
// Argo CD's later.
func StartWithoutArgoCD() (*Env, error) { return start(false) }

func start(argoCD bool) (*Env, error) {
	assets, err := sandbox.FindAssets()
	if err != nil {
		return nil, err
	}
	run := assets
	if !argoCD {
		run.ArgoCDCRDDir = ""
	}
	cp, err := sandbox.StartControlPlane(run)
	if err != nil {
		return nil, err
	}
	scheme, err := kscheme.New()
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
	if e.AdminName, err = whoami.Name(context.Background(), cp.Config); err != nil {
		_ = cp.Stop()
		return nil, err
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
	isolate.MainIfChild() // a render the Order reconciler started: the test binary is its child
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

// ControllerNamespace and ControllerServiceAccount are where the shipped config/rbac binds
// the controller's roles.
const (
	ControllerNamespace      = "kokumi-system"
	ControllerServiceAccount = "kokumi-controller"
)

// ControllerConfig installs the shipped RBAC (config/rbac) and returns a client configuration
// that authenticates as the controller's ServiceAccount with a token the API server issued: a
// manager run with it has exactly the rights the install gives Kokumi, so that a missing verb
// fails the tests (and an extra one shows in the generated role's diff). Argo CD's namespace
// must be "argocd", where config/rbac's Roles are.
func (e *Env) ControllerConfig(ctx context.Context) (*rest.Config, error) {
	for _, ns := range []string{ControllerNamespace, "argocd"} {
		if err := e.CreateNamespace(ctx, ns); err != nil {
			return nil, err
		}
	}
	if out, err := e.Kubectl(ctx, "apply", "-k", filepath.Join(e.Assets.Root, "config", "rbac")); err != nil {
		return nil, fmt.Errorf("apply config/rbac: %w: %s", err, out)
	}
	if err := sandbox.SpecWriterPolicyServes(ctx, e.Client, ControllerNamespace); err != nil {
		return nil, err
	}
	return ServiceAccountConfig(ctx, e.Config, ControllerNamespace, ControllerServiceAccount)
}

// ServiceAccountConfig is a client configuration that authenticates as the ServiceAccount
// with a token the API server issues for it.
func ServiceAccountConfig(ctx context.Context, admin *rest.Config, namespace, name string) (*rest.Config, error) {
	tok, err := IssueToken(ctx, admin, namespace, name)
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tok
	return cfg, nil
}

// IssueToken asks the API server of admin for a token of the ServiceAccount, valid for a few
// hours, creating the ServiceAccount (and its namespace) if missing.
func IssueToken(ctx context.Context, admin *rest.Config, namespace, name string) (string, error) {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return "", fmt.Errorf("client for %s: %w", admin.Host, err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create service account %s/%s: %w", namespace, name, err)
	}
	seconds := int64(6 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("issue a token for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// InstallArgoCDCRDs installs Argo CD's CRDs and waits until the API server serves them.
func (e *Env) InstallArgoCDCRDs() error {
	if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{Paths: []string{e.Assets.ArgoCDCRDDir}, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("install Argo CD's CRDs from %s: %w", e.Assets.ArgoCDCRDDir, err)
	}
	return nil
}
