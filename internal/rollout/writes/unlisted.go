package writes

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Unlisted remembers, per Serving, the non-healthy clusters past status.targets' cap
// (v1.MaxTargets), each with the time it entered its state, so that the progress deadline
// reaches every cluster of a large fleet and not only the 64 the status lists. It lives in the
// controller's memory: after a restart, those clusters' clocks start again when they are first
// seen (a deadline is reached later then, never earlier). Healthy clusters are not kept: a quiet,
// healthy fleet holds nothing here.
type Unlisted struct {
	mu        sync.Mutex
	byServing map[types.NamespacedName][]v1.Target
}

// With returns listed (the status's targets) followed by the Serving's remembered clusters that
// listed does not name.
func (u *Unlisted) With(key types.NamespacedName, listed []v1.Target) []v1.Target {
	u.mu.Lock()
	more := u.byServing[key]
	u.mu.Unlock()
	if len(more) == 0 {
		return listed
	}
	named := make(map[string]bool, len(listed))
	for _, t := range listed {
		named[t.Cluster] = true
	}
	out := append(make([]v1.Target, 0, len(listed)+len(more)), listed...)
	for _, t := range more {
		if !named[t.Cluster] {
			out = append(out, t)
		}
	}
	return out
}

// Remember replaces the Serving's remembered clusters with unlisted.
func (u *Unlisted) Remember(key types.NamespacedName, unlisted []v1.Target) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(unlisted) == 0 {
		delete(u.byServing, key)
		return
	}
	if u.byServing == nil {
		u.byServing = map[types.NamespacedName][]v1.Target{}
	}
	u.byServing[key] = unlisted
}

// Forget drops what is remembered of the Serving.
func (u *Unlisted) Forget(key types.NamespacedName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.byServing, key)
}
