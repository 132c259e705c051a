package verify

import (
	"context"
	"fmt"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
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

// httpRun is one run in the pool.
type httpRun struct {
	key     runKey
	spec    v1.HTTPVerification
	ctx     context.Context
	state   runState
	started time.Time
	ended   time.Time
	outcome Outcome
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
	h.start(ctx, spec, keyOf(facts, wave, spec.Name, run))
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
		h.start(ctx, spec, key)
		return Outcome{}, false
	case r.state == ended:
		return r.outcome, true
	case r.state == running && time.Since(r.started) > httpTimeout(&r.spec)+HTTPGrace:
		return Outcome{Message: fmt.Sprintf("%s did not end within its timeout of %s", r.spec.URL, httpTimeout(&r.spec))}, true
	}
	return Outcome{}, false
}

// start queues the run of key; h.mu is held.
func (h *HTTPRunner) start(ctx context.Context, spec *v1.Verification, key runKey) {
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
	if len(h.runs) > maxHTTPRuns {
		r.state, r.ended = ended, time.Now()
		r.outcome = Outcome{Message: fmt.Sprintf("not run: %d HTTP checks are queued or running on the controller, its most; raise --verify-workers", maxHTTPRuns)}
		return
	}
	h.queue = append(h.queue, r)
	h.dispatch()
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
	for i := 0; i < len(h.queue) && h.running < all; {
		r := h.queue[i]
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
}

// do runs r, keeps what it said, frees its slot and says it ended.
func (h *HTTPRunner) do(r *httpRun) {
	o := h.Run(r.ctx, &r.spec)
	h.mu.Lock()
	r.state, r.ended, r.outcome = ended, time.Now(), o
	h.running--
	if h.perNamespace[r.key.namespace]--; h.perNamespace[r.key.namespace] <= 0 {
		delete(h.perNamespace, r.key.namespace)
	}
	h.dispatch()
	h.mu.Unlock()
	if h.Done != nil && r.key.serving != "" {
		h.Done(r.key.namespace, r.key.serving)
	}
}
