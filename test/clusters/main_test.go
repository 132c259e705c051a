// Package clusters tests Kokumi's Cluster and Environment controllers against a real
// kube-apiserver (the hub, where Kokumi runs) and a second real kube-apiserver that plays a
// member cluster, and the roles and install manifests in config/.
package clusters

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/argocache"
	"github.com/kokumi-dev/kokumi/internal/controller/environment"

	kconfig "github.com/kokumi-dev/kokumi/internal/config"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/controller/clusters"
	"github.com/kokumi-dev/kokumi/test/harness"
)

// env is the hub: the cluster Kokumi runs in, with Kokumi's and Argo CD's CRDs.
var env *harness.Env

// member is a second real API server that plays a registered cluster.
var member *memberCluster

// config is what the controllers under test run with: a short probe period.
var config = kconfig.Config{
	Namespace:       "kokumi-system",
	ArgoCDNamespace: "argocd",
	LocalProject:    "kokumi-local",
	ProbePeriod:     2 * time.Second,
	// A deleted Cluster stops waiting for its Applications soon after its server is gone.
	UnreachableClusterDeletion: 6 * time.Second,
}

// waitTimeout bounds every wait: generous, for a loaded machine.
const waitTimeout = 60 * time.Second

func TestMain(m *testing.M) { harness.Main(suite{m}, &env) }

// suite sets up what every test shares around the tests of the package.
type suite struct{ m *testing.M }

func (s suite) Run() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := setUp(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "set up:", err)
		return 1
	}
	defer stop()
	return s.m.Run()
}

// setUp installs config/rbac on the hub, starts the member, and runs the Cluster and
// Environment controllers as the controller's own ServiceAccount, so that every test also
// proves the generated role suffices.
func setUp(ctx context.Context) (stop func(), err error) {
	var out io.Writer = &logs
	if os.Getenv("KOKUMI_TEST_LOG") != "" {
		out = io.MultiWriter(&logs, os.Stderr)
	}
	logf.SetLogger(zap.New(zap.WriteTo(out), zap.UseDevMode(true)))
	saConfig, err := env.ControllerConfig(ctx)
	if err != nil {
		return nil, err
	}
	member, err = startMember()
	if err != nil {
		return nil, err
	}
	scheme, err := kscheme.New()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(saConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if err := clusters.Setup(mgr, config); err != nil {
		return nil, err
	}
	argo, err := argocache.New(mgr, config)
	if err != nil {
		return nil, err
	}
	if err := environment.Setup(mgr, config, argo); err != nil {
		return nil, err
	}
	mgrCtx, mgrCancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	return func() {
		mgrCancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
		if err := member.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop member:", err)
		}
	}, nil
}

// logs holds every line the controllers logged, at every level, so that tests can check that
// no credential reached a log line. KOKUMI_TEST_LOG=1 also prints them.
var logs syncBuffer

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// memberCluster is a real kube-apiserver and etcd whose API server stops and starts again at
// the same address with the same certificates, so that the credentials Kokumi holds stay valid.
type memberCluster struct {
	env     *envtest.Environment
	certDir string
	// Server is the API server's URL.
	Server string
	// CA verifies the API server's serving certificate.
	CA []byte
	// Admin reaches it as a cluster admin.
	Admin *rest.Config
	// Version is what its /version says.
	Version string
}

func startMember() (*memberCluster, error) {
	dir, err := os.MkdirTemp("", "kokumi-member-")
	if err != nil {
		return nil, fmt.Errorf("create the member's directory: %w", err)
	}
	e := &envtest.Environment{BinaryAssetsDirectory: env.Assets.BinDir}
	// A directory of our own keeps the serving and ServiceAccount keys across a restart.
	e.ControlPlane.GetAPIServer().CertDir = dir
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("start the member's kube-apiserver and etcd: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client of the member: %w", err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("read the member's version: %w", err)
	}
	return &memberCluster{
		env:     e,
		certDir: dir,
		Server:  strings.TrimSuffix(cfg.Host, "/"),
		CA:      cfg.CAData,
		Admin:   cfg,
		Version: info.GitVersion,
	}, nil
}

// stopAPIServer stops the member's API server; etcd keeps its data.
func (m *memberCluster) stopAPIServer() error {
	if err := m.env.ControlPlane.APIServer.Stop(); err != nil {
		return fmt.Errorf("stop the member's kube-apiserver: %w", err)
	}
	return nil
}

// startAPIServer starts the member's API server again, at the same address.
func (m *memberCluster) startAPIServer() error {
	if err := m.env.ControlPlane.APIServer.Start(); err != nil {
		return fmt.Errorf("restart the member's kube-apiserver: %w", err)
	}
	return nil
}

func (m *memberCluster) stop() error {
	defer os.RemoveAll(m.certDir)
	return m.env.Stop()
}

// token issues a fresh token of the ServiceAccount kokumi/kokumi on the member, bound to
// cluster-admin there as Argo CD needs.
func (m *memberCluster) token(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(m.Admin, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kokumi"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kokumi", Namespace: "kokumi"}},
	}
	tok, err := harness.IssueToken(ctx, m.Admin, "kokumi", "kokumi")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return tok
}

// eventually polls cond every 200ms until it returns true, failing the test with the last
// explanation once waitTimeout passes.
func eventually(t *testing.T, what string, cond func() (ok bool, why string)) {
	t.Helper()
	var why string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true,
		func(context.Context) (bool, error) {
			var ok bool
			ok, why = cond()
			return ok, nil
		})
	if err != nil {
		t.Fatalf("%s: not within %v; last: %s", what, waitTimeout, why)
	}
}

// must is harness.Must: the test stops at an error.
var must = harness.Must
