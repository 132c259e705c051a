package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// What `cluster add` makes on a member, and how it marks what it makes on the hub.
const (
	// memberIdentity names the ServiceAccount, ClusterRole and ClusterRoleBinding on the member.
	memberIdentity = "kokumi-argocd-manager"
	// memberNamespace is the member's namespace of the ServiceAccount and its token anchors.
	memberNamespace = "kokumi"
	// annotationTokenAnchor, on the hub's credentials Secret, names the Secret on the member
	// that the token is bound to: deleting it revokes the token.
	annotationTokenAnchor = "delivery.kokumi.dev/member-token-anchor"
	// labelAddedBy marks what `cluster add` made, on the hub and on the member.
	labelAddedBy = "app.kubernetes.io/managed-by"
	// addedBy is labelAddedBy's value.
	addedBy = "kubectl-kokumi"
)

// MemberRules are the rights `cluster add` gives Argo CD on a member unless --cluster-admin:
// read every kind (Argo CD's cache of the cluster lists them all), and write the namespaced kinds
// charts usually make, and namespaces (CreateNamespace). Roles and RoleBindings it may write only
// within what it holds itself: the API server's escalation check stops it from granting more.
var MemberRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
	{NonResourceURLs: []string{"/version", "/healthz"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "services", "serviceaccounts", "persistentvolumeclaims", "pods"}, Verbs: writeVerbs},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "daemonsets", "replicasets"}, Verbs: writeVerbs},
	{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: writeVerbs},
	{APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}, Verbs: writeVerbs},
	{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: writeVerbs},
	{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses", "networkpolicies"}, Verbs: writeVerbs},
	{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: writeVerbs},
}

var writeVerbs = []string{"create", "update", "patch", "delete"}

// clusterFlags are the flags of `cluster add`, `rotate` and `remove`.
type clusterFlags struct {
	name          string
	labels        []string
	clusterAdmin  bool
	wait          time.Duration
	tokenDuration time.Duration
}

func newClusterCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Register a member cluster with Kokumi, rotate its token, or remove it",
		Long: `Register a cluster of your kubeconfig with Kokumi (as argocd cluster add does), rotate the
token Argo CD and Kokumi reach it with, or remove it. The member is named by its context in
your kubeconfig; the hub is the cluster of --context (or the current context).`,
	}
	cmd.AddCommand(newClusterAddCommand(o), newClusterRotateCommand(o), newClusterRemoveCommand(o))
	return cmd
}

func newClusterAddCommand(o *options) *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "add CONTEXT",
		Short: "Register the cluster of a kubeconfig context as a Kokumi Cluster",
		Long: `Register the cluster of the kubeconfig context CONTEXT (the member) with the Kokumi of
--context (the hub), as an admin of both. On the member it creates the namespace kokumi, the
ServiceAccount kokumi-argocd-manager, the ClusterRole and ClusterRoleBinding of the same name
(read every kind, write the namespaced kinds charts usually make and namespaces; with
--cluster-admin, cluster-admin instead), and a token bound to a Secret of that namespace
(deleting it revokes the token). On the hub it writes the credentials Secret (token and
ca.crt) in Kokumi's namespace and the Cluster with --label, and waits until the Cluster is
Ready, printing why it is not.`,
		Example: `  # Register the cluster of context edge-1 as the Cluster edge-1, labelled tier=edge
  kubectl kokumi cluster add edge-1 --label tier=edge --label region=eu-west

  # Under another name, with cluster-admin on the member
  kubectl kokumi cluster add gke_prod_europe-west1_edge --name edge-2 --cluster-admin`,
		Args: exactArgs("context"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.clusterAdd(cmd.Context(), args[0], f)
		},
	}
	cmd.Flags().StringVar(&f.name, "name", "", "name of the Cluster (default: the context's name, when it is a valid name)")
	cmd.Flags().StringArrayVar(&f.labels, "label", nil, "a label of the Cluster, key=value (repeat it); Environments select Clusters by their labels")
	cmd.Flags().BoolVar(&f.clusterAdmin, "cluster-admin", false, "bind cluster-admin on the member instead of the ClusterRole kokumi-argocd-manager")
	cmd.Flags().DurationVar(&f.wait, "wait", 2*time.Minute, "how long to wait for the Cluster to be Ready (0: do not wait)")
	cmd.Flags().DurationVar(&f.tokenDuration, "token-duration", 8760*time.Hour, "how long the token is valid (the member's API server may cap it); rotate it before then")
	return cmd
}

func newClusterRotateCommand(o *options) *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "rotate CONTEXT",
		Short: "Give a Cluster a new token and revoke the old one once the new one works",
		Long: `Mint a new token for the ServiceAccount kokumi-argocd-manager on the member of the kubeconfig
context CONTEXT, check that the member accepts it, write it into the Cluster's credentials
Secret on the hub, wait until the Cluster is Ready with it, and then revoke the old token (by
deleting the Secret on the member it was bound to).`,
		Example: `  kubectl kokumi cluster rotate edge-1`,
		Args:    exactArgs("context"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.clusterRotate(cmd.Context(), args[0], f)
		},
	}
	cmd.Flags().StringVar(&f.name, "name", "", "name of the Cluster (default: the context's name)")
	cmd.Flags().DurationVar(&f.wait, "wait", 2*time.Minute, "how long to wait for the Cluster to be Ready with the new token")
	cmd.Flags().DurationVar(&f.tokenDuration, "token-duration", 8760*time.Hour, "how long the new token is valid")
	return cmd
}

func newClusterRemoveCommand(o *options) *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "remove CONTEXT",
		Short: "Delete a Cluster, then what cluster add made on the member",
		Long: `Delete the Cluster and its credentials Secret on the hub (Kokumi deletes its Argo CD Applications
for the cluster first; what runs there keeps running), then, on the member of the kubeconfig
context CONTEXT, the ClusterRoleBinding, ClusterRole and the namespace kokumi that cluster add
made (the ServiceAccount and its tokens go with it).`,
		Example: `  kubectl kokumi cluster remove edge-1`,
		Args:    exactArgs("context"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.clusterRemove(cmd.Context(), args[0], f)
		},
	}
	cmd.Flags().StringVar(&f.name, "name", "", "name of the Cluster (default: the context's name)")
	cmd.Flags().DurationVar(&f.wait, "wait", 2*time.Minute, "how long to wait for the Cluster to be gone")
	return cmd
}

// member is the member cluster of a kubeconfig context: its client and what the Cluster names.
type member struct {
	context string
	config  *rest.Config
	client  kubernetes.Interface
	ca      []byte
}

// member reads the kubeconfig context of a member cluster.
func (o *options) member(context string) (*member, error) {
	raw, err := o.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil, fmt.Errorf("read the kubeconfig (see --kubeconfig): %w", err)
	}
	if _, ok := raw.Contexts[context]; !ok {
		return nil, fmt.Errorf("no context %q in the kubeconfig: list them with kubectl config get-contexts", context)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(raw, context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("read the kubeconfig context %q: %w", context, err)
	}
	if !strings.HasPrefix(cfg.Host, "https://") {
		return nil, fmt.Errorf("context %q reaches its cluster at %q: Kokumi reaches members over https:// only", context, cfg.Host)
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("read the CA of context %q: %w", context, err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the member of context %q: %w", context, err)
	}
	return &member{context: context, config: cfg, client: cs, ca: ca}, nil
}

// target is what every cluster command starts from: the Cluster's name, the hub's client and
// the member.
func (o *options) target(context string, f clusterFlags) (string, client.Client, *member, error) {
	name, err := clusterName(f, context)
	if err != nil {
		return "", nil, nil, err
	}
	hub, _, err := o.client()
	if err != nil {
		return "", nil, nil, err
	}
	m, err := o.member(context)
	if err != nil {
		return "", nil, nil, err
	}
	return name, hub, m, nil
}

// clusterName is --name, else the context's name when it is a valid Cluster name.
func clusterName(f clusterFlags, context string) (string, error) {
	name := f.name
	if name == "" {
		name = context
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("%q is not a valid Cluster name (%s): give one with --name", name, strings.Join(errs, "; "))
	}
	return name, nil
}

// parseLabels reads --label key=value.
func parseLabels(labels []string) (map[string]string, error) {
	out := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("--label %q: write it key=value", l)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("--label %q: the key %s", l, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("--label %q: the value %s", l, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

func (o *options) clusterAdd(ctx context.Context, context string, f clusterFlags) error {
	labels, err := parseLabels(f.labels)
	if err != nil {
		return err
	}
	name, hub, m, err := o.target(context, f)
	if err != nil {
		return err
	}
	if err := hub.Get(ctx, client.ObjectKey{Name: name}, &v1.Cluster{}); err == nil {
		return fmt.Errorf("a Cluster %s exists already: give another --name, or renew its token with kubectl kokumi cluster rotate %s", name, context)
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Cluster %s on the hub: %w", name, err)
	}
	if err := m.identity(ctx, f.clusterAdmin); err != nil {
		return err
	}
	anchor, token, err := m.token(ctx, f.tokenDuration)
	if err != nil {
		return err
	}
	secret := o.credentials(name, anchor, token, m.ca)
	if err := hub.Create(ctx, secret); err != nil {
		return fmt.Errorf("create the credentials Secret %s/%s on the hub: %w", secret.Namespace, secret.Name, err)
	}
	c := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       v1.ClusterSpec{Server: m.config.Host, CredentialsRef: v1.LocalObjectReference{Name: name}},
	}
	if err := hub.Create(ctx, c); err != nil {
		return fmt.Errorf("create the Cluster %s on the hub: %w", name, err)
	}
	fmt.Fprintf(o.streams.Out, "Cluster %s created for %s (context %s), with a token of ServiceAccount %s/%s valid until %s.\n",
		name, m.config.Host, context, memberNamespace, memberIdentity, time.Now().Add(f.tokenDuration).UTC().Format("2006-01-02 15:04 UTC"))
	return o.waitReady(ctx, hub, name, f.wait)
}

func (o *options) clusterRotate(ctx context.Context, context string, f clusterFlags) error {
	name, hub, m, err := o.target(context, f)
	if err != nil {
		return err
	}
	var c v1.Cluster
	if err := hub.Get(ctx, client.ObjectKey{Name: name}, &c); err != nil {
		return fmt.Errorf("read Cluster %s on the hub (see --name): %w", name, err)
	}
	var secret corev1.Secret
	key := client.ObjectKey{Namespace: o.kokumiNamespace, Name: c.Spec.CredentialsRef.Name}
	if err := hub.Get(ctx, key, &secret); err != nil {
		return fmt.Errorf("read the Cluster's credentials Secret %s on the hub: %w", key, err)
	}
	anchor, token, err := m.token(ctx, f.tokenDuration)
	if err != nil {
		return err
	}
	if err := m.works(ctx, token); err != nil {
		_ = m.revoke(ctx, anchor)
		return fmt.Errorf("the member does not accept the new token (the old one stays): %w", err)
	}
	old := secret.Annotations[annotationTokenAnchor]
	want := o.credentials(secret.Name, anchor, token, m.ca)
	secret.Data = want.Data
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	secret.Annotations[annotationTokenAnchor] = anchor
	if err := hub.Update(ctx, &secret); err != nil {
		_ = m.revoke(ctx, anchor)
		return fmt.Errorf("write the new token into %s on the hub (the old one stays): %w", key, err)
	}
	// Kokumi reads the Secret through a watch: give it a moment before the old token goes.
	time.Sleep(3 * time.Second)
	if err := o.waitReady(ctx, hub, name, f.wait); err != nil {
		return fmt.Errorf("%w; the old token is not revoked", err)
	}
	if old == "" {
		fmt.Fprintf(o.streams.Out, "The old token was not bound to a Secret of %s's namespace %s (not made by cluster add): revoke it on the member yourself.\n", context, memberNamespace)
		return nil
	}
	if err := m.revoke(ctx, old); err != nil {
		return err
	}
	fmt.Fprintf(o.streams.Out, "Revoked the old token (deleted Secret %s/%s on the member).\n", memberNamespace, old)
	return nil
}

func (o *options) clusterRemove(ctx context.Context, context string, f clusterFlags) error {
	name, hub, m, err := o.target(context, f)
	if err != nil {
		return err
	}
	var c v1.Cluster
	err = hub.Get(ctx, client.ObjectKey{Name: name}, &c)
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(o.streams.Out, "No Cluster %s on the hub.\n", name)
	case err != nil:
		return fmt.Errorf("read Cluster %s on the hub: %w", name, err)
	default:
		if err := hub.Delete(ctx, &c); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete Cluster %s on the hub: %w", name, err)
		}
		if err := o.waitGone(ctx, hub, name, f.wait); err != nil {
			return err
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.kokumiNamespace, Name: c.Spec.CredentialsRef.Name}}
		if err := hub.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete the credentials Secret %s/%s on the hub: %w", secret.Namespace, secret.Name, err)
		}
		fmt.Fprintf(o.streams.Out, "Cluster %s and its credentials Secret deleted on the hub.\n", name)
	}
	rbac := m.client.RbacV1()
	if err := rbac.ClusterRoleBindings().Delete(ctx, memberIdentity, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete ClusterRoleBinding %s on the member: %w", memberIdentity, err)
	}
	if err := rbac.ClusterRoles().Delete(ctx, memberIdentity, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete ClusterRole %s on the member: %w", memberIdentity, err)
	}
	if err := m.client.CoreV1().Namespaces().Delete(ctx, memberNamespace, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete namespace %s on the member: %w", memberNamespace, err)
	}
	fmt.Fprintf(o.streams.Out, "Deleted ClusterRoleBinding and ClusterRole %s and namespace %s on the member (context %s).\n", memberIdentity, memberNamespace, context)
	return nil
}

// credentials is the hub's credentials Secret of the Cluster name: the token and the CA.
func (o *options) credentials(name, anchor, token string, ca []byte) *corev1.Secret {
	data := map[string][]byte{"token": []byte(token)}
	if len(ca) > 0 {
		data["ca.crt"] = ca
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.kokumiNamespace, Name: name, Labels: map[string]string{labelAddedBy: addedBy},
			Annotations: map[string]string{annotationTokenAnchor: anchor}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// identity makes, or brings up to date, the namespace, ServiceAccount, ClusterRole and
// ClusterRoleBinding of Argo CD on the member.
func (m *member) identity(ctx context.Context, clusterAdmin bool) error {
	mark := map[string]string{labelAddedBy: addedBy}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: memberNamespace, Labels: mark}}
	if _, err := m.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s on the member: %w", memberNamespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: memberNamespace, Name: memberIdentity, Labels: mark}}
	if _, err := m.client.CoreV1().ServiceAccounts(memberNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/%s on the member: %w", memberNamespace, memberIdentity, err)
	}
	rbac := m.client.RbacV1()
	role := "cluster-admin"
	if !clusterAdmin {
		role = memberIdentity
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: memberIdentity, Labels: mark}, Rules: MemberRules}
		if _, err := rbac.ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = rbac.ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("update ClusterRole %s on the member: %w", memberIdentity, err)
			}
		} else if err != nil {
			return fmt.Errorf("create ClusterRole %s on the member: %w", memberIdentity, err)
		}
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: memberIdentity, Labels: mark},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: memberNamespace, Name: memberIdentity}},
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		// The role a binding names cannot change: it is made again.
		if err := rbac.ClusterRoleBindings().Delete(ctx, memberIdentity, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("replace ClusterRoleBinding %s on the member: %w", memberIdentity, err)
		}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ClusterRoleBinding %s on the member: %w", memberIdentity, err)
		}
	} else if err != nil {
		return fmt.Errorf("create ClusterRoleBinding %s on the member: %w", memberIdentity, err)
	}
	return nil
}

// token mints a token of the ServiceAccount bound to a new Secret of the member's namespace
// (its anchor): deleting the anchor revokes the token.
func (m *member) token(ctx context.Context, duration time.Duration) (anchor, token string, err error) {
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return "", "", fmt.Errorf("name the token's Secret: %w", err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: memberNamespace, Name: memberIdentity + "-" + hex.EncodeToString(suffix),
		Labels: map[string]string{labelAddedBy: addedBy}}}
	s, err = m.client.CoreV1().Secrets(memberNamespace).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("create the Secret the token is bound to on the member: %w", err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(duration.Seconds())),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: s.Name, UID: s.UID},
	}}
	tr, err := m.client.CoreV1().ServiceAccounts(memberNamespace).CreateToken(ctx, memberIdentity, req, metav1.CreateOptions{})
	if err != nil {
		_ = m.revoke(ctx, s.Name)
		return "", "", fmt.Errorf("mint a token of ServiceAccount %s/%s on the member: %w", memberNamespace, memberIdentity, err)
	}
	return s.Name, tr.Status.Token, nil
}

// works checks that the member accepts token: it says who the token is.
func (m *member) works(ctx context.Context, token string) error {
	cfg := rest.AnonymousClientConfig(m.config)
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("connect with the new token: %w", err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("ask the member who the new token is: %w", err)
	}
	if want := "system:serviceaccount:" + memberNamespace + ":" + memberIdentity; review.Status.UserInfo.Username != want {
		return fmt.Errorf("the new token is %q, not %q", review.Status.UserInfo.Username, want)
	}
	return nil
}

// revoke deletes the Secret a token is bound to, which revokes it.
func (m *member) revoke(ctx context.Context, anchor string) error {
	if err := m.client.CoreV1().Secrets(memberNamespace).Delete(ctx, anchor, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("revoke the token bound to Secret %s/%s on the member: %w", memberNamespace, anchor, err)
	}
	return nil
}

// errNotReady is a Cluster that did not become Ready in time.
var errNotReady = errors.New("the Cluster is not Ready")

// waitReady waits up to wait for the Cluster name to be Ready, and says why not.
func (o *options) waitReady(ctx context.Context, hub client.Client, name string, wait time.Duration) error {
	if wait <= 0 {
		return nil
	}
	why := "Kokumi has not probed it yet"
	return poll(ctx, wait, func() (bool, error) {
		var c v1.Cluster
		if err := hub.Get(ctx, client.ObjectKey{Name: name}, &c); err != nil {
			return false, fmt.Errorf("read Cluster %s on the hub: %w", name, err)
		}
		if r := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady); r != nil {
			if r.Status == metav1.ConditionTrue {
				fmt.Fprintf(o.streams.Out, "Cluster %s is Ready (Kubernetes %s).\n", name, c.Status.Version)
				return true, nil
			}
			why = r.Reason + ": " + r.Message
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("%w after %s: %s (see kubectl get cluster %s -o yaml)", errNotReady, wait, why, name)
	})
}

// waitGone waits up to wait for the Cluster name to be gone (Kokumi's finalizer lets it go once
// its Applications for the cluster are).
func (o *options) waitGone(ctx context.Context, hub client.Client, name string, wait time.Duration) error {
	return poll(ctx, wait, func() (bool, error) {
		err := hub.Get(ctx, client.ObjectKey{Name: name}, &v1.Cluster{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("read Cluster %s on the hub: %w", name, err)
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("cluster %s is still there after %s: Kokumi deletes its Argo CD Applications for the cluster first (see kubectl get cluster %s -o yaml); the member is left as it is", name, wait, name)
	})
}

// poll runs done every second until it is true or fails, or wait passes (then late's error).
func poll(ctx context.Context, wait time.Duration, done func() (bool, error), late func() error) error {
	deadline := time.Now().Add(wait)
	for {
		ok, err := done()
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return late()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
