package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/oci/registry"
)

// startRegistryCommand runs `kokumi registry` with args on a free loopback port and returns
// its address and a stop function that checks it ended cleanly.
func startRegistryCommand(t *testing.T, args ...string) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- run(ctx, append([]string{"registry", "--addr", addr}, args...), &out, &out) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("registry command ended: %v: %s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("registry did not listen on %s: %s", addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("registry command: %v", err)
		}
	}
}

func TestRegistryCommandRefusesToServeWithoutCredentials(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"registry", "--addr", "127.0.0.1:0", "--dir", t.TempDir(), "--credentials-dir", t.TempDir()}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), oci.RegistryCredentialsSecret) || !strings.Contains(err.Error(), oci.PusherUsernameKey) {
		t.Fatalf("without credentials: %v, want a refusal naming the Secret and what is missing", err)
	}
}

func TestRegistryCommandSignsInTheCredentialsOfItsDirectory(t *testing.T) {
	ctx := context.Background()
	creds, err := oci.GenerateRegistryCredentials()
	if err != nil {
		t.Fatal(err)
	}
	credsDir := t.TempDir()
	for key, value := range creds.Data() {
		if err := os.WriteFile(filepath.Join(credsDir, key), value, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	addr, stop := startRegistryCommand(t, "--dir", dir, "--credentials-dir", credsDir)
	defer stop()
	layer, err := oci.TarGz(map[string][]byte{"a.yaml": []byte("kind: ConfigMap\napiVersion: v1\nmetadata: {name: a}\n")})
	if err != nil {
		t.Fatal(err)
	}
	d, err := (&oci.Client{Credentials: oci.Credentials{addr: creds.Pusher}}).PushArtifact(ctx, addr+"/kokumi/test", layer, nil)
	if err != nil {
		t.Fatalf("the pusher could not push: %v", err)
	}
	if _, err := (&oci.Client{}).Pull(ctx, addr+"/kokumi/test", d); err == nil {
		t.Error("an anonymous client pulled")
	}
	if pulled, err := (&oci.Client{Credentials: oci.Credentials{addr: creds.Puller}}).Pull(ctx, addr+"/kokumi/test", d); err != nil || pulled.Digest != d {
		t.Errorf("the puller could not pull: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "docker/registry/v2/repositories/kokumi/test")); err != nil {
		t.Errorf("the registry keeps nothing under --dir: %v", err)
	}
}

func TestRegistryCommandWithoutAuthForTests(t *testing.T) {
	ctx := context.Background()
	addr, stop := startRegistryCommand(t, "--dir", t.TempDir(), "--insecure-no-auth")
	defer stop()
	d := ocitest.PushBundle(t, addr+"/kokumi/test", "v1", map[string]string{"a.yaml": "kind: ConfigMap\napiVersion: v1\nmetadata: {name: a}\n"})
	if pulled, err := (&oci.Client{}).Pull(ctx, addr+"/kokumi/test", "v1"); err != nil || pulled.Digest != d {
		t.Fatalf("pull back: %v", err)
	}
}

// The shipped config/registry runs the registry with the credentials Secret mounted where
// --credentials-dir reads it, never with --insecure-no-auth, probes /healthz (the only path
// open without credentials), and admits only the controller's pods and Argo CD's repo-server.
func TestShippedRegistryConfigSignsInAndAdmitsOnlyTheControllerAndArgoCD(t *testing.T) {
	var deploy appsv1.Deployment
	var policy networkingv1.NetworkPolicy
	for _, file := range []string{"registry.yaml", "networkpolicy.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "config", "registry", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			var into any
			switch meta.Kind {
			case "Deployment":
				into = &deploy
			case "NetworkPolicy":
				into = &policy
			default:
				continue
			}
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
	}
	pod := deploy.Spec.Template.Spec
	c := pod.Containers[0]
	var credsDir string
	for _, arg := range c.Args {
		if v, ok := strings.CutPrefix(arg, "--credentials-dir="); ok {
			credsDir = v
		}
		if strings.HasPrefix(arg, "--insecure-no-auth") {
			t.Errorf("the shipped registry runs %s", arg)
		}
	}
	var mounted string
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == oci.RegistryCredentialsSecret && m.MountPath == credsDir && m.ReadOnly && m.SubPath == "" {
				mounted = m.MountPath
			}
		}
	}
	if credsDir == "" || mounted != credsDir {
		t.Errorf("--credentials-dir=%q, but the Secret %s is mounted (read-only, whole) at %q", credsDir, oci.RegistryCredentialsSecret, mounted)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != registry.HealthPath {
			t.Errorf("probe %+v does not ask %s", p, registry.HealthPath)
		}
	}

	if !equality.Semantic.DeepEqual(policy.Spec.PodSelector.MatchLabels, deploy.Spec.Template.Labels) ||
		len(policy.Spec.PolicyTypes) != 1 || policy.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress || policy.Namespace != deploy.Namespace {
		t.Fatalf("the NetworkPolicy selects %v (%v) in %s, not the registry's pods %v in %s",
			policy.Spec.PodSelector.MatchLabels, policy.Spec.PolicyTypes, policy.Namespace, deploy.Spec.Template.Labels, deploy.Namespace)
	}
	if len(policy.Spec.Ingress) != 1 {
		t.Fatalf("the NetworkPolicy has %d ingress rules, want one", len(policy.Spec.Ingress))
	}
	rule := policy.Spec.Ingress[0]
	if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.IntValue() != int(c.Ports[0].ContainerPort) {
		t.Errorf("the NetworkPolicy admits ports %v, want the registry's %d only", rule.Ports, c.Ports[0].ContainerPort)
	}
	controllerLabels := map[string]string{"app.kubernetes.io/name": "kokumi", "app.kubernetes.io/component": "controller"}
	var peers []string
	for _, p := range rule.From {
		switch {
		case p.IPBlock != nil:
			peers = append(peers, "ipBlock "+p.IPBlock.CIDR)
		case p.NamespaceSelector == nil && p.PodSelector != nil && equality.Semantic.DeepEqual(p.PodSelector.MatchLabels, controllerLabels):
			peers = append(peers, "controller")
		case p.NamespaceSelector == nil && p.PodSelector != nil &&
			equality.Semantic.DeepEqual(p.PodSelector.MatchLabels, map[string]string{"app.kubernetes.io/name": "kokumi", "app.kubernetes.io/component": "server"}):
			peers = append(peers, "server")
		case p.NamespaceSelector != nil && p.PodSelector != nil &&
			equality.Semantic.DeepEqual(p.NamespaceSelector.MatchLabels, map[string]string{"kubernetes.io/metadata.name": "argocd"}) &&
			equality.Semantic.DeepEqual(p.PodSelector.MatchLabels, map[string]string{"app.kubernetes.io/name": "argocd-repo-server"}):
			peers = append(peers, "argocd-repo-server")
		default:
			peers = append(peers, fmt.Sprintf("%+v", p))
		}
	}
	if strings.Join(peers, ",") != "controller,server,argocd-repo-server" {
		t.Errorf("the NetworkPolicy admits %v, want the controller, the API server and argocd-repo-server only", peers)
	}
	manager, err := os.ReadFile(filepath.Join("..", "..", "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ctrlDeploy appsv1.Deployment
	if err := yaml.Unmarshal(manager, &ctrlDeploy); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(ctrlDeploy.Spec.Template.Labels, controllerLabels) || ctrlDeploy.Namespace != policy.Namespace {
		t.Errorf("the controller's pods are %v in %s: the NetworkPolicy admits %v in %s", ctrlDeploy.Spec.Template.Labels, ctrlDeploy.Namespace, controllerLabels, policy.Namespace)
	}
}
