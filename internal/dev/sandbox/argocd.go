package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels Argo CD reads on its Secrets and settings.
const (
	argoCDPartOfLabel     = "app.kubernetes.io/part-of"
	argoCDSecretTypeLabel = "argocd.argoproj.io/secret-type"
)

// startRedis starts the redis Argo CD caches in; it keeps nothing on disk.
func (f *Fleet) startRedis(ctx context.Context) error {
	addr, err := f.ports.addr("redis")
	if err != nil {
		return err
	}
	f.Redis = addr
	_, port, _ := net.SplitHostPort(addr)
	dir := filepath.Join(f.opts.StateDir, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	p, err := startProcess(f.logDir, processSpec{
		name: "redis",
		path: "redis-server",
		args: []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir},
	})
	if err != nil {
		return err
	}
	f.track(p)
	return waitListening(ctx, p, addr)
}

// waitListening polls until addr accepts connections.
func waitListening(ctx context.Context, p *process, addr string) error {
	return poll(ctx, 2*time.Minute, p.name+" to listen on "+addr, func() (bool, error) {
		if done, _ := p.exited(); done {
			return false, p.failure()
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
}

// configureArgoCD creates what Argo CD needs in its namespace on the hub: its settings, its
// Secret and the AppProject default (which argocd-server would otherwise make). Its credentials
// of the bundled registry are Kokumi's controller's to keep.
func (f *Fleet) configureArgoCD(ctx context.Context) error {
	c, err := f.AdminClient()
	if err != nil {
		return err
	}
	ns := f.ArgoCDNamespace
	partOf := map[string]string{argoCDPartOfLabel: "argocd"}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("generate Argo CD's server key: %w", err)
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argocd-cm", Namespace: ns, Labels: partOf}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argocd-cmd-params-cm", Namespace: ns, Labels: partOf}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: ns, Labels: partOf},
			Data:       map[string][]byte{"server.secretkey": []byte(base64.StdEncoding.EncodeToString(key))},
		},
	}
	for _, o := range objs {
		if err := createIfMissing(ctx, c, o); err != nil {
			return err
		}
	}
	return createIfMissing(ctx, c, AppProject(ns, "default", AppProjectSpec{
		SourceRepos:  []string{"*"},
		Destinations: []AppProjectDestination{{Server: "*", Namespace: "*"}},
		ClusterResourceWhitelist: []map[string]string{{
			"group": "*", "kind": "*",
		}},
	}))
}

// AppProjectSpec is the part of an Argo CD AppProject's spec the fleet writes.
type AppProjectSpec struct {
	SourceRepos              []string                `json:"sourceRepos,omitempty"`
	SourceNamespaces         []string                `json:"sourceNamespaces,omitempty"`
	Destinations             []AppProjectDestination `json:"destinations,omitempty"`
	ClusterResourceWhitelist []map[string]string     `json:"clusterResourceWhitelist,omitempty"`
}

// AppProjectDestination is a server and namespace (globs) an AppProject permits.
type AppProjectDestination struct {
	Server    string `json:"server,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// AppProject returns an Argo CD AppProject as an unstructured object.
func AppProject(namespace, name string, spec AppProjectSpec) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("argoproj.io/v1alpha1")
	u.SetKind("AppProject")
	u.SetNamespace(namespace)
	u.SetName(name)
	data, _ := json.Marshal(spec)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	u.Object["spec"] = m
	return u
}

// ClusterSecret returns the Argo CD cluster Secret for a member, as an admin (or Kokumi's
// Cluster controller) registers it with Argo CD.
func ClusterSecret(namespace string, c *Cluster) (*corev1.Secret, error) {
	cfg, err := json.Marshal(map[string]any{"tlsClientConfig": map[string]any{
		"caData":   c.CAData,
		"certData": c.Identity.CertPEM,
		"keyData":  c.Identity.KeyPEM,
	}})
	if err != nil {
		return nil, fmt.Errorf("encode the cluster Secret of %s: %w", c.Name, err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "cluster-" + c.Name,
			Namespace: namespace,
			Labels:    map[string]string{argoCDSecretTypeLabel: "cluster"},
		},
		StringData: map[string]string{"name": c.Name, "server": c.Server, "config": string(cfg)},
	}, nil
}

// startArgoCD starts argocd-repo-server and argocd-application-controller.
func (f *Fleet) startArgoCD(ctx context.Context) error {
	repoAddr, err := f.ports.addr("argocd-repo-server")
	if err != nil {
		return err
	}
	f.RepoServer = repoAddr
	repoMetrics, err := f.ports.port("argocd-repo-server-metrics")
	if err != nil {
		return err
	}
	ctrlMetrics, err := f.ports.port("argocd-application-controller-metrics")
	if err != nil {
		return err
	}
	_, repoPort, _ := net.SplitHostPort(repoAddr)
	dir := filepath.Join(f.opts.StateDir, "argocd")
	home, tmp := filepath.Join(dir, "home"), filepath.Join(dir, "tmp")
	for _, d := range []string{home, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	env := func(binary string) []string {
		return []string{
			"ARGOCD_BINARY_NAME=" + binary,
			// The default socket path is shared by every repo server of the machine.
			"ARGOCD_ASK_PASS_SOCK=" + filepath.Join(dir, "reposerver-ask-pass.sock"),
			"ARGOCD_GPG_ENABLED=false",
			"HOME=" + home,
			"TMPDIR=" + tmp,
		}
	}
	argocd := filepath.Join(f.opts.Assets.FleetDir, "argocd")
	repo, err := startProcess(f.logDir, processSpec{
		name: "argocd-repo-server",
		path: argocd,
		args: []string{
			"--address", "127.0.0.1", "--port", repoPort,
			"--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(repoMetrics),
			"--redis", f.Redis,
			"--disable-tls", "--client-ca-path=",
			"--loglevel", "warn",
		},
		env: env("argocd-repo-server"),
		dir: dir,
	})
	if err != nil {
		return err
	}
	f.track(repo)
	ctrl, err := startProcess(f.logDir, processSpec{
		name: "argocd-application-controller",
		path: argocd,
		args: []string{
			"--kubeconfig", f.Hub.Kubeconfig,
			"--namespace", f.ArgoCDNamespace,
			"--repo-server", repoAddr, "--repo-server-plaintext",
			"--redis", f.Redis,
			"--metrics-port", strconv.Itoa(ctrlMetrics),
			"--app-resync", "30",
			"--self-heal-timeout-seconds", "2",
			"--loglevel", "warn",
		},
		env: env("argocd-application-controller"),
		dir: dir,
	})
	if err != nil {
		return err
	}
	f.track(ctrl)
	return waitListening(ctx, repo, repoAddr)
}

// createIfMissing creates o unless it exists.
func createIfMissing(ctx context.Context, c client.Client, o client.Object) error {
	if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// apply creates o, or updates it to o when it exists.
func apply(ctx context.Context, c client.Client, o client.Object) error {
	err := c.Create(ctx, o)
	if apierrors.IsAlreadyExists(err) {
		existing := o.DeepCopyObject().(client.Object)
		if err = c.Get(ctx, client.ObjectKeyFromObject(o), existing); err == nil {
			o.SetResourceVersion(existing.GetResourceVersion())
			err = c.Update(ctx, o)
		}
	}
	if err != nil {
		return fmt.Errorf("apply %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
	}
	return nil
}
