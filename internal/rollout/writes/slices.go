// Package writes holds the stateful mechanics of a Serving's roll-out writes, apart from its
// reconciler and from the rules of internal/rollout: writes in slices that hold no worker for
// long, the memory of writes the cache has not shown yet and of Applications that are someone
// else's, the memo of which Applications are as wanted, the clusters past status.targets' cap,
// and the pool of writers. Each remembers, per Serving, under its own mutex. Nothing here
// decides what the roll-out does: internal/rollout and internal/fleet do.
package writes

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/gate"
)

const (
	// DefaultWriteSlice is how many Application writes one reconcile of a Serving
	// makes at most when Config.ApplicationWriteSlice is 0.
	DefaultWriteSlice = 1000

	// SliceTime is how long one reconcile of a Serving starts Application writes:
	// then it writes its progress and runs again, so that no worker is held for minutes.
	SliceTime = 10 * time.Second

	// ProgressInterval is how often, at most, a roll-out writes its progress to the Serving.
	ProgressInterval = 2 * time.Second

	// InFlightPatience is how long a written Application the cache has not shown yet is waited
	// for before it is written again.
	InFlightPatience = 30 * time.Second

	// ForeignPatience is how long an Application of a name Kokumi would write, found to be
	// not the Serving's, is taken as still there before a create looks again; shorter than
	// the Serving's recheck of one (gate.RecheckArgoCD), so that each recheck looks.
	ForeignPatience = gate.RecheckArgoCD - 10*time.Second
)

// Writes remembers, per Serving, the Applications its last slices wrote, until the
// cache shows them, and when it last wrote its progress.
type Writes struct {
	mu         sync.Mutex
	written    map[types.NamespacedName]map[string]writtenApplication
	progressAt map[types.NamespacedName]time.Time
	// notOurs holds, per Serving, the Applications of names it would write that exist and are
	// someone else's: the cache holds only Kokumi's.
	notOurs map[types.NamespacedName]map[string]foreignApplication
}

// foreignApplication is an Application that is not the Serving's, read when a create met it.
type foreignApplication struct {
	app *argocd.Application
	at  time.Time
}

// RememberForeign keeps app, found to be not the Serving's, for ForeignPatience.
func (w *Writes) RememberForeign(key types.NamespacedName, app *argocd.Application, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.notOurs == nil {
		w.notOurs = map[types.NamespacedName]map[string]foreignApplication{}
	}
	if w.notOurs[key] == nil {
		w.notOurs[key] = map[string]foreignApplication{}
	}
	w.notOurs[key][app.GetName()] = foreignApplication{app: app, at: now}
}

// Foreign returns the Application of name the Serving found not its own less than
// ForeignPatience ago, or nil; it forgets older ones.
func (w *Writes) Foreign(key types.NamespacedName, name string, now time.Time) *argocd.Application {
	w.mu.Lock()
	defer w.mu.Unlock()
	f, ok := w.notOurs[key][name]
	if !ok {
		return nil
	}
	if now.Sub(f.at) > ForeignPatience {
		delete(w.notOurs[key], name)
		if len(w.notOurs[key]) == 0 {
			delete(w.notOurs, key)
		}
		return nil
	}
	return f.app
}

// writtenApplication is one write: replaced is the resourceVersion it replaced ("" for a
// create); the cache has caught up once it shows the Application at another.
type writtenApplication struct {
	replaced string
	at       time.Time
}

// Slice is the share of a roll-out's writes one reconcile makes.
type Slice struct {
	key      types.NamespacedName
	limit    int
	deadline time.Time
	// inFlight are Applications written by an earlier slice that the cache does not show yet:
	// they are not written again, and count as written.
	inFlight map[string]bool
	// total is how many Applications the roll-out wants; current how many are as wanted.
	total, current int
	// started and deferred count this slice's writes and deletes begun and left for the next
	// slice; done its writes that succeeded.
	started, deferred, done int
	written                 map[string]writtenApplication
}

// NewSlice sizes one reconcile's share of the writes the decisions of the Serving key ask for:
// at most limit writes and deletes, and SliceTime; inFlight are the Applications earlier slices
// wrote that the cache (byName) does not show yet.
func NewSlice(key types.NamespacedName, limit int, decisions []fleet.Decision, byName map[string]*argocd.Application, inFlight map[string]bool) *Slice {
	if limit <= 0 {
		limit = DefaultWriteSlice
	}
	sl := &Slice{key: key, limit: limit, deadline: time.Now().Add(SliceTime), written: map[string]writtenApplication{}, inFlight: inFlight}
	for i := range decisions {
		d := &decisions[i]
		existing := byName[d.Application]
		switch {
		case d.Write:
			sl.total++
			if sl.inFlight[d.Application] {
				sl.current++
			}
		case !d.Remove && existing != nil && argocd.IsKokumis(existing, key.Namespace, key.Name):
			sl.total++
			sl.current++
		}
	}
	return sl
}

// Key is the Serving the slice writes for.
func (sl *Slice) Key() types.NamespacedName { return sl.key }

// More says whether writes were left for the next slice.
func (sl *Slice) More() bool { return sl.deferred > 0 }

// Succeeded counts this slice's writes that went through.
func (sl *Slice) Succeeded() int { return sl.done }

// Pending says whether Applications written by earlier slices are not in the cache yet.
func (sl *Slice) Pending() bool { return len(sl.inFlight) > 0 }

// Progress is how many Applications are as wanted after this slice, of how many.
func (sl *Slice) Progress() (current, total int) { return min(sl.current+sl.done, sl.total), sl.total }

// Take says whether the write or delete of d is made in this slice: not when an earlier slice
// wrote it and the cache does not show it yet, nor once the slice is full or its time is up.
func (sl *Slice) Take(d *fleet.Decision) bool {
	if d.Write && sl.inFlight[d.Application] {
		return false
	}
	if sl.started >= sl.limit || time.Now().After(sl.deadline) {
		sl.deferred++
		return false
	}
	sl.started++
	return true
}

// Wrote records a write that succeeded; existing is the Application it replaced, or nil.
func (sl *Slice) Wrote(d *fleet.Decision, existing *argocd.Application) {
	if !d.Write {
		return
	}
	sl.done++
	w := writtenApplication{at: time.Now()}
	if existing != nil {
		w.replaced = existing.GetResourceVersion()
	}
	sl.written[d.Application] = w
}

// InFlight returns the Applications of the Serving written earlier that byName, read from the
// cache, does not show yet; it forgets those it shows, and those waited for too long.
func (w *Writes) InFlight(key types.NamespacedName, byName map[string]*argocd.Application, now time.Time) map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for name, wr := range w.written[key] {
		app := byName[name]
		if (app != nil && (wr.replaced == "" || app.GetResourceVersion() != wr.replaced)) || now.Sub(wr.at) > InFlightPatience {
			delete(w.written[key], name)
			continue
		}
		out[name] = true
	}
	if len(w.written[key]) == 0 {
		delete(w.written, key)
	}
	return out
}

// Record keeps the slice's writes until the cache shows them, and forgets the writes and the
// foreign Applications of Servings waited for too long (a deleted Serving's among them).
func (w *Writes) Record(sl *Slice) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	expire(w.written, func(wr writtenApplication) time.Time { return wr.at }, now.Add(-InFlightPatience))
	expire(w.notOurs, func(f foreignApplication) time.Time { return f.at }, now.Add(-ForeignPatience))
	if len(sl.written) == 0 {
		return
	}
	if w.written == nil {
		w.written = map[types.NamespacedName]map[string]writtenApplication{}
	}
	if w.written[sl.key] == nil {
		w.written[sl.key] = map[string]writtenApplication{}
	}
	for name, wr := range sl.written {
		w.written[sl.key][name] = wr
	}
}

// expire drops the entries of m noted (at) before since, and the Servings left with none.
func expire[T any](m map[types.NamespacedName]map[string]T, at func(T) time.Time, since time.Time) {
	for key, apps := range m {
		for name, e := range apps {
			if at(e).Before(since) {
				delete(apps, name)
			}
		}
		if len(apps) == 0 {
			delete(m, key)
		}
	}
}

// ProgressDue says whether a roll-out in slices writes its progress now: at most once per
// ProgressInterval per Serving. done forgets the Serving's last progress write.
func (w *Writes) ProgressDue(key types.NamespacedName, now time.Time, done bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if done {
		delete(w.progressAt, key)
		return true
	}
	if at, ok := w.progressAt[key]; ok && now.Sub(at) < ProgressInterval {
		return false
	}
	if w.progressAt == nil {
		w.progressAt = map[types.NamespacedName]time.Time{}
	}
	w.progressAt[key] = now
	return true
}
