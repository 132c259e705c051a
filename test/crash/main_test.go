// Package crash kills Kokumi's controller process with SIGKILL at random points while it rolls
// a Serving out to 1,000 Clusters and while it moves them to another Preparation, restarts it
// each time, and checks that it converges: exactly one Application per selected Cluster, at the
// right revision, none left for a Cluster that left, and a status that counts them right. It
// runs the built `kokumi controller` against a real kube-apiserver and etcd, as the controller's
// ServiceAccount with the shipped RBAC; the tests play Argo CD by writing the Applications'
// status, and one TLS server plays the member clusters' API servers.
package crash

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	ociregistry "github.com/kokumi-dev/kokumi/internal/oci/registry"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kokumi-dev/kokumi/internal/dev/bench"
	"github.com/kokumi-dev/kokumi/test/harness"
)

var (
	env *harness.Env
	// kokumiBin is the kokumi binary built from this tree.
	kokumiBin string
	// controllerKubeconfig reaches the control plane as the controller's ServiceAccount.
	controllerKubeconfig string
	// logDir holds the controller's log, one file per test, kept when a test fails.
	logDir string
	// registry is the bundled registry: it holds the Preparations' artifacts and their
	// deployment records.
	registry *ociregistry.Registry
	// servers plays the member clusters' API servers.
	servers *bench.Members
)

func TestMain(m *testing.M) {
	harness.QuietLogs()
	harness.Main(suite{m}, &env)
}

// suite builds the binary and starts what every test shares around the tests of the package.
type suite struct{ m *testing.M }

func (s suite) Run() int {
	code, err := s.run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "set up:", err)
		return 1
	}
	return code
}

func (s suite) run() (int, error) {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "kokumi-crash-")
	if err != nil {
		return 0, fmt.Errorf("create a temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	kokumiBin = filepath.Join(tmp, "kokumi")
	build := exec.Command("go", "build", "-o", kokumiBin, "github.com/kokumi-dev/kokumi/cmd/kokumi")
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("go build cmd/kokumi: %w: %s", err, out)
	}
	if logDir, err = os.MkdirTemp("", "kokumi-crash-logs-"); err != nil {
		return 0, fmt.Errorf("create the log directory: %w", err)
	}
	if registry, err = ociregistry.Start("127.0.0.1:0", filepath.Join(tmp, "registry"), false); err != nil {
		return 0, err
	}
	defer func() { _ = registry.Stop() }()
	if servers, err = bench.StartMembers(); err != nil {
		return 0, err
	}
	defer servers.Close()
	sa, err := env.ControllerConfig(ctx)
	if err != nil {
		return 0, err
	}
	controllerKubeconfig = filepath.Join(tmp, "controller.kubeconfig")
	if err := writeKubeconfig(controllerKubeconfig, sa); err != nil {
		return 0, err
	}
	code := s.m.Run()
	if code == 0 {
		_ = os.RemoveAll(logDir)
	} else {
		fmt.Fprintln(os.Stderr, "the controller's logs are kept in", logDir)
	}
	return code, nil
}

// writeKubeconfig writes a kubeconfig that reaches cfg's server with its CA and bearer token.
func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos["kokumi-controller"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kokumi-controller"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "kokumi-controller"}
	kc.CurrentContext = "kokumi-controller"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write the controller's kubeconfig: %w", err)
	}
	return nil
}
