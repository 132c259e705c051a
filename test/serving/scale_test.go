package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/controller/registrycreds"
	"github.com/kokumi-dev/kokumi/internal/controller/serving"
)

// manyClusters registers n Clusters named prefix-00000… in parallel; ready decides each one's readiness.
func (f *fixture) manyClusters(prefix string, n int, ready func(i int) bool) {
	f.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("%s-%05d", prefix, i)
				if _, err := f.tryCluster(name, "https://"+name+".example:6443", ready(i)); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		f.t.Fatal(err)
	}
}

// writeCounter counts the writes a client makes, and keeps what each wrote.
type writeCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	wrote []string
}

// what lists the writes counted: verb, kind and name.
func (w *writeCounter) what() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.wrote, "; ")
}

func (w *writeCounter) client(c client.WithWatch) client.WithWatch {
	count := func(verb string, o client.Object) {
		w.n.Add(1)
		w.mu.Lock()
		w.wrote = append(w.wrote, fmt.Sprintf("%s %T %s", verb, o, client.ObjectKeyFromObject(o)))
		w.mu.Unlock()
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			count("create", o)
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			count("update", o)
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			count("patch", o)
			return c.Patch(ctx, o, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			count("delete", o)
			return c.Delete(ctx, o, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			count("update "+sub+" of", o)
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count("patch "+sub+" of", o)
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	})
}

// cachedClient reads through the manager's cache and writes to the API server, as the
// reconciler's own client does.
func cachedClient() client.WithWatch {
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: mgr.GetScheme(), Cache: &client.CacheOptions{Reader: mgr.GetCache(), Unstructured: true}})
	if err != nil {
		panic(err)
	}
	return c
}

func reconciler(c client.Client) *serving.Reconciler {
	return &serving.Reconciler{Client: c, Config: cfg, Recorder: mgr.GetEventRecorder("kokumi-serving-test"), Now: time.Now, ArgoCD: argo,
		PullSecrets: &registrycreds.PullSecrets{Client: c, Cache: env.Client, APIReader: env.Client, Config: cfg}}
}

func (f *fixture) request() ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKey{Namespace: f.ns, Name: "podinfo-edge"}}
}

func TestAQuietResyncWritesNothing(t *testing.T) {
	f := newFixture(t)
	f.manyClusters("q", 20, func(i int) bool { return i != 0 })
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.eventually("19 Applications", func() error {
		if n := len(f.apps()); n != 19 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	for i := 1; i < 20; i++ {
		if i%5 == 0 {
			f.playArgoCD(fmt.Sprintf("q-%05d", i), "Synced", "Degraded", prep.Spec.Artifact.Digest)
		} else {
			f.healthy(prep.Spec.Artifact.Digest, fmt.Sprintf("q-%05d", i))
		}
	}
	f.eventually("every state folded", func() error {
		s := f.ready(v1.ReasonDeploymentFailed, "failed on q-00005 (Degraded), q-00010 (Degraded), q-00015 (Degraded); healthy on")
		if want := (v1.ClusterCounts{Selected: 20, Healthy: 16, Degraded: 3, Held: 1}); s.Status.Clusters != want {
			return fmt.Errorf("counts %+v, want %+v", s.Status.Clusters, want)
		}
		return nil
	})
	f.settled()

	var writes writeCounter
	r := reconciler(writes.client(cachedClient()))
	for range 5 {
		if _, err := r.Reconcile(f.ctx, f.request()); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.n.Load(); n != 0 {
		t.Errorf("a quiet resync of 20 clusters made %d writes, want 0: %s", n, writes.what())
	}
}

func TestTwoHundredClustersListHeldDegradedProgressingCappedAt64(t *testing.T) {
	f := newFixture(t)
	// 200 clusters: every 4th not Ready (50 held), the others deploy.
	f.manyClusters("m", 200, func(i int) bool { return i%4 != 3 })
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.eventually("150 Applications", func() error {
		if n := len(f.apps()); n != 150 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	// Argo CD: 30 degraded, 60 healthy, the rest progressing.
	for i := range 200 {
		name := fmt.Sprintf("m-%05d", i)
		switch {
		case i%4 == 3:
		case i < 40:
			f.playArgoCD(name, "Synced", "Degraded", prep.Spec.Artifact.Digest)
		case i < 120:
			f.healthy(prep.Spec.Artifact.Digest, name)
		}
	}
	var s *v1.Serving
	f.eventually("the fold", func() error {
		s = f.serving()
		want := v1.ClusterCounts{Selected: 200, Held: 50, Degraded: 30, Healthy: 60, Progressing: 60}
		if s.Status.Clusters != want {
			return fmt.Errorf("counts %+v, want %+v", s.Status.Clusters, want)
		}
		return nil
	})
	if len(s.Status.Targets) != v1.MaxTargets || s.Status.TargetsOmitted != 140-64 {
		t.Fatalf("%d targets, %d omitted", len(s.Status.Targets), s.Status.TargetsOmitted)
	}
	for i, tg := range s.Status.Targets {
		want := "Held"
		if i >= 50 {
			want = "Degraded"
		}
		if tg.Conditions[0].Type != want {
			t.Fatalf("targets[%d] is %s, want %s", i, tg.Conditions[0].Type, want)
		}
		if i > 0 && (tg.Conditions[0].Type == s.Status.Targets[i-1].Conditions[0].Type) && tg.Cluster < s.Status.Targets[i-1].Cluster {
			t.Fatalf("targets out of name order at %d", i)
		}
	}
	// The spec's jsonpath prints cluster, reason and revision per line.
	out, err := env.Kubectl(f.ctx, "get", "serving", "podinfo-edge", "-n", f.ns, "-o",
		`jsonpath={range .status.targets[*]}{.cluster}{"\t"}{.conditions[0].reason}{"\t"}{.revision}{"\n"}{end}`)
	must(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 64 || lines[0] != "m-00003\tClusterNotReady\t" || !strings.HasPrefix(lines[50], "m-00000\tDegraded\t"+prep.Spec.Artifact.Digest) {
		t.Errorf("jsonpath printed %d lines: %q … %q", len(lines), lines[0], lines[min(50, len(lines)-1)])
	}
}

func TestTheReadyMessageAt2000ClustersNamesAFewAndCountsTheRest(t *testing.T) {
	f := newFixture(t)
	f.manyClusters("k", 2000, func(i int) bool { return i < 3 })
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.healthy(prep.Spec.Artifact.Digest, "k-00000", "k-00001", "k-00002")
	s := f.ready(v1.ReasonDeployed,
		"Deployed Preparation podinfo-edge-1 to k-00000, k-00001, k-00002; not ready: k-00003, k-00004, k-00005, k-00006, k-00007 … and 1,992 more")
	if s.Status.Clusters != (v1.ClusterCounts{Selected: 2000, Healthy: 3, Held: 1997}) {
		t.Errorf("counts %+v", s.Status.Clusters)
	}
	data, err := json.Marshal(s)
	must(t, err)
	t.Logf("Serving at 2,000 clusters: %d bytes", len(data))
	if len(data) > 64<<10 {
		t.Errorf("the Serving is %d bytes at 2,000 clusters", len(data))
	}
}

// BenchmarkReconcile1000Clusters measures one reconcile of a Serving of 1,000 clusters, on
// the real API server: the first one creates 1,000 Applications; the others (quiet resyncs)
// read the cache, decide and fold, and write nothing.
func BenchmarkReconcile1000Clusters(b *testing.B) {
	f := newFixture(b)
	f.manyClusters("bench", 1000, func(int) bool { return true })
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	start := time.Now()
	f.order("edge", prep.Name)
	f.eventually("1,000 Applications", func() error {
		if n := len(f.apps()); n != 1000 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	b.ReportMetric(time.Since(start).Seconds(), "s-to-1000-Applications")
	f.settled()
	var writes writeCounter
	r := reconciler(writes.client(cachedClient()))
	b.ResetTimer()
	for b.Loop() {
		if _, err := r.Reconcile(f.ctx, f.request()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(writes.n.Load())/float64(b.N), "writes/op")
}
