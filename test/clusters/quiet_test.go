package clusters

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/controller/clusters"
	"github.com/kokumi-dev/kokumi/internal/controller/environment"
	"github.com/kokumi-dev/kokumi/internal/controller/status"
	"github.com/kokumi-dev/kokumi/internal/dev/bench"
)

// staleClient is the API server's client, except that Get of one object returns it as it was
// read earlier: a cache that has not yet seen the latest writes.
type staleClient struct {
	client.Client
	stale client.Object
}

func (s staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if key == client.ObjectKeyFromObject(s.stale) {
		switch o := obj.(type) {
		case *v1.Environment:
			s.stale.(*v1.Environment).DeepCopyInto(o)
			return nil
		case *v1.Cluster:
			s.stale.(*v1.Cluster).DeepCopyInto(o)
			return nil
		}
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// conflictLogged says whether the controllers logged a conflict as an error.
func conflictLogged() bool {
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "has been modified") && strings.Contains(line, "ERROR") {
			return true
		}
	}
	return false
}

// An Environment reconciled from a copy older than its status (another writer, or the
// reconciler's own last write the cache has not seen) conflicts: the reconcile returns no error,
// runs again soon, and the status stays as the newer write left it; the next reconcile, from a
// fresh copy, finds nothing to write.
func TestAnEnvironmentStatusConflictIsAQuietRequeue(t *testing.T) {
	ctx := context.Background()
	createProject(t, "conflict-env", "team-conflict")
	createEnvironment(t, "team-conflict", "edge", "conflict-env", metav1.LabelSelector{MatchLabels: tier("conflict")})
	waitEnvironment(t, "team-conflict", "edge", 0, 0, v1.ReasonNoClusters)
	var stale v1.Environment
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "team-conflict", Name: "edge"}, &stale))

	// The controller writes a newer status: one Cluster selected.
	createCluster(t, "conflict-a", "https://conflict-a.example.com:6443", "nowhere", tier("conflict"))
	waitEnvironment(t, "team-conflict", "edge", 1, 0, v1.ReasonEnvironmentReady)

	rec := events.NewFakeRecorder(10)
	r := &environment.Reconciler{Client: staleClient{Client: env.Client, stale: &stale}, Projects: env.Client, Recorder: rec, Config: config}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&stale)}
	res, err := status.QuietConflicts(r).Reconcile(ctx, req)
	if err != nil {
		t.Fatalf("a status conflict returned an error (logged as an error line): %v", err)
	}
	if res.RequeueAfter != status.ConflictRetry {
		t.Fatalf("result %+v: the stale write did not conflict, or the conflict is not retried after %v", res, status.ConflictRetry)
	}
	e := waitEnvironment(t, "team-conflict", "edge", 1, 0, v1.ReasonEnvironmentReady)
	if len(rec.Events) != 0 {
		t.Errorf("an unwritten status recorded an Event: %s", <-rec.Events)
	}

	// Run again from what the API server holds: the status is right, nothing to write.
	r.Client = env.Client
	res, err = status.QuietConflicts(r).Reconcile(ctx, req)
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("the retry: %+v, %v", res, err)
	}
	var after v1.Environment
	must(t, env.Client.Get(ctx, req.NamespacedName, &after))
	if after.ResourceVersion != e.ResourceVersion {
		t.Errorf("the retry wrote a status that was already right (resourceVersion %s → %s)", e.ResourceVersion, after.ResourceVersion)
	}
	if conflictLogged() {
		t.Error("the controllers logged a conflict as an error")
	}
}

// A Cluster reconciled from a copy older than the finalizer the reconciler added meets a
// conflict on its own write (not a status write): QuietConflicts, which both reconcilers run
// behind, turns it into a quiet requeue.
func TestAClusterWriteConflictIsAQuietRequeue(t *testing.T) {
	ctx := context.Background()
	c := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "conflict-finalizer"},
		Spec:       v1.ClusterSpec{Server: "https://conflict-finalizer.example.com:6443", CredentialsRef: v1.LocalObjectReference{Name: "nowhere"}},
	}
	must(t, env.Client.Create(ctx, c))
	stale := c.DeepCopy() // as created: no finalizer yet
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, c)
		eventually(t, "cluster conflict-finalizer deleted", func() (bool, string) {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), &v1.Cluster{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})
	now := waitReady(t, "conflict-finalizer", metav1.ConditionFalse, v1.ReasonCredentialsNotFound)
	if !containsString(now.Finalizers, clusters.Finalizer) {
		t.Fatalf("finalizers %v", now.Finalizers)
	}

	r := &clusters.Reconciler{Client: staleClient{Client: env.Client, stale: stale}, Recorder: events.NewFakeRecorder(10), Config: config}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}
	// Bare, the reconciler's finalizer write from the stale copy conflicts: the test lands it.
	if _, err := r.Reconcile(ctx, req); !apierrors.IsConflict(err) {
		t.Fatalf("the finalizer write from a stale copy: %v, want a conflict", err)
	}
	res, err := status.QuietConflicts(r).Reconcile(ctx, req)
	if err != nil {
		t.Fatalf("a conflict returned an error (logged as an error line): %v", err)
	}
	if res.RequeueAfter != status.ConflictRetry {
		t.Fatalf("result %+v: want a requeue after %v", res, status.ConflictRetry)
	}
	if after := waitReady(t, "conflict-finalizer", metav1.ConditionFalse, v1.ReasonCredentialsNotFound); !containsString(after.Finalizers, clusters.Finalizer) {
		t.Errorf("finalizers %v after the conflict", after.Finalizers)
	}
}

// Onboarding many Clusters records no Event per Cluster: each one's Ready condition says it
// became Ready, and the Environment's status counts them. A failure still records its Warning.
func TestOnboardingClustersRecordsNoEventPerCluster(t *testing.T) {
	const n = 50
	ctx := context.Background()
	members, err := bench.StartMembers()
	must(t, err)
	t.Cleanup(members.Close)
	createProject(t, "onboard", "team-onboard")
	createEnvironment(t, "team-onboard", "edge", "onboard", metav1.LabelSelector{MatchLabels: tier("onboard")})
	// The Environment counts its Clusters' changes in batches: a write a batch, not one per
	// few Clusters.
	batch := environment.ClusterChangesBatch
	statusWrites := countWrites(t, &v1.EnvironmentList{}, "team-onboard", "edge")
	began := time.Now()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("onboard-%02d", i)
		putCredentials(t, names[i], map[string][]byte{"token": []byte(bench.Token(names[i])), "ca.crt": members.CA})
		t.Cleanup(func() {
			_ = env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: config.Namespace}})
		})
		createCluster(t, names[i], members.Server(names[i]), names[i], tier("onboard"))
	}
	waitEnvironment(t, "team-onboard", "edge", n, n, v1.ReasonEnvironmentReady)
	took := time.Since(began)
	if got, most := statusWrites(), int(took/batch)+3; got > most {
		t.Errorf("onboarding %d Clusters in %s wrote the Environment %d times, want at most %d (one a batch of %s)",
			n, took.Round(time.Millisecond), got, most, batch)
	}

	// A failure is still told: the Warning of one Cluster whose credentials go. The recorder
	// sends Events in order, so once it is there the onboarding's would be too.
	must(t, env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names[0], Namespace: config.Namespace}}))
	waitReady(t, names[0], metav1.ConditionFalse, v1.ReasonCredentialsNotFound)
	waitEvent(t, names[0], v1.ReasonCredentialsNotFound)
	waitEnvironment(t, "team-onboard", "edge", n, n-1, v1.ReasonEnvironmentReady)

	var evs eventsv1.EventList
	must(t, env.Client.List(ctx, &evs))
	var perCluster, environment []string
	for _, e := range evs.Items {
		line := fmt.Sprintf("%s %s/%s: %s %s", e.Type, e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note)
		switch {
		case e.Regarding.Kind == "Cluster" && strings.HasPrefix(e.Regarding.Name, "onboard-") &&
			(e.Regarding.Name != names[0] || e.Reason != v1.ReasonCredentialsNotFound):
			perCluster = append(perCluster, line)
		case e.Regarding.Kind == "Environment" && e.Regarding.Namespace == "team-onboard":
			environment = append(environment, line)
		}
	}
	if len(perCluster) > 0 {
		t.Errorf("onboarding %d Clusters recorded %d Events about them, want none:\n%s", n, len(perCluster), strings.Join(perCluster, "\n"))
	}
	// The Environment's own Ready transitions (NoClusters while it was empty, Ready again once
	// the first Cluster joined), whatever the number of Clusters.
	if len(environment) > 2 {
		t.Errorf("onboarding %d Clusters recorded %d Events about their Environment, want its Ready transitions only:\n%s", n, len(environment), strings.Join(environment, "\n"))
	}
	if conflictLogged() {
		t.Error("the controllers logged a conflict as an error")
	}

	// Offboarding them, one by one as a person or a script would, costs the Environment a
	// write a batch too, not one per Cluster.
	offboarded := countWrites(t, &v1.EnvironmentList{}, "team-onboard", "edge")
	began = time.Now()
	for _, name := range names {
		must(t, env.Client.Delete(ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	}
	waitEnvironment(t, "team-onboard", "edge", 0, 0, v1.ReasonNoClusters)
	took = time.Since(began)
	if got, most := offboarded(), int(took/batch)+3; got > most {
		t.Errorf("offboarding %d Clusters in %s wrote the Environment %d times, want at most %d (one a batch of %s)",
			n, took.Round(time.Millisecond), got, most, batch)
	}
}

// countWrites watches the object name of namespace (list is its kind's list) and returns a
// function that says how many times it was written since.
func countWrites(t *testing.T, list client.ObjectList, namespace, name string) func() int {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	w, err := wc.Watch(context.Background(), list, client.InNamespace(namespace), client.MatchingFields{"metadata.name": name})
	must(t, err)
	var mu sync.Mutex
	writes := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			if e.Type == watch.Modified {
				mu.Lock()
				writes++
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return writes
	}
}
