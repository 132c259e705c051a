package cli

import (
	"context"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	prep "github.com/kokumi-dev/kokumi/internal/preparation"
)

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  namespace: podinfo
spec:
  replicas: %REPLICAS%
  template:
    spec:
      containers:
      - image: ghcr.io/stefanprodan/podinfo@%DIGEST%
        name: podinfo
`

const service = `apiVersion: v1
kind: Service
metadata:
  name: podinfo
  namespace: podinfo
spec:
  ports:
  - port: 9898
`

const configMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: podinfo-config
  namespace: podinfo
data:
  color: blue
`

// pushPreparation pushes an artifact of manifests as Kokumi does (one gzipped tar layer
// holding manifests.yaml) and returns its digest.
func pushPreparation(t *testing.T, repository, manifests string) string {
	t.Helper()
	layer, err := oci.TarGz(map[string][]byte{prep.ManifestsFile: []byte(manifests)})
	must(t, err)
	d, err := (&oci.Client{}).PushArtifact(context.Background(), repository, layer, nil)
	must(t, err)
	return d
}

func TestDiffOfTheManifestsPullsBothArtifacts(t *testing.T) {
	ns := namespace(t, "manifests")
	reg := ocitest.Start(t)
	repository := ocitest.Repo(reg, "kokumi/"+ns+"/web")
	m1 := strings.NewReplacer("%REPLICAS%", "2", "%DIGEST%", digest("b")).Replace(deployment) + "---\n" + service
	m2 := strings.NewReplacer("%REPLICAS%", "3", "%DIGEST%", digest("f")).Replace(deployment) + "---\n" + service + "---\n" + configMap
	d1, d2 := pushPreparation(t, repository, m1), pushPreparation(t, repository, m2)
	preparation(t, ns, "web-1", prepSpec{order: "web", repository: repository, digest: d1, ready: metav1.ConditionTrue})
	preparation(t, ns, "web-2", prepSpec{order: "web", repository: repository, digest: d2, ready: metav1.ConditionTrue})

	r := kubectlKokumi(t, "diff", "web-1", "web-2", "-n", ns, "--manifests")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// The summary counts the objects; the diff of each follows.
	if want := "  objects    1 changed, 1 added, 0 removed, 1 unchanged (diff below)\n"; !strings.Contains(r.stdout, want) {
		t.Errorf("the summary does not say %q:\n%s", want, r.stdout)
	}
	_, manifests, ok := strings.Cut(r.stdout, "\nObjects:\n")
	if !ok {
		t.Fatalf("no manifests in:\n%s", r.stdout)
	}
	want := `--- web-1/apps/v1/Deployment/podinfo/podinfo
+++ web-2/apps/v1/Deployment/podinfo/podinfo
@@ -4,9 +4,9 @@
   name: podinfo
   namespace: podinfo
 spec:
-  replicas: 2
+  replicas: 3
   template:
     spec:
       containers:
-      - image: ghcr.io/stefanprodan/podinfo@` + digest("b") + `
+      - image: ghcr.io/stefanprodan/podinfo@` + digest("f") + `
         name: podinfo
--- /dev/null
+++ web-2/v1/ConfigMap/podinfo/podinfo-config
@@ -0,0 +1,7 @@
+apiVersion: v1
+data:
+  color: blue
+kind: ConfigMap
+metadata:
+  name: podinfo-config
+  namespace: podinfo
`
	if manifests != want {
		t.Errorf("manifests diff:\n%s\nwant:\n%s", manifests, want)
	}

	// An artifact the registry does not have says where it looked.
	preparation(t, ns, "web-gone", prepSpec{order: "web", repository: repository, digest: digest("9"), ready: metav1.ConditionTrue})
	r = kubectlKokumi(t, "diff", "web-1", "web-gone", "-n", ns, "--manifests")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: pull the artifact of Preparation web-gone from "+repository+"@"+digest("9")+": ") ||
		!strings.Contains(r.stdout, "  objects    not compared: the artifacts could not be pulled (see the error below)\n") {
		t.Errorf("diff of a missing artifact: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestDiffOfTheManifestsSignsInToTheBundledRegistryAsKokumisPuller(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "manifests-auth")
	kokumiNS := namespace(t, "manifests-auth-kokumi")
	// The bundled registry, with authentication on as Kokumi runs it (and as make demo runs it,
	// on a loopback address).
	creds := oci.RegistryCredentials{
		Pusher: oci.Credential{Username: oci.DefaultPusher, Password: "pusher-secret"},
		Puller: oci.Credential{Username: oci.DefaultPuller, Password: "puller-secret"},
	}
	reg := ocitest.StartWithCredentials(t, creds)
	repository := ocitest.Repo(reg, "kokumi/"+ns+"/web")
	pusher := &oci.Client{Credentials: oci.Credentials{reg.Addr: creds.Pusher}}
	push := func(manifests string) string {
		layer, err := oci.TarGz(map[string][]byte{prep.ManifestsFile: []byte(manifests)})
		must(t, err)
		d, err := pusher.PushArtifact(ctx, repository, layer, nil)
		must(t, err)
		return d
	}
	d1 := push(strings.NewReplacer("%REPLICAS%", "2", "%DIGEST%", digest("b")).Replace(deployment))
	d2 := push(strings.NewReplacer("%REPLICAS%", "3", "%DIGEST%", digest("b")).Replace(deployment))
	preparation(t, ns, "web-1", prepSpec{order: "web", repository: repository, digest: d1, ready: metav1.ConditionTrue})
	preparation(t, ns, "web-2", prepSpec{order: "web", repository: repository, digest: d2, ready: metav1.ConditionTrue})
	login := "kubectl -n argocd get secret -l delivery.kokumi.dev/serving-namespace=" + ns + ",argocd.argoproj.io/secret-type=repository -o jsonpath='{.items[0].data.password}' | base64 -d | docker login " + reg.Addr + " -u pull-" + ns + " --password-stdin"

	// Without the puller's Secret (and no docker login) the registry asks who you are: the
	// error says what to do.
	r := kubectlKokumi(t, "diff", "web-1", "web-2", "-n", ns, "--manifests", "--kokumi-namespace", kokumiNS)
	if r.code != 1 || !strings.Contains(r.stderr, "basic credential not found.\nKokumi's bundled registry at "+reg.Addr+" refused to let you pull. ") ||
		!strings.Contains(r.stderr, "The plugin signs in to it as Kokumi's read-only puller, from the Secret "+kokumiNS+"/kokumi-registry-puller, but it does not exist") ||
		!strings.HasSuffix(r.stderr, "\n  "+login+"\n") {
		t.Errorf("diff without credentials: exit %d, stderr:\n%s", r.code, r.stderr)
	}

	// With it, who may get it signs in as Kokumi's puller, as Kokumi's UI does.
	must(t, env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: kokumiNS, Name: "kokumi-registry-puller"},
		Data:       map[string][]byte{"username": []byte(creds.Puller.Username), "password": []byte(creds.Puller.Password)},
	}))
	r = kubectlKokumi(t, "diff", "web-1", "web-2", "-n", ns, "--manifests", "--kokumi-namespace", kokumiNS)
	if r.code != 0 || !strings.Contains(r.stdout, "-  replicas: 2\n+  replicas: 3\n") {
		t.Errorf("diff as the admin: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	// A viewer of the namespace may not get it: the error says so and how to sign in.
	cfg, err := env.AddUser("manifests-viewer")
	must(t, err)
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "manifests-viewer-view"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "manifests-viewer"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
	}))
	kubeconfig := t.TempDir() + "/viewer.kubeconfig"
	must(t, writeKubeconfig(kubeconfig, cfg, ns))
	r = kubectlKokumi(t, "diff", "web-1", "web-2", "--manifests", "--kokumi-namespace", kokumiNS, "--kubeconfig", kubeconfig)
	if r.code != 1 || !strings.Contains(r.stderr, "The plugin signs in to it as Kokumi's read-only puller, from the Secret "+kokumiNS+"/kokumi-registry-puller, but you may not get it.") ||
		!strings.HasSuffix(r.stderr, "\n  "+login+"\n") {
		t.Errorf("diff as a viewer: exit %d, stderr:\n%s", r.code, r.stderr)
	}

	// The recorded address of the bundled registry cannot be reached from here (in a cluster,
	// its Service's name): the error says to port-forward it and name it with
	// --bundled-registry, which then reads the artifacts there.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	unreachable := gone.Addr().String()
	must(t, gone.Close())
	moved := strings.Replace(repository, reg.Addr, unreachable, 1)
	preparation(t, ns, "web-3", prepSpec{order: "web", repository: moved, digest: d1, ready: metav1.ConditionTrue})
	preparation(t, ns, "web-4", prepSpec{order: "web", repository: moved, digest: d2, ready: metav1.ConditionTrue})
	r = kubectlKokumi(t, "diff", "web-3", "web-4", "-n", ns, "--manifests", "--kokumi-namespace", kokumiNS)
	if want := "Kokumi's bundled registry at " + unreachable + " cannot be reached from here: it runs inside the cluster. Port-forward it and name it with --bundled-registry:\n\n" +
		"  kubectl -n " + kokumiNS + " port-forward service/kokumi-registry 5000:5000 &\n" +
		"  kubectl kokumi diff web-3 web-4 -n " + ns + " --manifests --bundled-registry localhost:5000\n"; r.code != 1 || !strings.HasSuffix(r.stderr, want) {
		t.Errorf("diff of an unreachable bundled registry: exit %d, stderr:\n%s\nwant it to end with:\n%s", r.code, r.stderr, want)
	}
	r = kubectlKokumi(t, "diff", "web-3", "web-4", "-n", ns, "--manifests", "--kokumi-namespace", kokumiNS, "--bundled-registry", reg.Addr)
	if r.code != 0 || !strings.Contains(r.stdout, "-  replicas: 2\n+  replicas: 3\n") {
		t.Errorf("diff with --bundled-registry: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	// Signed in as the namespace's puller, as the error says (docker login writes the docker
	// config), the viewer diffs.
	dockerConfig := t.TempDir()
	puller := creds.NamespacePuller(ns)
	auth := base64.StdEncoding.EncodeToString([]byte(puller.Username + ":" + puller.Password))
	must(t, os.WriteFile(filepath.Join(dockerConfig, "config.json"), []byte(`{"auths":{"`+reg.Addr+`":{"auth":"`+auth+`"}}}`), 0o600))
	t.Setenv("DOCKER_CONFIG", dockerConfig)
	r = kubectlKokumi(t, "diff", "web-1", "web-2", "--manifests", "--kokumi-namespace", kokumiNS, "--kubeconfig", kubeconfig)
	if r.code != 0 || !strings.Contains(r.stdout, "-  replicas: 2\n+  replicas: 3\n") {
		t.Errorf("diff as a viewer signed in as the namespace's puller: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

func TestDiffOfTheManifestsMasksTheSecretsTheUserMayNotGet(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "manifests-secrets")
	reg := ocitest.Start(t)
	repository := ocitest.Repo(reg, "kokumi/"+ns+"/web")
	secret := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: %s\n  user: YWRtaW4=\n"
	d1 := pushPreparation(t, repository, strings.Replace(secret, "%s", "b2xkLXBhc3N3b3Jk", 1))
	d2 := pushPreparation(t, repository, strings.Replace(secret, "%s", "bmV3LXBhc3N3b3Jk", 1))
	preparation(t, ns, "web-1", prepSpec{order: "web", repository: repository, digest: d1, targetNamespace: ns, ready: metav1.ConditionTrue})
	preparation(t, ns, "web-2", prepSpec{order: "web", repository: repository, digest: d2, targetNamespace: ns, ready: metav1.ConditionTrue})

	// A viewer of the namespace (view leaves Secrets out) sees that the password changed, not
	// what it was or is, and is told so.
	cfg, err := env.AddUser("secret-viewer")
	must(t, err)
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secret-viewer-view"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "secret-viewer"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
	}))
	kubeconfig := t.TempDir() + "/viewer.kubeconfig"
	must(t, writeKubeconfig(kubeconfig, cfg, ns))
	r := kubectlKokumi(t, "diff", "web-1", "web-2", "--manifests", "--kubeconfig", kubeconfig)
	if r.code != 0 || strings.Contains(r.stdout, "b2xkLXBhc3N3b3Jk") || strings.Contains(r.stdout, "bmV3LXBhc3N3b3Jk") || strings.Contains(r.stdout, "YWRtaW4=") ||
		!strings.Contains(r.stdout, "-  password: ++++++++\n+  password: +++++++++\n   user: ++++++++\n") {
		t.Errorf("diff as a viewer: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	if want := "Note: values of 1 Secret hidden: you may not get secrets in namespace " + ns + " (Secret/" + ns + "/db)\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// The admin sees the values, and no note.
	r = kubectlKokumi(t, "diff", "web-1", "web-2", "-n", ns, "--manifests")
	if r.code != 0 || !strings.Contains(r.stdout, "-  password: b2xkLXBhc3N3b3Jk\n+  password: bmV3LXBhc3N3b3Jk\n") || r.stderr != "" {
		t.Errorf("diff as the admin: exit %d, stdout:\n%s\nstderr: %q", r.code, r.stdout, r.stderr)
	}
}
