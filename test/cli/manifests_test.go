package cli

import (
	"context"
	"strings"
	"testing"

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
	_, manifests, ok := strings.Cut(r.stdout, "Manifests (objects): ")
	if !ok {
		t.Fatalf("no manifests in:\n%s", r.stdout)
	}
	want := `1 changed, 1 added, 0 removed, 1 unchanged
--- web-1/apps/v1/Deployment/podinfo/podinfo
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
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: pull the artifact of Preparation web-gone from "+repository+"@"+digest("9")+": ") {
		t.Errorf("diff of a missing artifact: exit %d %q", r.code, r.stderr)
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
