// Package cli tests the kubectl plugin `kubectl kokumi` against a real API server with Kokumi's
// and Argo CD's CRDs: the objects are created as the controller would leave them (status
// through the status subresource), no controller runs, and the commands run in-process with a
// kubeconfig file, as a person's terminal would run them.
package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cli"
	"github.com/kokumi-dev/kokumi/test/harness"
)

const argoNS = "argocd"

var (
	env *harness.Env
	// adminKubeconfig is a kubeconfig file of a cluster admin, written from env's rest.Config.
	adminKubeconfig string
)

func TestMain(m *testing.M) { harness.Main(setup{m}, &env) }

// setup prepares what every test uses around the tests: Argo CD's namespace, the standard
// roles filled with Kokumi's, and the admin's kubeconfig.
type setup struct{ m *testing.M }

func (s setup) Run() int {
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, argoNS); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := env.AggregateTenantRoles(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "kokumi-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	adminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := writeKubeconfig(adminKubeconfig, env.Config, "default"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// No docker config of the machine running the tests is read.
	if err := os.Setenv("DOCKER_CONFIG", dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return s.m.Run()
}

// writeKubeconfig writes a kubeconfig file that reaches the API server of cfg as its user,
// in namespace.
func writeKubeconfig(path string, cfg *rest.Config, namespace string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "user", Namespace: namespace}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// result is what one run of the plugin printed and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

// kubectlKokumi runs the plugin in-process with args, as the admin unless args name another
// --kubeconfig.
func kubectlKokumi(t *testing.T, args ...string) result {
	t.Helper()
	hasKubeconfig := false
	for _, a := range args {
		if a == "--kubeconfig" || strings.HasPrefix(a, "--kubeconfig=") {
			hasKubeconfig = true
		}
	}
	if !hasKubeconfig {
		args = append(args, "--kubeconfig", adminKubeconfig)
	}
	var in, out, errOut bytes.Buffer
	code := cli.Run(args, genericiooptions.IOStreams{In: &in, Out: &out, ErrOut: &errOut})
	t.Logf("kubectl kokumi %s → %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// must is harness.Must: the test stops at an error.
var must = harness.Must

// namespace creates a namespace for one test.
func namespace(t *testing.T, name string) string {
	t.Helper()
	must(t, env.CreateNamespace(context.Background(), name))
	return name
}

// order creates an Order of Environment environment with the given promotion mode.
func order(t *testing.T, ns, name, environment string, mode v1.PromotionMode) {
	t.Helper()
	o := &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: environment},
		Promotion: v1.Promotion{Mode: mode},
	}}
	must(t, env.Client.Create(context.Background(), o))
}

// serving creates the Serving of an Order, deploying prep (which may be empty).
func serving(t *testing.T, ns, name, prep string) *v1.Serving {
	t.Helper()
	s := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: name}, PreparationName: prep, PromotedBy: env.AdminName,
	}}
	must(t, env.Client.Create(context.Background(), s))
	return s
}

// prepSpec describes a Preparation to create.
type prepSpec struct {
	order, version, targetNamespace, configHash string
	// values is spec.configurationDigest, the digest of the Product's values; "" for none.
	values string
	// artifact is the repository (host/path) and digest of its artifact.
	repository, digest string
	images             []v1.ImagePin
	// ready is the Ready condition's status; "" leaves the Preparation unchecked.
	ready   metav1.ConditionStatus
	reason  string
	records []v1.DeploymentRecord
	// provenance is spec.provenance; nil for none.
	provenance *v1.PreparationProvenance
}

// digest is a sha256 digest of one repeated hex digit.
func digest(c string) string { return "sha256:" + strings.Repeat(c, 64) }

// preparation creates a Preparation and writes its status as the Order reconciler would.
func preparation(t *testing.T, ns, name string, p prepSpec) {
	t.Helper()
	ctx := context.Background()
	if p.version == "" {
		p.version = "6.1.0"
	}
	if p.targetNamespace == "" {
		p.targetNamespace = "podinfo"
	}
	if p.configHash == "" {
		p.configHash = "hash-" + name
	}
	if p.repository == "" {
		p.repository = "registry.example/" + ns + "/" + p.order
	}
	if p.digest == "" {
		p.digest = digest("a")
	}
	prep := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: p.order}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: p.version, Digest: digest("5")},
		TargetNamespace: p.targetNamespace, Images: p.images,
		Artifact:   v1.Artifact{Ref: "oci://" + p.repository + "@" + p.digest, Digest: p.digest},
		ConfigHash: p.configHash, ConfigurationDigest: p.values, Provenance: p.provenance,
	}}
	must(t, env.Client.Create(ctx, prep))
	if p.ready != "" {
		reason := p.reason
		if reason == "" {
			reason = v1.ReasonRendered
		}
		apimeta.SetStatusCondition(&prep.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: p.ready, Reason: reason, Message: "as the test says"})
	}
	prep.Status.DeploymentRecords = p.records
	if p.ready != "" || len(p.records) > 0 {
		must(t, env.Client.Status().Update(ctx, prep))
	}
}

// record is a deployment record of the Environment prod on n clusters at t.
func record(n int32, at time.Time) v1.DeploymentRecord {
	return v1.DeploymentRecord{Environment: "prod", Clusters: n, Time: metav1.NewTime(at.UTC().Truncate(time.Second)), Digest: digest("d")}
}

// nextSecond waits for the next second of the API server's creation timestamps, so that the
// next object is newer than the last.
func nextSecond() {
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
}

// servingOf reads a Serving.
func servingOf(t *testing.T, ns, name string) *v1.Serving {
	t.Helper()
	var s v1.Serving
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s))
	return &s
}

// application creates the Argo CD Application Kokumi would keep for a Serving on cluster, with
// the status Argo CD would write.
func application(t *testing.T, ns, serving, cluster, health, sync, revision, message string, since time.Time) {
	t.Helper()
	_, err := env.CreateApplication(context.Background(), argoNS, ns, serving, cluster,
		harness.AppStatus{Health: health, Sync: sync, Revision: revision, Message: message, Since: since})
	must(t, err)
}
