package serving

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/text"
)

const (
	// DefaultApplicationWriteSlice is how many Application writes one reconcile of a Serving
	// makes at most when Config.ApplicationWriteSlice is 0.
	DefaultApplicationWriteSlice = 1000

	// applicationWriteSliceTime is how long one reconcile of a Serving starts Application writes:
	// then it writes its progress and runs again, so that no worker is held for minutes.
	applicationWriteSliceTime = 10 * time.Second

	// progressInterval is how often, at most, a roll-out writes its progress to the Serving.
	progressInterval = 2 * time.Second

	// inFlightPatience is how long a written Application the cache has not shown yet is waited
	// for before it is written again.
	inFlightPatience = 30 * time.Second

	// foreignPatience is how long an Application of a name Kokumi would write, found to be
	// not the Serving's, is taken as still there before a create looks again; shorter than
	// recheckArgoCD, so that each recheck looks.
	foreignPatience = recheckArgoCD - 10*time.Second

	// maxEventNames is how many clusters one Event names; it counts the others.
	maxEventNames = 10
)

// servingWrites remembers, per Serving, the Applications its last slices wrote, until the
// cache shows them, and when it last wrote its progress.
type servingWrites struct {
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

// rememberForeign keeps app, found to be not the Serving's, for foreignPatience.
func (w *servingWrites) rememberForeign(key types.NamespacedName, app *argocd.Application, now time.Time) {
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

// foreign returns the Application of name the Serving found not its own less than
// foreignPatience ago, or nil; it forgets older ones.
func (w *servingWrites) foreign(key types.NamespacedName, name string, now time.Time) *argocd.Application {
	w.mu.Lock()
	defer w.mu.Unlock()
	f, ok := w.notOurs[key][name]
	if !ok {
		return nil
	}
	if now.Sub(f.at) > foreignPatience {
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

// writeSlice is the share of a roll-out's writes one reconcile makes.
type writeSlice struct {
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

// startSlice sizes this reconcile's share of the writes the decisions ask for.
func (r *Reconciler) startSlice(s *v1.Serving, decisions []fleet.Decision, byName map[string]*argocd.Application) *writeSlice {
	limit := r.Config.ApplicationWriteSlice
	if limit <= 0 {
		limit = DefaultApplicationWriteSlice
	}
	now := time.Now()
	sl := &writeSlice{key: client.ObjectKeyFromObject(s), limit: limit, deadline: now.Add(applicationWriteSliceTime),
		written: map[string]writtenApplication{}}
	sl.inFlight = r.writes.inFlight(sl.key, byName, now)
	for i := range decisions {
		d := &decisions[i]
		existing := byName[d.Application]
		switch {
		case d.Write:
			sl.total++
			if sl.inFlight[d.Application] {
				sl.current++
			}
		case !d.Remove && existing != nil && argocd.IsKokumis(existing, s.Namespace, s.Name):
			sl.total++
			sl.current++
		}
	}
	return sl
}

// take says whether the write or delete of d is made in this slice: not when an earlier slice
// wrote it and the cache does not show it yet, nor once the slice is full or its time is up.
func (sl *writeSlice) take(d *fleet.Decision) bool {
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

// wrote records a write that succeeded; existing is the Application it replaced, or nil.
func (sl *writeSlice) wrote(d *fleet.Decision, existing *argocd.Application) {
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

// inFlight returns the Applications of the Serving written earlier that byName, read from the
// cache, does not show yet; it forgets those it shows, and those waited for too long.
func (w *servingWrites) inFlight(key types.NamespacedName, byName map[string]*argocd.Application, now time.Time) map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for name, wr := range w.written[key] {
		app := byName[name]
		if (app != nil && (wr.replaced == "" || app.GetResourceVersion() != wr.replaced)) || now.Sub(wr.at) > inFlightPatience {
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

// record keeps the slice's writes until the cache shows them, and forgets the writes and the
// foreign Applications of Servings waited for too long (a deleted Serving's among them).
func (w *servingWrites) record(sl *writeSlice) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	expire(w.written, func(wr writtenApplication) time.Time { return wr.at }, now.Add(-inFlightPatience))
	expire(w.notOurs, func(f foreignApplication) time.Time { return f.at }, now.Add(-foreignPatience))
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

// progressDue says whether a roll-out in slices writes its progress now: at most once per
// progressInterval per Serving. done forgets the Serving's last progress write.
func (w *servingWrites) progressDue(key types.NamespacedName, now time.Time, done bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if done {
		delete(w.progressAt, key)
		return true
	}
	if at, ok := w.progressAt[key]; ok && now.Sub(at) < progressInterval {
		return false
	}
	if w.progressAt == nil {
		w.progressAt = map[types.NamespacedName]time.Time{}
	}
	w.progressAt[key] = now
	return true
}

// sliceOutcome says whether the roll-out goes on in another slice. When it does, Ready says how
// far the writes got ("writing Applications: 4,000 of 10,000"), and the status stays as it was
// at entry if the last progress was written less than progressInterval ago.
func (r *Reconciler) sliceOutcome(s *v1.Serving, sl *writeSlice, preparation string, entry *v1.ServingStatus) bool {
	more := sl.deferred > 0
	if !r.writes.progressDue(sl.key, time.Now(), !more) {
		s.Status = *entry.DeepCopy()
		return true
	}
	if more {
		r.outcome(s, metav1.ConditionFalse, v1.ReasonProgressing, fmt.Sprintf(
			"Rolling out Preparation %s: writing Applications: %s of %s; the rest follow in the next reconcile",
			preparation, text.Thousands(min(sl.current+sl.done, sl.total)), text.Thousands(sl.total)))
	}
	return more
}

// joinedEvent records one Event for the clusters whose Applications this reconcile created.
func (r *Reconciler) joinedEvent(s *v1.Serving, joined []string) {
	switch len(joined) {
	case 0:
	case 1:
		r.Recorder.Eventf(s, clusterRef(joined[0]), corev1.EventTypeNormal, "ClusterJoined", "CreateApplication",
			"Cluster %s: created Application %s/%s", joined[0], r.Config.ArgoCDNamespace, fleet.ApplicationName(s.Namespace, s.Name, joined[0]))
	default:
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "ClusterJoined", "CreateApplications",
			"Deployed to %s joining clusters: %s (created their Argo CD Applications in %s)",
			text.Thousands(len(joined)), text.FirstNames(joined, maxEventNames), r.Config.ArgoCDNamespace)
	}
}

// leftEvent records one Event for the clusters that left the Environment and whose
// Applications were deleted.
func (r *Reconciler) leftEvent(s *v1.Serving, environment string, left []string, apps []string) {
	switch len(left) {
	case 0:
	case 1:
		r.Recorder.Eventf(s, clusterRef(left[0]), corev1.EventTypeNormal, "ClusterLeft", "DeleteApplication",
			"Cluster %s left Environment %s: deleted Application %s/%s; what runs there keeps running",
			left[0], environment, r.Config.ArgoCDNamespace, apps[0])
	default:
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "ClusterLeft", "DeleteApplications",
			"%s clusters left Environment %s: %s; deleted their Applications; what runs there keeps running",
			text.Thousands(len(left)), environment, text.FirstNames(left, maxEventNames))
	}
}
