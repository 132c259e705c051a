// Package orders tests the Order reconciler against a real kube-apiserver and real OCI
// registries on loopback: Orders render Products into Preparations and keep their Servings.
package orders

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/config"
	"github.com/kokumi-dev/kokumi/internal/controller/gc"
	orderctrl "github.com/kokumi-dev/kokumi/internal/controller/order"
	"github.com/kokumi-dev/kokumi/internal/controller/registrycreds"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var (
	env *harness.Env
	// bundled plays the bundled registry: Preparations are pushed there.
	bundled *registry.Registry
	// cfg is the controller's configuration.
	cfg config.Config
	// bundledDir holds its content, so that it can be stopped and started again.
	bundledDir string
)

// waitTimeout bounds every wait: generous, for a loaded machine.
const waitTimeout = 60 * time.Second

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(suite{m}, &env)
}

type suite struct{ m *testing.M }

// annotationHold makes holdGate hold an Order's promotion, with the annotation's value as why.
const annotationHold = "test.kokumi.dev/hold"

// holdGate plays a promotion pipeline: it holds Orders annotated with annotationHold.
func holdGate(_ context.Context, o *v1.Order, _ *v1.Preparation) (promotion.Verdict, error) {
	if why, ok := o.Annotations[annotationHold]; ok {
		return promotion.Verdict{Message: why}, nil
	}
	return promotion.Verdict{Allowed: true}, nil
}

// Run starts the bundled registry and a manager with the Order reconciler around the tests.
func (s suite) Run() int {
	var err error
	bundledDir, err = os.MkdirTemp("", "kokumi-bundled-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(bundledDir) }()
	bundled, err = startBundled("127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = bundled.Stop() }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg = config.Default()
	cfg.BundledRegistry = bundled.Addr
	// A render that never ends is killed within seconds here (hostile_test.go), and a chart of
	// 12,000 objects reaches its objects budget before, under load too (budget_test.go).
	cfg.RenderBudgets.Timeout = 15 * time.Second
	cfg.RenderBudgets.Memory = 256 << 20
	if err := env.CreateNamespaces(ctx, cfg.Namespace, cfg.ArgoCDNamespace); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The reconciler runs as the controller's ServiceAccount with the shipped RBAC: a verb the
	// install does not grant fails the tests.
	sa, err := env.ControllerConfig(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := ctrl.NewManager(sa, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		// The tests of movedNamespace run Order reconcilers of their own.
		Cache: cache.Options{DefaultFieldSelector: fields.OneTermNotEqualSelector("metadata.namespace", movedNamespace)}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r := &orderctrl.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("kokumi-order"), Config: cfg,
		RetryAfter: 2 * time.Second, Resync: 3 * time.Second, TagTTL: time.Second, Gate: holdGate}
	if err := r.SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The controller creates the bundled registry's credentials at start, as it does installed.
	if err := registrycreds.Setup(mgr, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Old Preparations are collected, with their artifacts, as installed (history 10).
	if err := gc.Setup(mgr, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return harness.RunWithManager(ctx, mgr, s.m.Run)
}

// startBundled runs the bundled registry as Kokumi ships it, authentication on: it signs in the
// pusher and the puller of the Secret the controller creates at start, read from the API server
// (until then nobody gets in).
func startBundled(addr string) (*registry.Registry, error) {
	return registry.StartWithOptions(addr, registry.Options{Dir: bundledDir, Credentials: func() (oci.RegistryCredentials, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var s corev1.Secret
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: oci.RegistryCredentialsSecret}, &s); err != nil {
			return oci.RegistryCredentials{}, err
		}
		return oci.ParseRegistryCredentials(s.Data)
	}})
}
