package writes

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kokumi-dev/kokumi/internal/argocd"
)

// Memo remembers, per Serving, whether each of its Applications was as wanted, at the
// Application's resourceVersion and for the spec wanted then. ApplicationSpec.UpToDate builds
// and serializes an Application (about 27 µs and 12 KB of garbage each): a Serving of 10,000
// clusters reconciled again, as Argo CD reports on one of them, compares again only the
// Applications that changed, or whose wanted spec did.
type Memo struct {
	mu        sync.Mutex
	byServing map[types.NamespacedName]map[string]memoEntry
}

// memoEntry is one answer of ApplicationSpec.UpToDate.
type memoEntry struct {
	resourceVersion string
	spec            argocd.ApplicationSpec
	upToDate        bool
}

// Round is one reconcile's use of the memo: it reads the answers of the Serving's last
// reconcile and keeps those of this one, which replace them at done.
type Round struct {
	memo       *Memo
	key        types.NamespacedName
	prev, next map[string]memoEntry
}

// Round starts a reconcile of the Serving key, which plans about n Applications.
func (m *Memo) Round(key types.NamespacedName, n int) *Round {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &Round{memo: m, key: key, prev: m.byServing[key], next: make(map[string]memoEntry, n)}
}

// UpToDate says whether app is as spec wants it, from the last reconcile's answer when neither
// changed since.
func (r *Round) UpToDate(spec argocd.ApplicationSpec, app *argocd.Application) bool {
	rv := app.ResourceVersion
	e, ok := r.prev[app.Name]
	if !ok || rv == "" || e.resourceVersion != rv || e.spec != spec {
		e = memoEntry{resourceVersion: rv, spec: spec, upToDate: spec.UpToDate(app)}
	}
	r.next[app.Name] = e
	return e.upToDate
}

// Done keeps this reconcile's answers for the next one; Applications it did not plan are
// forgotten.
func (r *Round) Done() {
	r.memo.mu.Lock()
	defer r.memo.mu.Unlock()
	if r.memo.byServing == nil {
		r.memo.byServing = map[types.NamespacedName]map[string]memoEntry{}
	}
	r.memo.byServing[r.key] = r.next
}

// Forget drops what is remembered of the Serving key: it is gone.
func (m *Memo) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byServing, key)
}
