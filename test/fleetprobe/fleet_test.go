package fleetprobe

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/controller/clusters"
)

// fleetSize is how many Clusters the test registers: KOKUMI_FLEET_N, or 100.
func fleetSize(t *testing.T) int {
	if v := os.Getenv("KOKUMI_FLEET_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("KOKUMI_FLEET_N=%q: want a number of Clusters, at least 100", v)
		}
		return n
	}
	return 100
}

// readyOf is "True/Connected" and the like.
func readyOf(c *v1.Cluster) string {
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady); cond != nil {
		return string(cond.Status) + "/" + cond.Reason
	}
	return ""
}

// observer watches every Cluster and keeps when each one's Ready last changed, and how many
// updates it saw.
type observer struct {
	mu      sync.Mutex
	ready   map[string]string
	changed map[string]time.Time
	updates int
}

func watchClusters(ctx context.Context, t *testing.T) *observer {
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1.ClusterList{})
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{ready: map[string]string{}, changed: map[string]time.Time{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*v1.Cluster)
			if !ok || ev.Type == watch.Bookmark {
				continue
			}
			now := time.Now()
			o.mu.Lock()
			o.updates++
			if r := readyOf(c); r != o.ready[c.Name] {
				o.ready[c.Name], o.changed[c.Name] = r, now
			}
			o.mu.Unlock()
		}
	}()
	return o
}

func (o *observer) count(ready string, names []string) (n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if names == nil {
		for _, r := range o.ready {
			if r == ready {
				n++
			}
		}
		return n
	}
	for _, name := range names {
		if o.ready[name] == ready {
			n++
		}
	}
	return n
}

func (o *observer) snapshot() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.updates
}

// clusterReconciles sums controller-runtime's reconcile counter of the cluster controller.
func clusterReconciles(t *testing.T) float64 {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "cluster" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

func eventually(t *testing.T, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, within, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// TestAFleetIsProbedWithoutReconcileWork registers a fleet (KOKUMI_FLEET_N Clusters, 100 by
// default) whose servers answer on one loopback TLS server, and prints: the time until every
// Cluster is Ready; over a quiet period, the probes per second, the Cluster status writes and
// reconciles (both should be 0); and the latency from the probe that finds a change to the
// status that says it, for clusters refused and then accepted again.
func TestAFleetIsProbedWithoutReconcileWork(t *testing.T) {
	n := fleetSize(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := watchClusters(ctx, t)
	if err := env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: config.Namespace},
		Data:       map[string][]byte{"token": []byte(memberToken), "ca.crt": members.CA},
	}); err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("edge-%05d", i)
	}
	start := time.Now()
	work := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 16 {
		wg.Go(func() {
			for name := range work {
				c := &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: v1.ClusterSpec{Server: members.server(name), CredentialsRef: v1.LocalObjectReference{Name: "fleet"}}}
				if err := env.Client.Create(ctx, c); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	created := time.Since(start)
	eventually(t, "every Cluster Ready", 90*time.Second+time.Duration(n)*50*time.Millisecond, func() (bool, string) {
		got := obs.count("True/Connected", nil)
		return got == n, fmt.Sprintf("%d of %d Ready (%d watch events)", got, n, obs.snapshot())
	})
	t.Logf("N=%d: Clusters created in %v; all Ready %v after the first create", n, created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// A quiet fleet: probes go on, nothing is written, nothing reconciled. The first probes of
	// every Cluster are done before the window starts: they came together, at creation.
	time.Sleep(5 * time.Second)
	updates0, reconciles0, probes0, conns0, t0 := obs.snapshot(), clusterReconciles(t), members.probes.Load(), members.conns.Load(), time.Now()
	window := config.ProbePeriod + config.ProbePeriod/5
	time.Sleep(window)
	elapsed := time.Since(t0)
	probes := members.probes.Load() - probes0
	updates, reconciles := obs.snapshot()-updates0, clusterReconciles(t)-reconciles0
	t.Logf("N=%d quiet for %v (period %v): %d probes, %.0f probes/s (fleet/period = %.0f/s); %d Cluster writes; %.0f Cluster reconciles",
		n, elapsed.Round(time.Millisecond), config.ProbePeriod, probes, float64(probes)/elapsed.Seconds(),
		float64(n)/config.ProbePeriod.Seconds(), updates, reconciles)
	if probes < int64(n)*8/10 {
		t.Errorf("%d probes in %v for %d Clusters probed every %v", probes, elapsed, n, config.ProbePeriod)
	}
	if updates != 0 || reconciles != 0 {
		t.Errorf("a quiet fleet made %d Cluster writes and %.0f reconciles, want none", updates, reconciles)
	}
	// The periodic probes come in bursts at the start of each clusters.ProbeTick (a quarter of it
	// at most), not spread one by one: far cheaper in CPU than waking the process for each.
	within := clusters.ProbeTick / 4
	if inBurst, total := members.burst(t0, t0.Add(elapsed), within); total == 0 || inBurst < total*9/10 {
		t.Errorf("%d of %d probes of the quiet window came in the first %v of their %v tick, want at least 90%%", inBurst, total, within, clusters.ProbeTick)
	}
	// --probe-keep-alive (on, as by default): every probe of the window reused its Cluster's
	// connection.
	if conns := members.conns.Load() - conns0; conns != 0 {
		t.Errorf("%d probes of a quiet fleet opened %d connections; with keep-alive they reuse one per Cluster", probes, conns)
	}

	// 50 clusters refuse the credentials, then accept them again.
	changed := names[:0:0]
	for i := 0; i < n && len(changed) < 50; i += n / 50 {
		changed = append(changed, names[i])
	}
	latencies := func(ok bool, want string) []time.Duration {
		var out []time.Duration
		obs.mu.Lock()
		defer obs.mu.Unlock()
		for _, name := range changed {
			seen := obs.changed[name]
			at, found := members.lastAnswer(name, ok, seen)
			if !found || obs.ready[name] != want {
				t.Errorf("%s: Ready %s, no answer before %v", name, obs.ready[name], seen)
				continue
			}
			out = append(out, seen.Sub(at))
		}
		return out
	}
	for _, name := range changed {
		members.refused.Store(name, true)
	}
	eventually(t, "the refused clusters Unauthorized", 3*config.ProbePeriod, func() (bool, string) {
		got := obs.count("False/Unauthorized", changed)
		return got == len(changed), fmt.Sprintf("%d of %d", got, len(changed))
	})
	down := latencies(false, "False/Unauthorized")
	for _, name := range changed {
		members.refused.Delete(name)
	}
	eventually(t, "the clusters Ready again", 3*config.ProbePeriod, func() (bool, string) {
		got := obs.count("True/Connected", changed)
		return got == len(changed), fmt.Sprintf("%d of %d", got, len(changed))
	})
	up := latencies(true, "True/Connected")
	t.Logf("N=%d probe-to-status latency, Ready→Unauthorized (the 2nd failure in a row): p50 %v p99 %v; Unauthorized→Ready: p50 %v p99 %v",
		n, percentile(down, 0.5).Round(time.Millisecond), percentile(down, 0.99).Round(time.Millisecond),
		percentile(up, 0.5).Round(time.Millisecond), percentile(up, 0.99).Round(time.Millisecond))
	if p := percentile(append(down, up...), 0.5); p > time.Second {
		t.Errorf("probe-to-status latency p50 %v, want under 1 s", p)
	}
}
