package writes

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Drifted remembers, per Serving, the clusters last seen Drifted, so that the Drifted
// notification and Event go out once per cluster's entry into drift: a reconcile whose status
// write failed, and that sees the same clusters enter drift again, tells no one twice. Only
// drifted clusters are kept: a fleet with none holds nothing here.
type Drifted struct {
	mu        sync.Mutex
	byServing map[types.NamespacedName]map[string]bool
}

// Entered returns, of drifted (the Serving's clusters Drifted now), those that entered drift:
// the last status (previous, its targets and those past their cap) does not show them Drifted,
// and they were not Drifted when Entered was last called for the Serving. It remembers drifted.
func (d *Drifted) Entered(key types.NamespacedName, drifted []string, previous []v1.Target) []string {
	was := make(map[string]bool, len(previous))
	for _, t := range previous {
		if len(t.Conditions) > 0 && t.Conditions[0].Reason == v1.ReasonDrifted {
			was[t.Cluster] = true
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := d.byServing[key]
	var entered []string
	now := make(map[string]bool, len(drifted))
	for _, c := range drifted {
		now[c] = true
		if !was[c] && !seen[c] {
			entered = append(entered, c)
		}
	}
	switch {
	case len(now) == 0:
		delete(d.byServing, key)
	case d.byServing == nil:
		d.byServing = map[types.NamespacedName]map[string]bool{key: now}
	default:
		d.byServing[key] = now
	}
	return entered
}

// Forget drops what is remembered of the Serving.
func (d *Drifted) Forget(key types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byServing, key)
}
