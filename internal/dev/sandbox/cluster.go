package sandbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed" // the fleet's KWOK stages
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is one cluster of the fleet: a real kube-apiserver on loopback, kube-controller-manager,
// kube-scheduler and KWOK, so that Pods are scheduled to a simulated node and run there: on a
// member, Deployments roll out and their Pods turn Ready; on the hub, verification Jobs run to
// success or failure.
type Cluster struct {
	// Name is the cluster's name (hub, edge-1, ...).
	Name string
	// Server is the API server's URL.
	Server string
	// Kubeconfig is a kubeconfig file for a cluster admin.
	Kubeconfig string
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// CAData is the PEM certificate of the authority the API server's certificate is signed by.
	CAData []byte
	// Identity is the client certificate of the identity Kokumi and Argo CD use on a member:
	// the credentials an admin registers the cluster with.
	Identity keyPair

	member bool
	dir    string
	ca     *authority
	admin  keyPair

	mu    sync.Mutex
	procs []*process
}

// Member reports whether the cluster is a member (and not the hub).
func (c *Cluster) Member() bool { return c.member }

// IdentityKubeconfig returns a kubeconfig for the identity Kokumi and Argo CD use on the cluster.
func (c *Cluster) IdentityKubeconfig() ([]byte, error) {
	return kubeconfigBytes(c.Name, c.Server, c.CAData, c.Identity)
}

// prepareCluster creates (or loads) the certificates and kubeconfig of a cluster.
func prepareCluster(stateDir, name string, member bool, ports *portBook) (*Cluster, error) {
	dir := filepath.Join(stateDir, "clusters", name)
	ca, err := loadOrCreateAuthority(filepath.Join(dir, "pki"), name)
	if err != nil {
		return nil, err
	}
	port, err := ports.port("apiserver-" + name)
	if err != nil {
		return nil, err
	}
	admin, err := ca.client("admin", "kokumi-admin", "system:masters")
	if err != nil {
		return nil, err
	}
	identity, err := ca.client("fleet-identity", "kokumi-fleet", "system:masters")
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Name:       name,
		Server:     fmt.Sprintf("https://127.0.0.1:%d", port),
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
		CAData:     ca.certPEM,
		Identity:   identity,
		member:     member,
		dir:        dir,
		ca:         ca,
		admin:      admin,
	}
	data, err := kubeconfigBytes(name, c.Server, c.CAData, admin)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.Kubeconfig, data, 0o600); err != nil {
		return nil, fmt.Errorf("write kubeconfig of %s: %w", name, err)
	}
	c.Config = &rest.Config{
		Host:            c.Server,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData, CertData: admin.CertPEM, KeyData: admin.KeyPEM},
		QPS:             50,
		Burst:           100,
	}
	return c, nil
}

// kubeconfigBytes renders a kubeconfig whose only context reaches server as the client of kp.
func kubeconfigBytes(name, server string, caPEM []byte, kp keyPair) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig of %s: %w", name, err)
	}
	return data, nil
}

// start starts the cluster's processes and waits until its API server is ready.
func (c *Cluster) start(ctx context.Context, f *Fleet) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.procs) > 0 {
		return nil
	}
	serving, err := c.ca.serving()
	if err != nil {
		return err
	}
	saKey, saPub, err := c.ca.serviceAccountKey()
	if err != nil {
		return err
	}
	port, err := f.ports.port("apiserver-" + c.Name)
	if err != nil {
		return err
	}
	api, err := startProcess(f.logDir, processSpec{
		name: c.Name + "-kube-apiserver",
		path: filepath.Join(f.opts.Assets.BinDir, "kube-apiserver"),
		args: []string{
			"--etcd-servers=" + f.etcdURL,
			"--etcd-prefix=/" + c.Name + "/registry",
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			// No kubernetes Service endpoints on loopback.
			"--endpoint-reconciler-type=none",
			fmt.Sprintf("--secure-port=%d", port),
			"--cert-dir=" + filepath.Join(c.dir, "serving"),
			"--tls-cert-file=" + serving.CertFile,
			"--tls-private-key-file=" + serving.KeyFile,
			"--client-ca-file=" + c.ca.caFile(),
			"--service-account-issuer=https://" + c.Name + ".kokumi.local",
			"--service-account-key-file=" + saPub,
			"--service-account-signing-key-file=" + saKey,
			"--service-cluster-ip-range=10.0.0.0/24",
			"--authorization-mode=RBAC",
			"--allow-privileged=true",
			// Pods need no ServiceAccount token on simulated nodes, and must not wait for one.
			"--disable-admission-plugins=ServiceAccount",
			"--enable-priority-and-fairness=false",
			"--profiling=false",
			"--event-ttl=1h",
		},
	})
	if err != nil {
		return err
	}
	c.procs = append(c.procs, api)
	if err := waitReady(ctx, c, api); err != nil {
		return err
	}
	if err := c.ensureNode(ctx); err != nil {
		return err
	}
	// A member's kube-controller-manager starts here, with all its controllers; the hub's once
	// the CRDs are installed, with HubControllers (startHubControllers).
	specs := c.nodeComponents(f)
	if c.member {
		specs = append([]processSpec{controllerManager(c.Name, f.opts.Assets.ControllerManager(), c.Kubeconfig, []string{"*"},
			"--service-account-private-key-file="+saKey,
			"--root-ca-file="+c.ca.caFile(),
			// Quick to notice a rollout that cannot progress, and to clean up.
			"--concurrent-deployment-syncs=5",
		)}, specs...)
	}
	for _, s := range specs {
		p, err := startProcess(f.logDir, s)
		if err != nil {
			return err
		}
		c.procs = append(c.procs, p)
	}
	return nil
}

// nodeComponents say how to run kube-scheduler and KWOK on the cluster: the scheduler places
// Pods on the simulated node, NodeName, and KWOK plays the node and its Pods by KWOK's own
// stages and the fleet's (kwok-job-stages.yaml).
func (c *Cluster) nodeComponents(f *Fleet) []processSpec {
	t := f.opts.Assets
	return []processSpec{{
		name: c.Name + "-kube-scheduler",
		path: filepath.Join(t.FleetDir, "kube-scheduler"),
		args: []string{
			"--kubeconfig=" + c.Kubeconfig,
			"--authentication-kubeconfig=" + c.Kubeconfig,
			"--authorization-kubeconfig=" + c.Kubeconfig,
			"--secure-port=0",
			"--leader-elect=false",
		},
	}, {
		name: c.Name + "-kwok",
		path: filepath.Join(t.FleetDir, "kwok"),
		args: []string{
			"--kubeconfig=" + c.Kubeconfig,
			"--config=" + filepath.Join(t.FleetDir, "kwok-stages.yaml"),
			"--config=" + f.jobStagesFile(),
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
			"--node-ip=127.0.0.1",
			// The node keeps a Lease, as a kubelet does. Without it the stages heartbeat the node
			// every ten minutes only; the node lifecycle controller marks it NotReady after 50 s,
			// and with it every Pod there, which KWOK never turns Ready again.
			"--node-lease-duration-seconds=40",
		},
		env: []string{"HOME=" + c.dir},
	}}
}

// startHubControllers starts kube-controller-manager on the hub with HubControllers. Start it
// once the CRDs are installed: the garbage collector learns the kinds there are at its start,
// and only every 30 s after.
func (c *Cluster) startHubControllers(f *Fleet) error {
	p, err := startProcess(f.logDir, controllerManager(c.Name, f.opts.Assets.ControllerManager(), c.Kubeconfig, HubControllers))
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs = append(c.procs, p)
	return nil
}

// NodeName is the name of the simulated node of every cluster of the fleet.
const NodeName = "kwok-node"

// JobFailImage is the image whose Jobs fail on the fleet's simulated nodes: the Pod of a Job
// whose first container runs it fails, its container terminated with exit code 1 and its args,
// joined by spaces, as termination message (kwok-job-stages.yaml). The Pod of a Job of any
// other image succeeds.
const JobFailImage = "kwok.local/fail"

// jobStages are the KWOK stages the fleet plays beside KWOK's own: a Job's Pod of JobFailImage
// fails.
//
//go:embed kwok-job-stages.yaml
var jobStages []byte

// ensureNode creates the cluster's simulated node, which KWOK keeps Ready.
func (c *Cluster) ensureNode(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("client of %s: %w", c.Name, err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        NodeName,
			Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the node of %s: %w", c.Name, err)
	}
	return nil
}

// stop stops the cluster's processes, the API server last.
func (c *Cluster) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(15 * time.Second); err != nil && first == nil {
			first = err
		}
	}
	c.procs = nil
	return first
}

func (c *Cluster) processes() []*process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*process(nil), c.procs...)
}

// waitReady polls the API server's /readyz until it answers ok.
func waitReady(ctx context.Context, c *Cluster, p *process) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAData)
	cert, err := tls.X509KeyPair(c.admin.CertPEM, c.admin.KeyPEM)
	if err != nil {
		return fmt.Errorf("admin certificate of %s: %w", c.Name, err)
	}
	hc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}},
	}
	defer hc.CloseIdleConnections()
	return poll(ctx, 3*time.Minute, c.Name+" kube-apiserver to be ready at "+c.Server, func() (bool, error) {
		if done, _ := p.exited(); done {
			return false, p.failure()
		}
		resp, err := hc.Get(c.Server + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// poll calls cond every 200 ms until it is true, fails, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}
