package verify

import (
	"context"
	"fmt"
	"net/url"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/analysis"
	"github.com/kokumi-dev/kokumi/internal/config"
)

// The HTTP checks run off the reconcile, as Jobs do: Start queues a run into a bounded pool
// of the HTTPRunner, and Read says whether it ended and what it said. A reconcile never waits
// on the network: a slow or tarpitting endpoint holds a slot of the pool (at most its timeout),
// never a Serving worker, and one namespace holds at most a quarter of the slots.
const (
	// DefaultHTTPWorkers is how many HTTP checks run at a time when HTTPRunner.Workers is not
	// set.
	DefaultHTTPWorkers = 16
	// PollHTTP is how often a Serving whose HTTP check is under way looks again, should the
	// word of its end (HTTPRunner.Done) not reach it.
	PollHTTP = 10 * time.Second
	// HTTPGrace is how long past its timeout a run may stay unended before Read fails it.
	HTTPGrace = 10 * time.Second
	// maxHTTPRuns bounds the runs the pool holds, queued, running and ended.
	maxHTTPRuns = 4096
	// keepHTTPResult is how long an ended run's result is kept for a Read.
	keepHTTPResult = 10 * time.Minute
	// DefaultClusterRequests is how many requests one run of a per-cluster check sends at
	// most, when HTTPRunner.ClusterRequests is not set (the controller's
	// --verify-cluster-requests).
	DefaultClusterRequests = config.DefaultVerifyClusterRequests
	// MaxClusterBody is the most of one cluster's answer a per-cluster check reads.
	MaxClusterBody = 256 << 10
	// maxSpread bounds how long the requests of a per-cluster run are spread over.
	maxSpread = 2 * time.Minute
)

// runKey names one run of a verification of a gate of a Serving's Preparation.
type runKey struct {
	namespace, serving, uid, preparation, wave, name string
	run                                              int32
}

// runState is where a run of the pool stands.
type runState int

const (
	queued runState = iota
	running
	ended
)

// httpRun is one run in the pool, or one request of a per-cluster run.
type httpRun struct {
	key     runKey
	spec    v1.HTTPVerification
	ctx     context.Context
	state   runState
	started time.Time
	ended   time.Time
	outcome Outcome
	// fleet is set on a per-cluster run: it runs until its requests ended and were judged.
	fleet *fleetRun
	// parent is set on a request of a per-cluster run, which starts at notBefore and keeps
	// its cluster's answer.
	parent    *httpRun
	notBefore time.Time
	answer    analysis.Answer
}

// fleetRun is what a per-cluster run asks: one request a cluster, of the wave and of the
// baseline, spread over spread; pending count those not ended.
type fleetRun struct {
	compare  string
	requests []*httpRun
	pending  int
	skipped  int
	spread   time.Duration
}

func keyOf(facts Facts, wave, name string, run int32) runKey {
	k := runKey{namespace: facts.Namespace, preparation: facts.Preparation, wave: wave, name: name, run: run}
	if s := facts.Serving; s != nil {
		k.serving, k.uid = s.Name, string(s.UID)
	}
	return k
}

// Start queues run n of an http verification, unless the pool holds it already (a reconcile
// whose status write was lost started it). It returns at once.
func (h *HTTPRunner) Start(ctx context.Context, spec *v1.Verification, wave string, run int32, facts Facts) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.start(ctx, spec, keyOf(facts, wave, spec.Name, run), facts)
}

// Read says whether run n ended, and what it said. A run the pool does not hold (the controller
// restarted since it started, or its result was dropped) is started again; one that is still
// under way HTTPGrace past its timeout fails.
func (h *HTTPRunner) Read(ctx context.Context, spec *v1.Verification, wave string, run int32, facts Facts) (Outcome, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := keyOf(facts, wave, spec.Name, run)
	r := h.runs[key]
	switch {
	case r == nil:
		logf.FromContext(ctx).Info("an HTTP check under way is not known here (the controller restarted): it runs again",
			"verification", spec.Name, "wave", wave, "run", run)
		h.start(ctx, spec, key, facts)
		return Outcome{}, false
	case r.state == ended:
		return r.outcome, true
	case r.state == running && time.Since(r.started) > h.deadline(r):
		if r.fleet != nil {
			return Outcome{Message: fmt.Sprintf("%d of the %d requests of the run did not end within %s", r.fleet.pending, len(r.fleet.requests), h.deadline(r).Round(time.Second))}, true
		}
		return Outcome{Message: fmt.Sprintf("%s did not end within its timeout of %s", r.spec.URL, httpTimeout(&r.spec))}, true
	}
	return Outcome{}, false
}

// start queues the run of key, its url and body with the release's facts (a per-cluster
// check's, one request a cluster, each with the cluster's); h.mu is held.
func (h *HTTPRunner) start(ctx context.Context, spec *v1.Verification, key runKey, facts Facts) {
	if h.runs == nil {
		h.runs = map[runKey]*httpRun{}
		h.perNamespace = map[string]int{}
	}
	if _, ok := h.runs[key]; ok {
		return
	}
	h.drop()
	// The run's context outlives the reconcile's: it keeps its logger only.
	log := logf.FromContext(ctx).WithValues("verification", spec.Name, "wave", key.wave, "run", key.run)
	r := &httpRun{key: key, spec: *spec.HTTP.DeepCopy(), ctx: logf.IntoContext(context.Background(), log)}
	h.runs[key] = r
	if len(h.runs) > maxHTTPRuns || len(h.queue) > maxHTTPRuns*4 {
		r.state, r.ended = ended, time.Now()
		r.outcome = Outcome{Message: fmt.Sprintf("not run: %d HTTP checks are queued or running on the controller, its most; raise --verify-workers", maxHTTPRuns)}
		return
	}
	if !spec.PerCluster {
		vars := facts.vars("")
		r.spec.URL, r.spec.Body = analysis.Expand(r.spec.URL, vars, url.QueryEscape), analysis.Expand(r.spec.Body, vars, nil)
		h.queue = append(h.queue, r)
		h.dispatch()
		return
	}
	wave, baseline, skipped := h.pick(spec, facts, int(key.run))
	f := &fleetRun{compare: spec.Compare, skipped: skipped, spread: spreadOf(spec)}
	r.fleet, r.state, r.started = f, running, time.Now()
	all := len(wave) + len(baseline)
	for i, c := range append(wave, baseline...) {
		vars := facts.vars(c)
		req := &httpRun{key: key, spec: r.spec, ctx: r.ctx, parent: r, notBefore: r.started.Add(f.spread * time.Duration(i) / time.Duration(max(all, 1))),
			answer: analysis.Answer{Cluster: c, Labels: facts.Labels[c], Baseline: i >= len(wave)}}
		req.spec.URL, req.spec.Body = analysis.Expand(r.spec.URL, vars, url.QueryEscape), analysis.Expand(r.spec.Body, vars, nil)
		f.requests = append(f.requests, req)
		h.queue = append(h.queue, req)
	}
	if f.pending = all; all == 0 {
		r.state, r.ended = ended, time.Now()
		r.outcome = Outcome{Message: "no cluster to ask"}
		return
	}
	h.dispatch()
}

// pick chooses the clusters a per-cluster run asks: those of the wave and, with compare, of the
// baseline, at most ClusterRequests in all (the baseline at most half of them while the wave
// has more). Past it, each run asks another window of the names, so that the runs cover
// them all; skipped counts those this one leaves out.
func (h *HTTPRunner) pick(spec *v1.Verification, facts Facts, run int) (wave, baseline []string, skipped int) {
	limit := h.ClusterRequests
	if limit <= 0 {
		limit = DefaultClusterRequests
	}
	var base []string
	if spec.Compare != "" {
		base = facts.Baseline
	}
	nBase := min(len(base), limit/2)
	nWave := min(len(facts.Clusters), limit-nBase)
	nBase = min(len(base), limit-nWave)
	wave, baseline = window(facts.Clusters, nWave, run), window(base, nBase, run)
	return wave, baseline, len(facts.Clusters) + len(base) - nWave - nBase
}

// window is n of names, from the n×run-th on, wrapping around.
func window(names []string, n, run int) []string {
	if n >= len(names) {
		return names
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, names[(n*run+i)%len(names)])
	}
	return out
}

// spreadOf is how long the requests of a per-cluster run of spec are spread over: half its
// interval, at most maxSpread.
func spreadOf(spec *v1.Verification) time.Duration {
	interval := DefaultInterval
	if spec.Interval != nil && spec.Interval.Duration > 0 {
		interval = spec.Interval.Duration
	}
	return min(interval/2, maxSpread)
}

// deadline is how long after it started a run under way fails: its timeout and HTTPGrace; a
// per-cluster run's requests are spread, and take turns of the namespace's share of the pool.
func (h *HTTPRunner) deadline(r *httpRun) time.Duration {
	d := httpTimeout(&r.spec) + HTTPGrace
	if f := r.fleet; f != nil {
		_, share := h.workers()
		turns := (len(f.requests) + share - 1) / share
		d = f.spread + time.Duration(turns)*httpTimeout(&r.spec) + HTTPGrace
	}
	return d
}

// drop forgets the ended runs kept longer than keepHTTPResult, and the oldest ended ones while
// the pool holds maxHTTPRuns; h.mu is held.
func (h *HTTPRunner) drop() {
	now := time.Now()
	var oldest *httpRun
	for k, r := range h.runs {
		if r.state != ended {
			continue
		}
		if now.Sub(r.ended) > keepHTTPResult {
			delete(h.runs, k)
			continue
		}
		if oldest == nil || r.ended.Before(oldest.ended) {
			oldest = r
		}
	}
	if len(h.runs) >= maxHTTPRuns && oldest != nil {
		delete(h.runs, oldest.key)
	}
}

// workers is the pool's size, and one namespace's share of it.
func (h *HTTPRunner) workers() (all, perNamespace int) {
	all = h.Workers
	if all <= 0 {
		all = DefaultHTTPWorkers
	}
	return all, max(all/4, 1)
}

// dispatch runs the queued runs in their order while slots are free, skipping those of a
// namespace that runs its share; h.mu is held.
func (h *HTTPRunner) dispatch() {
	all, share := h.workers()
	now := time.Now()
	var wake time.Time
	for i := 0; i < len(h.queue) && h.running < all; {
		r := h.queue[i]
		if r.notBefore.After(now) {
			if wake.IsZero() || r.notBefore.Before(wake) {
				wake = r.notBefore
			}
			i++
			continue
		}
		if h.perNamespace[r.key.namespace] >= share {
			i++
			continue
		}
		h.queue = append(h.queue[:i], h.queue[i+1:]...)
		h.running++
		h.perNamespace[r.key.namespace]++
		r.state, r.started = running, time.Now()
		go h.do(r)
	}
	if !wake.IsZero() && (h.wake.IsZero() || wake.Before(h.wake)) {
		// The next request of a per-cluster run that is spread is due then.
		h.wake = wake
		time.AfterFunc(time.Until(wake), func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if !h.wake.After(time.Now()) {
				h.wake = time.Time{}
			}
			h.dispatch()
		})
	}
}

// do runs r, keeps what it said, frees its slot and says it ended; the last request of a
// per-cluster run to end judges the run's answers (judge).
func (h *HTTPRunner) do(r *httpRun) {
	limit := int64(MaxBody)
	if r.parent != nil {
		limit = MaxClusterBody
	}
	o, answer := h.ask(r.ctx, &r.spec, limit)
	h.mu.Lock()
	r.state, r.ended, r.outcome = ended, time.Now(), o
	h.running--
	if h.perNamespace[r.key.namespace]--; h.perNamespace[r.key.namespace] <= 0 {
		delete(h.perNamespace, r.key.namespace)
	}
	done := r
	if p := r.parent; p != nil {
		answer.Cluster, answer.Labels, answer.Baseline = r.answer.Cluster, r.answer.Labels, r.answer.Baseline
		r.answer = answer
		if p.fleet.pending--; p.fleet.pending > 0 {
			done = nil
		} else {
			done = p
		}
	}
	h.dispatch()
	h.mu.Unlock()
	if done == nil {
		return
	}
	if done.fleet != nil {
		h.judge(done)
	}
	if h.Done != nil && done.key.serving != "" {
		h.Done(done.key.namespace, done.key.serving)
	}
}

// judge says what the answers of the per-cluster run p say (analysis.Judge), off the lock.
func (h *HTTPRunner) judge(p *httpRun) {
	var wave, baseline []analysis.Answer
	for _, req := range p.fleet.requests {
		if req.answer.Baseline {
			baseline = append(baseline, req.answer)
		} else {
			wave = append(wave, req.answer)
		}
	}
	var o Outcome
	compare, err := h.compareProgram(p.fleet.compare)
	if err != nil {
		o.Message = "compare cannot be used: " + err.Error() + "; fix the verification's compare"
	} else {
		v := analysis.Judge(p.ctx, compare, wave, baseline, p.fleet.skipped)
		o = Outcome{Passed: v.Passed, Message: v.Message, Fleet: &v}
	}
	logf.FromContext(p.ctx).Info("a per-cluster HTTP verification was judged", "passed", o.Passed, "message", o.Message)
	h.mu.Lock()
	p.state, p.ended, p.outcome = ended, time.Now(), o
	for _, req := range p.fleet.requests {
		req.answer.Body = nil // judged: the answers are not kept
	}
	h.mu.Unlock()
}
