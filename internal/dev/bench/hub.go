package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kscheme "github.com/kokumi-dev/kokumi/api/scheme"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
)

// The controller's identity, where the shipped config/rbac binds its roles.
const (
	ControllerNamespace      = "kokumi-system"
	ControllerServiceAccount = "kokumi-controller"
	// ControllerUser is the user name the API server knows the controller by.
	ControllerUser = "system:serviceaccount:" + ControllerNamespace + ":" + ControllerServiceAccount
)

// etcdQuota is etcd's backend quota: 8 GiB, room for 10,000 Applications written several times
// over before compaction (etcd's default is 2 GiB).
const etcdQuota = "8589934592"

// auditPolicy logs the metadata of every write the controller makes (the audit log is the
// exact count of its write requests, those that changed nothing too) and of every write of the
// admins (system:masters: the bare client, the ApplicationSet controller, the harness), so that
// the peers it is compared with pay the API server's audit as it does.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + ControllerUser + `"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: Metadata
  userGroups: ["system:masters"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// hub is a real kube-apiserver and etcd with Kokumi's, Argo CD's and (when found) the
// ApplicationSet CRD installed, auditing the controller's writes.
type hub struct {
	env *envtest.Environment
	// admin reaches the API server as a cluster admin, without client-side rate limits.
	admin *rest.Config
	// adminKubeconfig and controllerKubeconfig are kubeconfig files of the admin and of the
	// controller's ServiceAccount.
	adminKubeconfig, controllerKubeconfig string
	auditLog                              string
	assets                                sandbox.Assets
}

// hubOptions are how a hub differs from the default one.
type hubOptions struct {
	// appSetCRD, when not empty, is the ApplicationSet CRD to install too.
	appSetCRD string
	// bulk starts the API server without its watch cache (which would hold every object, some
	// 12 GB for 100,000 large Applications) and turns compaction off (a first list or stream
	// longer than the API server's 5-minute compaction interval would lose its revision).
	bulk bool
}

// startHub starts the hub with its files in dir.
func startHub(assets sandbox.Assets, dir string, o hubOptions) (*hub, error) {
	crds := filepath.Join(dir, "crds")
	if err := os.MkdirAll(crds, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", crds, err)
	}
	for _, f := range []string{"application-crd.yaml", "appproject-crd.yaml"} {
		if err := copyFile(filepath.Join(assets.ArgoCDCRDDir, f), filepath.Join(crds, f)); err != nil {
			return nil, err
		}
	}
	if o.appSetCRD != "" {
		if err := copyFile(o.appSetCRD, filepath.Join(crds, "applicationset-crd.yaml")); err != nil {
			return nil, err
		}
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, fmt.Errorf("write the audit policy: %w", err)
	}
	h := &hub{auditLog: filepath.Join(dir, "audit.log"), assets: assets}
	h.env = &envtest.Environment{
		BinaryAssetsDirectory: assets.BinDir,
		CRDDirectoryPaths:     []string{assets.KokumiCRDDir, crds},
		ErrorIfCRDPathMissing: true,
	}
	h.env.ControlPlane.Etcd = &envtest.Etcd{}
	h.env.ControlPlane.Etcd.Configure().Set("quota-backend-bytes", etcdQuota)
	api := h.env.ControlPlane.GetAPIServer().Configure()
	api.Set("audit-policy-file", policy)
	api.Set("audit-log-path", h.auditLog)
	api.Set("audit-log-format", "json")
	api.Set("audit-log-mode", "blocking")
	// One file, never rotated: by default it is rotated at 100 MB, which a run at 10,000 clusters
	// passes, and the writes before the rotation would go uncounted.
	api.Set("audit-log-maxsize", "0")
	if o.bulk {
		h.env.ControlPlane.Etcd.Configure().Set("auto-compaction-retention", "0")
		api.Set("watch-cache", "false")
		api.Set("etcd-compaction-interval", "0")
	}
	cfg, err := h.env.Start()
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", assets.BinDir, err)
	}
	h.admin = rest.CopyConfig(cfg)
	h.admin.QPS, h.admin.Burst = -1, 0
	h.admin.Timeout = time.Minute
	user, err := h.env.AddUser(envtest.User{Name: "kokumi-bench-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = h.stop()
		return nil, fmt.Errorf("add the admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		_ = h.stop()
		return nil, fmt.Errorf("render the admin's kubeconfig: %w", err)
	}
	h.adminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(h.adminKubeconfig, data, 0o600); err != nil {
		_ = h.stop()
		return nil, fmt.Errorf("write the admin's kubeconfig: %w", err)
	}
	return h, nil
}

func (h *hub) stop() error {
	if err := h.env.Stop(); err != nil {
		return fmt.Errorf("stop the hub: %w", err)
	}
	return nil
}

// installControllerRBAC applies the shipped config/rbac and writes a kubeconfig of the
// controller's ServiceAccount with a token the API server issued.
func (h *hub) installControllerRBAC(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, h.assets.Kubectl(), "--kubeconfig", h.adminKubeconfig, "apply", "-k", filepath.Join(h.assets.Root, "config", "rbac"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apply config/rbac: %w: %s", err, out)
	}
	sch, err := kscheme.New()
	if err != nil {
		return fmt.Errorf("scheme: %w", err)
	}
	admin, err := client.New(h.admin, client.Options{Scheme: sch})
	if err != nil {
		return fmt.Errorf("client of the hub: %w", err)
	}
	if err := sandbox.SpecWriterPolicyServes(ctx, admin, ControllerNamespace); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(h.admin)
	if err != nil {
		return fmt.Errorf("client of the hub: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ControllerServiceAccount, Namespace: ControllerNamespace}}
	if _, err := cs.CoreV1().ServiceAccounts(ControllerNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the controller's ServiceAccount: %w", err)
	}
	seconds := int64(6 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(ControllerNamespace).CreateToken(ctx, ControllerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("issue a token for the controller: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: h.admin.Host, CertificateAuthorityData: h.admin.CAData}
	kc.AuthInfos["kokumi-controller"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["kokumi-controller"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "kokumi-controller"}
	kc.CurrentContext = "kokumi-controller"
	h.controllerKubeconfig = filepath.Join(dir, "controller.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, h.controllerKubeconfig); err != nil {
		return fmt.Errorf("write the controller's kubeconfig: %w", err)
	}
	return nil
}

// auditEvent is the part of an audit event the count reads.
type auditEvent struct {
	Stage    string                    `json:"stage"`
	Verb     string                    `json:"verb"`
	User     struct{ Username string } `json:"user"`
	Received metav1.MicroTime          `json:"requestReceivedTimestamp"`
	Object   *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
}

// controllerWrites counts the controller's write requests the API server received in
// [from, to), from the audit log, by verb and resource ("update clusters/status").
func (h *hub) controllerWrites(from, to time.Time) (int64, map[string]int64, error) {
	f, err := os.Open(h.auditLog)
	if err != nil {
		return 0, nil, fmt.Errorf("open the audit log: %w", err)
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReaderSize(f, 1<<20)
	var total int64
	by := map[string]int64{}
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var ev auditEvent
			if jerr := json.Unmarshal(line, &ev); jerr == nil && ev.Stage == "ResponseComplete" && ev.User.Username == ControllerUser &&
				!ev.Received.Time.Before(from) && ev.Received.Time.Before(to) {
				total++
				what := ev.Verb
				if ev.Object != nil {
					what += " " + strings.TrimSuffix(ev.Object.Resource+"/"+ev.Object.Subresource, "/")
				}
				by[what]++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, nil, fmt.Errorf("read the audit log: %w", err)
		}
	}
	return total, by, nil
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("read %s: %w", from, err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", to, err)
	}
	return nil
}
