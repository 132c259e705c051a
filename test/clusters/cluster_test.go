package clusters

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/controller/clusters"
)

// putCredentials creates or replaces the credentials Secret name in Kokumi's namespace.
func putCredentials(t *testing.T, name string, data map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: config.Namespace}, Data: data}
	err := env.Client.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		err = env.Client.Update(ctx, s)
	}
	must(t, err)
}

func tokenCredentials(token string) map[string][]byte {
	return map[string][]byte{"token": []byte(token), "ca.crt": member.CA}
}

// createCluster registers a Cluster and deletes it, and waits for it to go, when the test ends.
func createCluster(t *testing.T, name, server, credentials string, labels map[string]string) {
	t.Helper()
	c := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       v1.ClusterSpec{Server: server, CredentialsRef: v1.LocalObjectReference{Name: credentials}},
	}
	must(t, env.Client.Create(context.Background(), c))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), c)
		eventually(t, "cluster "+name+" deleted", func() (bool, string) {
			err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(c), &v1.Cluster{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})
}

func getCluster(t *testing.T, name string) *v1.Cluster {
	t.Helper()
	var c v1.Cluster
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &c))
	return &c
}

// waitReady waits until the Cluster's Ready condition has the status and reason, and returns
// the Cluster.
func waitReady(t *testing.T, name string, status metav1.ConditionStatus, reason string) *v1.Cluster {
	t.Helper()
	var c *v1.Cluster
	eventually(t, fmt.Sprintf("cluster %s Ready=%s/%s", name, status, reason), func() (bool, string) {
		c = getCluster(t, name)
		cond := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady)
		if cond == nil {
			return false, "no Ready condition"
		}
		return cond.Status == status && cond.Reason == reason, fmt.Sprintf("%s/%s: %s", cond.Status, cond.Reason, cond.Message)
	})
	return c
}

func readyMessage(c *v1.Cluster) string {
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady); cond != nil {
		return cond.Message
	}
	return ""
}

func argoCDSecret(t *testing.T, cluster string) (*corev1.Secret, error) {
	t.Helper()
	var s corev1.Secret
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: config.ArgoCDNamespace, Name: "kokumi-cluster-" + cluster}, &s)
	return &s, err
}

// waitArgoCDSecret waits for the Argo CD cluster Secret of the Cluster and returns it.
func waitArgoCDSecret(t *testing.T, cluster string) *corev1.Secret {
	t.Helper()
	var s *corev1.Secret
	eventually(t, "Argo CD cluster Secret of "+cluster, func() (bool, string) {
		var err error
		s, err = argoCDSecret(t, cluster)
		return err == nil, fmt.Sprint(err)
	})
	return s
}

// argoCDConfig is the part of Argo CD's cluster config the tests read.
type argoCDConfig struct {
	BearerToken     string `json:"bearerToken"`
	TLSClientConfig struct {
		CAData   []byte `json:"caData"`
		CertData []byte `json:"certData"`
		KeyData  []byte `json:"keyData"`
	} `json:"tlsClientConfig"`
}

func decodeConfig(t *testing.T, s *corev1.Secret) argoCDConfig {
	t.Helper()
	var cfg argoCDConfig
	if err := json.Unmarshal(s.Data["config"], &cfg); err != nil {
		t.Fatalf("config of %s: %v", s.Name, err)
	}
	return cfg
}

// assertNoCredential fails when a secret value shows in the Cluster's status, in an event
// about it, or in any line the controllers logged.
func assertNoCredential(t *testing.T, name string, secrets ...string) {
	t.Helper()
	status, err := json.Marshal(getCluster(t, name).Status)
	must(t, err)
	var evs eventsv1.EventList
	must(t, env.Client.List(context.Background(), &evs))
	var notes []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name {
			notes = append(notes, e.Note)
		}
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if strings.Contains(string(status), s) {
			t.Errorf("status of cluster %s carries a credential: %s", name, status)
		}
		for _, n := range notes {
			if strings.Contains(n, s) {
				t.Errorf("an event of cluster %s carries a credential: %s", name, n)
			}
		}
		if strings.Contains(logs.String(), s) {
			t.Errorf("the controllers logged a credential")
		}
	}
}

// waitEvent waits for an Event of the Cluster with the reason: the recorder sends Events in
// the background, after the status they go with.
func waitEvent(t *testing.T, name, reason string) {
	t.Helper()
	eventually(t, "an Event "+reason+" of Cluster "+name, func() (bool, string) {
		reasons := clusterEvents(t, name)
		return containsString(reasons, reason), fmt.Sprintf("events %v", reasons)
	})
}

// clusterEvents lists the reasons of the events about the Cluster.
func clusterEvents(t *testing.T, name string) []string {
	t.Helper()
	var evs eventsv1.EventList
	must(t, env.Client.List(context.Background(), &evs))
	var reasons []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "Cluster" {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

func TestAClusterWithATokenIsReadyAndDeclaredToArgoCD(t *testing.T) {
	token := member.token(t)
	putCredentials(t, "member-token", tokenCredentials(token))
	createCluster(t, "member", member.Server, "member-token", map[string]string{"tier": "member"})

	c := waitReady(t, "member", metav1.ConditionTrue, v1.ReasonConnected)
	if c.Status.Version == "" || c.Status.Version != member.Version {
		t.Errorf("status.version %q, want the member's %q", c.Status.Version, member.Version)
	}
	if c.Status.LastProbeTime == nil || c.Status.ObservedGeneration != c.Generation {
		t.Errorf("lastProbeTime %v, observedGeneration %d of %d", c.Status.LastProbeTime, c.Status.ObservedGeneration, c.Generation)
	}
	if !strings.Contains(readyMessage(c), member.Server) {
		t.Errorf("Ready message %q does not name the server", readyMessage(c))
	}
	if !containsString(c.Finalizers, clusters.Finalizer) {
		t.Errorf("finalizers %v lack %s", c.Finalizers, clusters.Finalizer)
	}

	s := waitArgoCDSecret(t, "member")
	for k, want := range map[string]string{argocd.LabelSecretType: "cluster", argocd.LabelManagedBy: "kokumi", argocd.LabelCluster: "member"} {
		if s.Labels[k] != want {
			t.Errorf("label %s=%q, want %q", k, s.Labels[k], want)
		}
	}
	if string(s.Data["name"]) != "member" || string(s.Data["server"]) != member.Server {
		t.Errorf("name %q server %q", s.Data["name"], s.Data["server"])
	}
	cfg := decodeConfig(t, s)
	if cfg.BearerToken != token || string(cfg.TLSClientConfig.CAData) != string(member.CA) {
		t.Errorf("Argo CD config does not carry the token and the member's CA")
	}
	assertNoCredential(t, "member", token)
}

func TestAQuietClusterCostsNoWrites(t *testing.T) {
	putCredentials(t, "member-quiet", tokenCredentials(member.token(t)))
	createCluster(t, "member-quiet", member.Server, "member-quiet", nil)
	ready := waitReady(t, "member-quiet", metav1.ConditionTrue, v1.ReasonConnected)
	waitArgoCDSecret(t, "member-quiet")
	// Probes run every config.ProbePeriod; each finds what the status says, and writes nothing.
	start := getCluster(t, "member-quiet").ResourceVersion
	time.Sleep(4 * config.ProbePeriod)
	if now := getCluster(t, "member-quiet"); now.ResourceVersion != start {
		t.Errorf("a quiet Cluster was written (resourceVersion %s → %s; lastProbeTime %v → %v)",
			start, now.ResourceVersion, ready.Status.LastProbeTime, now.Status.LastProbeTime)
	}
	// A change is still written: the member's API server stops.
	must(t, member.stopAPIServer())
	defer func() { must(t, member.startAPIServer()) }()
	waitReady(t, "member-quiet", metav1.ConditionFalse, v1.ReasonUnreachable)
}

func TestAWrongTokenIsUnauthorized(t *testing.T) {
	wrong := "wrong-token-" + strings.Repeat("x", 40)
	putCredentials(t, "member-wrong-token", tokenCredentials(wrong))
	createCluster(t, "member-wrong-token", member.Server, "member-wrong-token", nil)

	c := waitReady(t, "member-wrong-token", metav1.ConditionFalse, v1.ReasonUnauthorized)
	if msg := readyMessage(c); !strings.Contains(msg, "401") || !strings.Contains(msg, member.Server) {
		t.Errorf("Ready message %q does not say the server refused the credentials", msg)
	}
	waitEvent(t, "member-wrong-token", v1.ReasonUnauthorized)
	assertNoCredential(t, "member-wrong-token", wrong)
}

func TestMissingOrUnusableCredentialsSayWhatToFix(t *testing.T) {
	createCluster(t, "member-late-credentials", member.Server, "member-late", nil)
	c := waitReady(t, "member-late-credentials", metav1.ConditionFalse, v1.ReasonCredentialsNotFound)
	if msg := readyMessage(c); !strings.Contains(msg, `"member-late"`) || !strings.Contains(msg, `"kokumi-system"`) || !strings.Contains(msg, "spec.credentialsRef") {
		t.Errorf("Ready message %q does not name the Secret, its namespace and the field", msg)
	}
	if _, err := argoCDSecret(t, "member-late-credentials"); !apierrors.IsNotFound(err) {
		t.Errorf("an Argo CD cluster Secret exists without credentials: %v", err)
	}

	putCredentials(t, "member-late", map[string][]byte{"password": []byte("hunter2-hunter2")})
	c = waitReady(t, "member-late-credentials", metav1.ConditionFalse, v1.ReasonInvalidCredentials)
	if msg := readyMessage(c); !strings.Contains(msg, `keys present: "password"`) || !strings.Contains(msg, `"token"`) {
		t.Errorf("Ready message %q does not name the keys present and the one expected", msg)
	}

	token := member.token(t)
	putCredentials(t, "member-late", tokenCredentials(token))
	waitReady(t, "member-late-credentials", metav1.ConditionTrue, v1.ReasonConnected)
	assertNoCredential(t, "member-late-credentials", token, "hunter2-hunter2")
}

func TestTheArgoCDClusterSecretFollowsCredentialRotation(t *testing.T) {
	first := member.token(t)
	putCredentials(t, "member-rotating", tokenCredentials(first))
	createCluster(t, "member-rotating", member.Server, "member-rotating", nil)
	waitReady(t, "member-rotating", metav1.ConditionTrue, v1.ReasonConnected)

	second := member.token(t)
	if second == first {
		t.Fatal("the member issued the same token twice")
	}
	putCredentials(t, "member-rotating", tokenCredentials(second))
	eventually(t, "the rotated token in the Argo CD cluster Secret", func() (bool, string) {
		s, err := argoCDSecret(t, "member-rotating")
		if err != nil {
			return false, err.Error()
		}
		return decodeConfig(t, s).BearerToken == second, "still the old token"
	})

	// Rotate to a kubeconfig with a client certificate the member trusts.
	user, err := member.env.AddUser(envtest.User{Name: "kokumi-cert", Groups: []string{"system:masters"}}, nil)
	must(t, err)
	kubeconfig, err := user.KubeConfig()
	must(t, err)
	parsed, err := clientcmd.Load(kubeconfig)
	must(t, err)
	var keyData []byte
	for _, u := range parsed.AuthInfos {
		keyData = u.ClientKeyData
	}
	putCredentials(t, "member-rotating", map[string][]byte{"kubeconfig": kubeconfig})
	eventually(t, "the client certificate in the Argo CD cluster Secret", func() (bool, string) {
		s, err := argoCDSecret(t, "member-rotating")
		if err != nil {
			return false, err.Error()
		}
		cfg := decodeConfig(t, s)
		return cfg.BearerToken == "" && string(cfg.TLSClientConfig.KeyData) == string(keyData) && len(cfg.TLSClientConfig.CAData) > 0,
			fmt.Sprintf("token set %v, key set %v", cfg.BearerToken != "", len(cfg.TLSClientConfig.KeyData) > 0)
	})
	c := waitReady(t, "member-rotating", metav1.ConditionTrue, v1.ReasonConnected)
	if c.Status.Version == "" {
		t.Error("no version with the client certificate")
	}
	assertNoCredential(t, "member-rotating", first, second, string(keyData))
}

func TestAStoppedMemberIsUnreachableAndReadyAgainWhenRestarted(t *testing.T) {
	token := member.token(t)
	putCredentials(t, "member-restarting", tokenCredentials(token))
	createCluster(t, "member-restarting", member.Server, "member-restarting", nil)
	waitReady(t, "member-restarting", metav1.ConditionTrue, v1.ReasonConnected)

	must(t, member.stopAPIServer())
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			must(t, member.startAPIServer())
		}
	})
	c := waitReady(t, "member-restarting", metav1.ConditionFalse, v1.ReasonUnreachable)
	if msg := readyMessage(c); !strings.Contains(msg, member.Server) || !strings.Contains(msg, "connection refused") {
		t.Errorf("Ready message %q does not carry the network error", msg)
	}
	if c.Status.Version != member.Version {
		t.Errorf("the last known version %q was dropped", c.Status.Version)
	}
	// No flapping: the first failed probe was retried before Ready turned False.
	if !loggedFor("probe failed; retrying before Ready turns False", "member-restarting") {
		t.Error("Ready turned False without a retry of the failed probe")
	}

	must(t, member.startAPIServer())
	restarted = true
	waitReady(t, "member-restarting", metav1.ConditionTrue, v1.ReasonConnected)
	// The recovery is told (a Normal Connected), the first Ready was not.
	waitEvent(t, "member-restarting", v1.ReasonConnected)
	reasons := clusterEvents(t, "member-restarting")
	if countString(reasons, v1.ReasonUnreachable) != 1 {
		t.Errorf("events %v: want one Unreachable, on the transition only", reasons)
	}
	if countString(reasons, v1.ReasonConnected) != 1 {
		t.Errorf("events %v: want one Connected, on the recovery only", reasons)
	}
	assertNoCredential(t, "member-restarting", token)
}

// clusterApplication is an Application of Kokumi's for cluster, at server.
func clusterApplication(cluster, server string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "Application",
		"metadata": map[string]any{
			"name":      "team-a-podinfo-" + cluster,
			"namespace": config.ArgoCDNamespace,
			"labels":    map[string]any{argocd.LabelCluster: cluster, argocd.LabelManagedBy: argocd.ManagedByKokumi},
		},
		"spec": map[string]any{
			"project":     "default",
			"source":      map[string]any{"repoURL": "oci://registry.example.com/team-a/podinfo", "targetRevision": "sha256:" + strings.Repeat("a", 64), "path": "."},
			"destination": map[string]any{"server": server, "namespace": "podinfo"},
		},
	}}
}

func TestDeletingAClusterWaitsForItsApplicationsThenRemovesItsArgoCDSecret(t *testing.T) {
	ctx := context.Background()
	token := member.token(t)
	putCredentials(t, "member-leaving", tokenCredentials(token))
	createCluster(t, "member-leaving", member.Server, "member-leaving", tier("leaving"))
	createProject(t, "leaving", "team-leaving")
	createEnvironment(t, "team-leaving", "edge", "leaving", metav1.LabelSelector{MatchLabels: tier("leaving")})
	waitReady(t, "member-leaving", metav1.ConditionTrue, v1.ReasonConnected)
	waitEnvironment(t, "team-leaving", "edge", 1, 1, v1.ReasonEnvironmentReady)
	waitArgoCDSecret(t, "member-leaving")

	app := clusterApplication("member-leaving", member.Server)
	must(t, env.Client.Create(ctx, app))
	must(t, env.Client.Delete(ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "member-leaving"}}))

	eventually(t, "the Cluster waits for its Application", func() (bool, string) {
		reasons := clusterEvents(t, "member-leaving")
		return containsString(reasons, "WaitingForApplications"), fmt.Sprint(reasons)
	})
	c := getCluster(t, "member-leaving")
	if c.DeletionTimestamp.IsZero() {
		t.Fatal("the Cluster is not being deleted")
	}
	if _, err := argoCDSecret(t, "member-leaving"); err != nil {
		t.Fatalf("the Argo CD cluster Secret went while an Application still deploys to it: %v", err)
	}
	// A Cluster being deleted has left its Environments at once.
	waitEnvironment(t, "team-leaving", "edge", 0, 0, v1.ReasonNoClusters)

	must(t, env.Client.Delete(ctx, app))
	eventually(t, "the Argo CD cluster Secret removed", func() (bool, string) {
		_, err := argoCDSecret(t, "member-leaving")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	eventually(t, "the Cluster gone", func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: "member-leaving"}, &v1.Cluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func TestADeletedArgoCDSecretIsRecreated(t *testing.T) {
	token := member.token(t)
	putCredentials(t, "member-repaired", tokenCredentials(token))
	createCluster(t, "member-repaired", member.Server, "member-repaired", nil)
	s := waitArgoCDSecret(t, "member-repaired")
	uid := s.UID
	must(t, env.Client.Delete(context.Background(), s))
	eventually(t, "Argo CD cluster Secret recreated", func() (bool, string) {
		s, err := argoCDSecret(t, "member-repaired")
		if err != nil {
			return false, err.Error()
		}
		return s.UID != uid && decodeConfig(t, s).BearerToken == token, "still the deleted one"
	})
}

// loggedFor reports whether a line the controllers logged says msg about the named object.
func loggedFor(msg, name string) bool {
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, msg) && strings.Contains(line, `"`+name+`"`) {
			return true
		}
	}
	return false
}

func containsString(list []string, s string) bool { return countString(list, s) > 0 }

func countString(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// Two Clusters of one server (as Argo CD compares servers: a trailing "/" or upper case does
// not make another one) would give Argo CD two identities to pick from at random: the one that
// does not sort first by name is not Ready and gets no Argo CD cluster Secret; when the first
// goes, it takes over. (test/badinput's cluster-server-duplicate has the newer one sort first.)
func TestASecondClusterOfTheSameServerGetsNoIdentity(t *testing.T) {
	token := member.token(t)
	putCredentials(t, "first-token", tokenCredentials(token))
	putCredentials(t, "second-token", tokenCredentials("a-stolen-or-stronger-token"))
	createCluster(t, "first-of-server", member.Server, "first-token", nil)
	waitReady(t, "first-of-server", metav1.ConditionTrue, v1.ReasonConnected)
	waitArgoCDSecret(t, "first-of-server")

	createCluster(t, "second-of-server", member.Server+"/", "second-token", nil)
	c := waitReady(t, "second-of-server", metav1.ConditionFalse, v1.ReasonServerConflict)
	if !strings.Contains(readyMessage(c), "Cluster first-of-server connects to the same server") {
		t.Errorf("Ready message %q does not name the first Cluster", readyMessage(c))
	}
	if _, err := argoCDSecret(t, "second-of-server"); !apierrors.IsNotFound(err) {
		t.Fatalf("the second Cluster of the server has an Argo CD cluster Secret: %v", err)
	}

	must(t, env.Client.Delete(context.Background(), &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "first-of-server"}}))
	waitArgoCDSecret(t, "second-of-server")
	waitReady(t, "second-of-server", metav1.ConditionFalse, v1.ReasonUnauthorized)
}

func TestADeletedClusterStopsWaitingOnceItsServerIsUnreachable(t *testing.T) {
	ctx := context.Background()
	// A server that is gone: a port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	gone := "https://" + ln.Addr().String()
	must(t, ln.Close())
	putCredentials(t, "member-gone", tokenCredentials(member.token(t)))
	createCluster(t, "member-gone", gone, "member-gone", nil)
	c := waitReady(t, "member-gone", metav1.ConditionFalse, v1.ReasonUnreachable)
	unreachableSince := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady).LastTransitionTime.Time

	// An Application that still names the cluster, with a finalizer nobody removes: Argo CD
	// could not delete anything on a server it cannot reach.
	app := clusterApplication("member-gone", gone)
	app.SetFinalizers([]string{"example.com/cleanup"})
	must(t, env.Client.Create(ctx, app))
	t.Cleanup(func() {
		app.SetFinalizers(nil)
		_ = env.Client.Update(ctx, app)
		_ = env.Client.Delete(ctx, app)
	})
	must(t, env.Client.Delete(ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "member-gone"}}))

	eventually(t, "the Cluster gone", func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: "member-gone"}, &v1.Cluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if waited := time.Since(unreachableSince); waited < config.UnreachableClusterDeletion {
		t.Errorf("the Cluster went %s after its server became Unreachable, before the %s it waits", waited, config.UnreachableClusterDeletion)
	}
	eventually(t, "an Event says why the Cluster stopped waiting", func() (bool, string) {
		reasons := clusterEvents(t, "member-gone")
		return containsString(reasons, "StoppedWaitingForApplications"), fmt.Sprint(reasons)
	})
	if _, err := argoCDSecret(t, "member-gone"); !apierrors.IsNotFound(err) {
		t.Errorf("the Argo CD cluster Secret stayed: %v", err)
	}
	// The Application is left to whoever holds its finalizer: Kokumi deletes none on this path.
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(app), app))
}
