package clusters

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cli"
)

// kubeconfig writes a kubeconfig of two contexts, hub and the member's context, each as its
// admin, as a platform engineer has them.
func kubeconfig(t *testing.T, memberContext string, m *memberCluster) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	for name, cfg := range map[string]*rest.Config{"hub": env.Config, memberContext: m.Admin} {
		kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
		kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
		kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	kc.CurrentContext = "hub"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// plugin runs kubectl kokumi with args against the kubeconfig kc.
func plugin(t *testing.T, kc string, args ...string) (stdout string, code int) {
	t.Helper()
	var in, out, errOut bytes.Buffer
	code = cli.Run(append(args, "--kubeconfig", kc), genericiooptions.IOStreams{In: &in, Out: &out, ErrOut: &errOut})
	t.Logf("kubectl kokumi %s → %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return out.String() + errOut.String(), code
}

// who asks the member who token is; the error is the member's refusal.
func who(ctx context.Context, m *memberCluster, token string) (string, error) {
	cfg := rest.AnonymousClientConfig(m.Admin)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

// may asks the member whether token may verb resource (cluster-wide).
func may(ctx context.Context, t *testing.T, m *memberCluster, token, verb, group, resource string) bool {
	t.Helper()
	cfg := rest.AnonymousClientConfig(m.Admin)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Allowed
}

// kubectl kokumi cluster add, rotate and remove, as a platform engineer runs them with one
// kubeconfig holding the hub and a member: against a real member API server, with Kokumi's
// cluster controller probing it.
func TestThePluginAddsRotatesAndRemovesACluster(t *testing.T) {
	ctx := context.Background()
	m, err := startMember()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.stop() })
	kc := kubeconfig(t, "edge-cli", m)

	// add: the member's identity, the hub's Secret and Cluster, and it waits until Ready.
	out, code := plugin(t, kc, "cluster", "add", "edge-cli", "--label", "tier=cli", "--label", "region=eu-west", "--wait", "60s")
	if code != 0 || !strings.Contains(out, "Cluster edge-cli is Ready (Kubernetes "+m.Version+")") {
		t.Fatalf("cluster add: exit %d\n%s", code, out)
	}
	var c v1.Cluster
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: "edge-cli"}, &c))
	if c.Spec.Server != m.Server && c.Spec.Server != m.Server+"/" || c.Labels["tier"] != "cli" || c.Labels["region"] != "eu-west" {
		t.Errorf("the Cluster: server %q (want %q), labels %v", c.Spec.Server, m.Server, c.Labels)
	}
	var secret corev1.Secret
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: config.Namespace, Name: "edge-cli"}, &secret))
	first := string(secret.Data["token"])
	if string(secret.Data["ca.crt"]) != string(m.CA) || first == "" {
		t.Errorf("the credentials Secret holds %d bytes of token and a CA of %d bytes, want the member's", len(first), len(secret.Data["ca.crt"]))
	}
	if user, err := who(ctx, m, first); err != nil || user != "system:serviceaccount:kokumi:kokumi-argocd-manager" {
		t.Errorf("the token is %q (%v), want the ServiceAccount kokumi/kokumi-argocd-manager", user, err)
	}
	// Least privilege by default: it deploys what charts make, and grants itself nothing more.
	for _, c := range []struct {
		verb, group, resource string
		want                  bool
	}{
		{"list", "apps", "deployments", true}, {"create", "apps", "deployments", true}, {"create", "", "namespaces", true},
		{"create", "rbac.authorization.k8s.io", "clusterroles", false}, {"create", "rbac.authorization.k8s.io", "clusterrolebindings", false},
		{"delete", "", "namespaces", false}, {"create", "", "nodes", false},
	} {
		if got := may(ctx, t, m, first, c.verb, c.group, c.resource); got != c.want {
			t.Errorf("the member's identity may %s %s.%s: %v, want %v", c.verb, c.resource, c.group, got, c.want)
		}
	}
	// A second add of the same name says what to do instead.
	if out, code := plugin(t, kc, "cluster", "add", "edge-cli"); code == 0 || !strings.Contains(out, "kubectl kokumi cluster rotate edge-cli") {
		t.Errorf("a second add: exit %d, want a refusal that names cluster rotate:\n%s", code, out)
	}

	// rotate: a new token in the Secret, the Cluster Ready with it, the old one revoked.
	out, code = plugin(t, kc, "cluster", "rotate", "edge-cli", "--wait", "60s")
	if code != 0 || !strings.Contains(out, "Revoked the old token") {
		t.Fatalf("cluster rotate: exit %d\n%s", code, out)
	}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: config.Namespace, Name: "edge-cli"}, &secret))
	second := string(secret.Data["token"])
	if second == first {
		t.Fatal("rotate left the same token")
	}
	if _, err := who(ctx, m, second); err != nil {
		t.Errorf("the member refuses the new token: %v", err)
	}
	eventually(t, "the member refuses the old token", func() (bool, string) {
		_, err := who(ctx, m, first)
		return apierrors.IsUnauthorized(err), fmt.Sprint(err)
	})
	waitReady(t, "edge-cli", metav1.ConditionTrue, v1.ReasonConnected)

	// remove: the Cluster and its Secret on the hub, then what add made on the member.
	out, code = plugin(t, kc, "cluster", "remove", "edge-cli", "--wait", "60s")
	if code != 0 {
		t.Fatalf("cluster remove: exit %d\n%s", code, out)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "edge-cli"}, &v1.Cluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Cluster is still there: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: config.Namespace, Name: "edge-cli"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the credentials Secret is still there: %v", err)
	}
	cs, err := kubernetes.NewForConfig(m.Admin)
	must(t, err)
	if _, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, "kokumi-argocd-manager", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the member's ClusterRoleBinding is still there: %v", err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "kokumi-argocd-manager", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the member's ClusterRole is still there: %v", err)
	}
	if ns, err := cs.CoreV1().Namespaces().Get(ctx, "kokumi", metav1.GetOptions{}); err == nil && ns.DeletionTimestamp.IsZero() {
		t.Error("the member's namespace kokumi is not being deleted")
	}
	_ = os.Remove(kc)
}
