package bench

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// appSetLabel marks the ApplicationSet's Applications.
const appSetLabel = "bench.kokumi.dev/applicationset"

// appSet starts Argo CD's applicationset-controller from the fleet's multicall binary, creates
// an ApplicationSet whose cluster generator selects the N cluster Secrets Kokumi wrote, and times
// it until its N Applications exist.
func (r *run) appSet() error {
	binary := filepath.Join(r.assets.FleetDir, "argocd")
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("the argocd binary is missing, run make fleet-assets: %w", err)
	}
	// Argo CD reads its settings from these even when nothing in them concerns the generator.
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("generate Argo CD's server key: %w", err)
	}
	partOf := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	for _, o := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "argocd-cm", Namespace: argocdNamespace, Labels: partOf}},
		{ObjectMeta: metav1.ObjectMeta{Name: "argocd-cmd-params-cm", Namespace: argocdNamespace, Labels: partOf}},
	} {
		if err := r.admin.Create(r.ctx, o); err != nil {
			return fmt.Errorf("create ConfigMap %s: %w", o.Name, err)
		}
	}
	if err := r.admin.Create(r.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: argocdNamespace, Labels: partOf},
		Data:       map[string][]byte{"server.secretkey": []byte(base64.StdEncoding.EncodeToString(key))},
	}); err != nil {
		return fmt.Errorf("create Secret argocd-secret: %w", err)
	}
	ports := make([]string, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	home := filepath.Join(r.dir, "argocd-home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", home, err)
	}
	args := []string{
		"--kubeconfig", r.hub.adminKubeconfig,
		"--namespace", argocdNamespace,
		"--metrics-addr", ports[0], "--probe-addr", ports[1], "--webhook-addr", ports[2],
		// No generator here reaches the repo server.
		"--argocd-repo-server", "127.0.0.1:1", "--repo-server-plaintext",
		"--concurrent-application-updates", strconv.Itoa(r.opts.AppSetUpdates),
		"--loglevel", "warn",
	}
	p, err := startProcess("argocd-applicationset-controller", filepath.Join(r.dir, "argocd-applicationset-controller.log"), binary, args,
		[]string{"ARGOCD_BINARY_NAME=argocd-applicationset-controller", "KUBECONFIG=" + r.hub.adminKubeconfig, "HOME=" + home, "TMPDIR=" + home})
	if err != nil {
		return err
	}
	defer p.stop()
	r.logf("argocd-applicationset-controller %v", args)

	// The template is Kokumi's Application, at the server the generator gives.
	tmpl := r.spec(0, r.preps[1], argocdNamespace).Build()
	spec := tmpl.Object["spec"].(map[string]any)
	spec["destination"].(map[string]any)["server"] = "{{server}}"
	as := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"generators": []any{map[string]any{"clusters": map[string]any{"selector": map[string]any{
				"matchLabels": map[string]any{argocd.LabelManagedBy: argocd.ManagedByKokumi, argocd.LabelSecretType: argocd.SecretTypeCluster},
			}}}},
			"template": map[string]any{
				"metadata": map[string]any{"name": "appset-{{name}}", "labels": map[string]any{appSetLabel: "true"}},
				"spec":     spec,
			},
		},
	}}
	as.SetGroupVersionKind(schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "ApplicationSet"})
	as.SetNamespace(argocdNamespace)
	as.SetName("bench")
	// The controller must be up first: its informers' sync is not what is measured.
	time.Sleep(5 * time.Second)
	if err := p.alive(); err != nil {
		return err
	}
	start := time.Now()
	if err := r.admin.Create(r.ctx, as); err != nil {
		return fmt.Errorf("create the ApplicationSet: %w", err)
	}
	d, err := waitCount(r.ctx, start, r.opts.Timeout, "the ApplicationSet's Applications", r.opts.N, func() (int, error) {
		return r.obs.applications(r.ctx, argocdNamespace, map[string]string{appSetLabel: "true"}, "")
	}, p.alive)
	if err != nil {
		return err
	}
	r.row.AppSet = d
	r.logf("ApplicationSet → %d Applications in %s", r.opts.N, d.Round(time.Millisecond))
	return nil
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
