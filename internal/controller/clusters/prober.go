package clusters

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kokumi-dev/kokumi/internal/cluster"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// DefaultProbeWorkers is how many probes run at a time when Config.ProbeWorkers is 0: at a
// 30 s period and probes of a few milliseconds, 32 keep up with far more than 10,000 Clusters,
// and with 32 servers that time out (10 s each) at once a healthy one waits at most that long.
const DefaultProbeWorkers = 32

// ProbeTick is the grain of the periodic probes: each Cluster's next probe is due at the start
// of the tick its jittered period ends in (never later), so that the fleet's probes run in
// bursts, one a tick, rather than one every few milliseconds. A process woken 333 times a second
// from idle, as by 10,000 Clusters probed every 30 s one at a time, spends most of its probes'
// CPU in the scheduler and the kernel waking and parking threads; in a burst the threads stay
// awake from one probe to the next. Probes after a change, and the retry of a failure, are not
// held to it.
const ProbeTick = time.Second

// Prober probes the server of every Cluster it tracks on a period, with jitter, in a bounded
// pool of workers of its own: a slow or dead server holds a probe worker, never a reconcile
// worker. Each Cluster keeps one transport (and, with keepAlive, its TLS connection) from probe
// to probe, until its server or credentials change or it is forgotten.
//
// A probe's result goes back to the Cluster reconcile, which writes the status, only when it
// changes what the status says (Ready, its reason, the version), or after the failures in a row
// that turn a Ready Cluster not Ready: a quiet fleet costs probes and nothing else.
//
// It is a manager Runnable, and Source is the source that feeds the Cluster controller.
type Prober struct {
	period    time.Duration
	workers   int
	keepAlive bool
	log       logr.Logger

	mu      sync.Mutex
	targets map[string]*probeTarget
	due     probeHeap
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	wake    chan struct{}

	probes   atomic.Int64
	enqueued atomic.Int64
}

// ProbeResult is the last probe of a Cluster.
type ProbeResult struct {
	cluster.Result
	// At is when the probe ended.
	At metav1.Time
	// FailuresInARow counts the failed probes up to this one, since the last that connected.
	FailuresInARow int
}

// probeState is what a Cluster's status says of its probes.
type probeState struct {
	status          metav1.ConditionStatus
	reason, version string
	// fresh is true when the status holds a probe's result for the Cluster's generation.
	fresh bool
}

type probeTarget struct {
	name       string
	key        string // cluster.Key of server and credentials
	server     string
	creds      cluster.Credentials
	client     *cluster.Client // nil until the first probe, and after a change
	generation int64
	known      probeState
	failures   int
	result     *ProbeResult // of the current key; nil until probed
	epoch      uint64       // bumped when the key changes: a probe of an older epoch is dropped
	due        time.Time
	index      int  // in the heap; -1 when not scheduled (running, or forgotten)
	running    bool // a worker probes it now
	again      bool // probe again as soon as the running probe ends
}

// NewProber probes every period with workers probes at a time (DefaultProbeWorkers when 0),
// keeping each Cluster's connection from probe to probe when keepAlive.
func NewProber(period time.Duration, workers int, keepAlive bool) *Prober {
	if workers <= 0 {
		workers = DefaultProbeWorkers
	}
	return &Prober{
		period:    period,
		workers:   workers,
		keepAlive: keepAlive,
		log:       ctrl.Log.WithName("cluster-prober"),
		targets:   map[string]*probeTarget{},
		wake:      make(chan struct{}, 1),
	}
}

// Source enqueues a Cluster whose probe result the reconcile should write. Give it to the
// Cluster controller (WatchesRawSource); the queue deduplicates, so a burst of results costs
// one reconcile per Cluster.
func (p *Prober) Source() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.queue = q
		return nil
	})
}

// NeedLeaderElection is true: only the leader probes, as only it writes the statuses.
func (p *Prober) NeedLeaderElection() bool { return true }

// Stats are how many probes ran and how many of them handed a result to the reconcile.
func (p *Prober) Stats() (probes, enqueued int64) { return p.probes.Load(), p.enqueued.Load() }

// Start runs the workers and the schedule until ctx ends, then closes every transport.
func (p *Prober) Start(ctx context.Context) error {
	work := make(chan *probeTarget)
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case t := <-work:
					p.run(ctx, t)
				}
			}
		})
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		t, wait := p.next(time.Now())
		p.mu.Unlock()
		if t != nil {
			select {
			case work <- t:
				continue
			case <-ctx.Done():
			}
		} else {
			timer.Reset(wait)
			select {
			case <-p.wake:
				continue
			case <-timer.C:
				continue
			case <-ctx.Done():
			}
		}
		break
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.targets {
		if t.client != nil {
			t.client.Close()
			t.client = nil
		}
	}
	return nil
}

// next pops the first target due at now and marks it running, or says how long until one is.
func (p *Prober) next(now time.Time) (*probeTarget, time.Duration) {
	if len(p.due) == 0 {
		return nil, time.Hour
	}
	t := p.due[0]
	if wait := t.due.Sub(now); wait > 0 {
		return nil, wait
	}
	heap.Pop(&p.due)
	t.running = true
	return t, 0
}

// run probes one target and hands its result on.
func (p *Prober) run(ctx context.Context, t *probeTarget) {
	p.mu.Lock()
	epoch, client, server, creds := t.epoch, t.client, t.server, t.creds
	p.mu.Unlock()

	var res cluster.Result
	start := time.Now()
	if client == nil {
		var built *cluster.Client
		built, res = cluster.NewClient(server, creds, cluster.Timeout(p.period), p.keepAlive)
		if built != nil {
			p.mu.Lock()
			if t.epoch == epoch && t.client == nil && p.targets[t.name] == t {
				t.client = built
			} else {
				defer built.Close()
			}
			p.mu.Unlock()
			client = built
		}
	}
	if client != nil {
		res = client.Probe(ctx)
	}
	if ctx.Err() != nil {
		return // stopping: the result says nothing of the server
	}
	kmetrics.ObserveProbe(res.Connected(), time.Since(start))
	p.probes.Add(1)

	p.mu.Lock()
	t.running = false
	now := time.Now()
	if p.targets[t.name] != t {
		p.mu.Unlock()
		return // forgotten meanwhile
	}
	if t.epoch != epoch {
		// The server or credentials changed during the probe: probe again with the new ones.
		t.again = false
		p.schedule(t, now)
		p.mu.Unlock()
		return
	}
	if res.Connected() {
		t.failures = 0
	} else {
		t.failures++
	}
	t.result = &ProbeResult{Result: res, At: metav1.NewTime(now), FailuresInARow: t.failures}
	next := now.Add(cluster.Jitter(p.period, rand.Float64())).Truncate(ProbeTick)
	enqueue := false
	switch {
	case t.known.fresh && t.known.status == probeStatus(res) && t.known.reason == res.Reason && t.known.version == probeVersion(res, t.known.version):
		// What the status says already: nothing to write.
	case !res.Connected() && !cluster.ReportFailure(t.known.status == metav1.ConditionTrue, t.failures):
		p.log.Info("probe failed; retrying before Ready turns False", "cluster", t.name,
			"reason", res.Reason, "message", res.Message, "failuresInARow", t.failures)
		next = now.Add(cluster.RetryDelay(p.period))
	default:
		enqueue = true
	}
	if t.again {
		t.again = false
		next = now
	}
	p.schedule(t, next)
	q := p.queue
	p.mu.Unlock()
	if enqueue && q != nil {
		p.enqueued.Add(1)
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: t.name}})
	}
}

// Track starts or goes on probing the Cluster name at server with creds, and returns its last
// probe's result, if one was made with these server and credentials. A new Cluster, another
// server or other credentials (a rotated Secret) are probed at once, with a new transport; so is
// a new generation of the Cluster. known is what the Cluster's status says now.
func (p *Prober) Track(name string, generation int64, server string, creds cluster.Credentials, known probeState) (ProbeResult, bool) {
	key := cluster.Key(server, creds)
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.targets[name]
	if t == nil {
		t = &probeTarget{name: name, index: -1}
		p.targets[name] = t
	}
	t.known = known
	switch {
	case t.key != key:
		if t.client != nil {
			t.client.Close()
			t.client = nil
		}
		t.key, t.server, t.creds = key, server, creds
		t.epoch++
		t.result, t.failures = nil, 0
		p.probeNow(t)
	case t.generation != generation:
		p.probeNow(t)
	}
	t.generation = generation
	if t.result == nil {
		return ProbeResult{}, false
	}
	return *t.result, true
}

// Known tells the prober what the Cluster's status says after the reconcile wrote it.
func (p *Prober) Known(name string, known probeState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.targets[name]; t != nil {
		t.known = known
	}
}

// Forget stops probing the Cluster and closes its transport.
func (p *Prober) Forget(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.targets[name]
	if t == nil {
		return
	}
	if t.index >= 0 {
		heap.Remove(&p.due, t.index)
	}
	if t.client != nil {
		t.client.Close()
		t.client = nil
	}
	delete(p.targets, name)
}

// Tracked is how many Clusters are probed.
func (p *Prober) Tracked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.targets)
}

// probeNow schedules t's next probe now, or right after the one running.
func (p *Prober) probeNow(t *probeTarget) {
	if t.running {
		t.again = true
		return
	}
	p.schedule(t, time.Now())
}

// schedule sets when t is probed next; the caller holds p.mu.
func (p *Prober) schedule(t *probeTarget, at time.Time) {
	t.due = at
	if t.index >= 0 {
		heap.Fix(&p.due, t.index)
	} else {
		heap.Push(&p.due, t)
	}
	if p.due[0] == t {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func probeStatus(r cluster.Result) metav1.ConditionStatus {
	if r.Connected() {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// probeVersion is the version the status says after the probe: the server's, or the last known
// when the probe did not read one.
func probeVersion(r cluster.Result, known string) string {
	if r.Version == "" {
		return known
	}
	return text.Truncate(r.Version, clusterMaxVersion)
}

// probeHeap orders targets by when they are due.
type probeHeap []*probeTarget

func (h probeHeap) Len() int           { return len(h) }
func (h probeHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h probeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

// Push adds a target; for container/heap.
func (h *probeHeap) Push(x any) {
	t := x.(*probeTarget)
	t.index = len(*h)
	*h = append(*h, t)
}

// Pop removes the last target; for container/heap.
func (h *probeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
