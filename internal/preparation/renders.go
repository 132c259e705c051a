package preparation

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Render is a claim that a render of Inputs (an inputs hash) made Preparation.
type Render struct {
	Inputs, Preparation string
}

// Renders remembers, per Order, the inputs hash and the Preparation of its last render, for a
// reconcile that reads the Order before the cache shows the status that render wrote. The zero
// value is ready to use.
type Renders struct {
	mu     sync.Mutex
	orders map[types.NamespacedName]rememberedRender
}

// rememberedRender is an Order's last render, with the Order's UID: an Order deleted and made
// again under its name starts with nothing remembered.
type rememberedRender struct {
	uid  types.UID
	last Render
}

// Get returns the last render of the Order with uid.
func (t *Renders) Get(order types.NamespacedName, uid types.UID) (Render, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.orders[order]
	if !ok || r.uid != uid {
		return Render{}, false
	}
	return r.last, true
}

// Set records the Order's last render.
func (t *Renders) Set(order types.NamespacedName, uid types.UID, last Render) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.orders == nil {
		t.orders = map[types.NamespacedName]rememberedRender{}
	}
	t.orders[order] = rememberedRender{uid: uid, last: last}
}

// Forget drops an Order's last render: it is gone.
func (t *Renders) Forget(order types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.orders, order)
}

// Candidates are the claims "inputs H rendered into Preparation P" the skip rule checks: the
// Order's status, and the remembered last render when it says something else. Each is only a
// candidate, to verify against the inputs now.
func Candidates(order *v1.Order, last Render, remembered bool) []Render {
	candidates := make([]Render, 0, 2)
	if order.Status.InputsHash != "" && order.Status.LatestPreparation != "" {
		candidates = append(candidates, Render{Inputs: order.Status.InputsHash, Preparation: order.Status.LatestPreparation})
	}
	if remembered && (len(candidates) == 0 || last != candidates[0]) {
		candidates = append(candidates, last)
	}
	return candidates
}

// Find picks, among preps, the Order's Preparation with configHash, if any, and its latest: the
// one its status names, or else its newest. Preparations the Order does not control are none of
// its own.
func Find(preps []v1.Preparation, order *v1.Order, configHash string) (existing, latest *v1.Preparation) {
	for i := range preps {
		p := &preps[i]
		if !metav1.IsControlledBy(p, order) {
			continue
		}
		if p.Spec.ConfigHash == configHash {
			existing = p
		}
		if p.Name == order.Status.LatestPreparation {
			latest = p
		}
	}
	if latest == nil {
		for i := range preps {
			p := &preps[i]
			if metav1.IsControlledBy(p, order) && (latest == nil || latest.CreationTimestamp.Before(&p.CreationTimestamp)) {
				latest = p
			}
		}
	}
	return existing, latest
}
