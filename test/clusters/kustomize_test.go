package clusters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	kconfig "github.com/kokumi-dev/kokumi/internal/config"
)

// render runs `kubectl kustomize` on a directory of config/ with the built kubectl.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.Command(env.Assets.Kubectl(), "kustomize", filepath.Join(env.Assets.Root, "config", dir))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize config/%s: %v: %s", dir, err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode the output of kubectl kustomize config/%s: %v", dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

func find(objs []*unstructured.Unstructured, kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

func deployment(t *testing.T, objs []*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	u := find(objs, "Deployment", "kokumi-system", name)
	if u == nil {
		t.Fatalf("no Deployment kokumi-system/%s", name)
	}
	var d appsv1.Deployment
	must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d))
	return &d
}

// hardened checks what every Kokumi container must be: non-root, read-only root filesystem,
// no privilege escalation, requests, both probes.
func hardened(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers", d.Name, len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("%s: the pod may run as root", d.Name)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: container security context %+v is not read-only, unprivileged, without capabilities", d.Name, sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("%s: no CPU and memory requests", d.Name)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Errorf("%s: liveness %v, readiness %v", d.Name, c.LivenessProbe, c.ReadinessProbe)
	}
	if !strings.HasPrefix(c.Image, "ghcr.io/kokumi-dev/kokumi:") {
		t.Errorf("%s: image %q", d.Name, c.Image)
	}
	return c
}

func TestConfigDefaultInstallsKokumi(t *testing.T) {
	objs := render(t, "default")

	for _, kind := range []string{"clusters", "environments", "orders", "preparations", "products", "servings"} {
		if find(objs, "CustomResourceDefinition", "", kind+".delivery.kokumi.dev") == nil {
			t.Errorf("no CRD %s.delivery.kokumi.dev", kind)
		}
	}
	for _, want := range []struct{ kind, namespace, name string }{
		{"Namespace", "", "kokumi-system"},
		{"ServiceAccount", "kokumi-system", "kokumi-controller"},
		{"ClusterRole", "", "kokumi-controller"},
		{"ClusterRoleBinding", "", "kokumi-controller"},
		{"Role", "kokumi-system", "kokumi-controller"},
		{"RoleBinding", "kokumi-system", "kokumi-controller"},
		{"Role", "argocd", "kokumi-controller"},
		{"RoleBinding", "argocd", "kokumi-controller"},
		{"ClusterRole", "", "kokumi-admin"},
		{"Role", "kokumi-system", "kokumi-admin"},
		{"ClusterRole", "", "kokumi-tenant"},
		{"ClusterRole", "", "kokumi-view"},
		{"Service", "kokumi-system", "kokumi-registry"},
		{"PersistentVolumeClaim", "kokumi-system", "kokumi-registry"},
		{"ServiceAccount", "kokumi-system", "kokumi-server"},
		{"ClusterRole", "", "kokumi-server"},
		{"ClusterRoleBinding", "", "kokumi-server"},
		{"Role", "argocd", "kokumi-server"},
		{"RoleBinding", "argocd", "kokumi-server"},
		{"Service", "kokumi-system", "kokumi-server"},
	} {
		if find(objs, want.kind, want.namespace, want.name) == nil {
			t.Errorf("no %s %s/%s", want.kind, want.namespace, want.name)
		}
	}

	ctrl := deployment(t, objs, "kokumi-controller")
	c := hardened(t, ctrl)
	if ctrl.Spec.Template.Spec.ServiceAccountName != "kokumi-controller" {
		t.Errorf("controller runs as %q", ctrl.Spec.Template.Spec.ServiceAccountName)
	}
	d := kconfig.Default()
	for _, arg := range []string{
		"controller", "--leader-elect",
		"--namespace=" + d.Namespace,
		"--argocd-namespace=" + d.ArgoCDNamespace,
		"--bundled-registry=" + d.BundledRegistry,
		"--probe-period=" + d.ProbePeriod.String(),
	} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("controller args %v lack %s", c.Args, arg)
		}
	}
	// The Environment local is off by default: no project of Argo CD's, least of all default.
	for _, arg := range c.Args {
		if strings.HasPrefix(arg, "--local-project") {
			t.Errorf("the shipped controller turns the Environment local on: %s", arg)
		}
	}

	reg := hardened(t, deployment(t, objs, "kokumi-registry"))
	if len(reg.Args) == 0 || reg.Args[0] != "registry" {
		t.Errorf("registry args %v do not run `kokumi registry`", reg.Args)
	}
	srv := deployment(t, objs, "kokumi-server")
	sc := hardened(t, srv)
	if srv.Spec.Template.Spec.ServiceAccountName != "kokumi-server" || len(sc.Args) == 0 || sc.Args[0] != "server" {
		t.Errorf("server runs as %q with args %v", srv.Spec.Template.Spec.ServiceAccountName, sc.Args)
	}
	// People sign in as themselves: the shipped server holds no shared admin token.
	for _, arg := range sc.Args {
		if strings.HasPrefix(arg, "--admin-token-file") || strings.HasPrefix(arg, "--token-file") {
			t.Errorf("the shipped server takes a shared token: %s", arg)
		}
	}
	for _, v := range srv.Spec.Template.Spec.Volumes {
		if v.Secret != nil && strings.Contains(v.Secret.SecretName, "token") {
			t.Errorf("the shipped server mounts a token Secret: %+v", v)
		}
	}

	// The controller's default address of the bundled registry is this Service.
	svc := find(objs, "Service", "kokumi-system", "kokumi-registry")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 || fmt.Sprintf("kokumi-registry.kokumi-system.svc:%v", ports[0].(map[string]any)["port"]) != d.BundledRegistry {
		t.Errorf("registry Service ports %v do not serve %s", ports, d.BundledRegistry)
	}
}

func TestConfigDefaultIsAcceptedByTheAPIServer(t *testing.T) {
	// Server-side dry run: every object is validated and admitted by the real API server,
	// nothing is stored. Kokumi's and Argo CD's namespaces exist (TestMain).
	out, err := env.Kubectl(context.Background(), "apply", "--server-side", "--force-conflicts", "--dry-run=server",
		"-k", filepath.Join(env.Assets.Root, "config", "default"))
	if err != nil {
		t.Fatalf("apply --dry-run=server: %v", err)
	}
	for _, want := range []string{"deployment.apps/kokumi-controller", "deployment.apps/kokumi-registry", "deployment.apps/kokumi-server", "clusterrole.rbac.authorization.k8s.io/kokumi-tenant"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %s:\n%s", want, out)
		}
	}
}
