package orders

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	orderctrl "github.com/kokumi-dev/kokumi/internal/controller/order"
)

// With --render-child-per-namespace the controller keeps the child that rendered an Order's
// chart for that Order's namespace alone: after the render it waits among the namespace's
// children, and no other namespace's renders see it; without the flag the kept children are
// shared by every namespace, and none is kept for a namespace.
func TestRenderChildrenPerNamespaceRenderOneNamespaceEach(t *testing.T) {
	ctx := context.Background()
	ns := movedNamespace
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	src := newSource(t)
	reg, _ := startRegistry(t, t.TempDir())
	c := cfg
	c.BundledRegistry = reg.Addr
	c.RenderChildPerNamespace = true
	startOrdersConfig(t, c, time.Second)
	src.product(t, ns, "per-namespace", "", src.values("per-namespace"))
	order(t, ns, "per-namespace", "per-namespace", "", v1.PromotionAutomatic)
	latestPreparation(t, ns, "per-namespace", func(*v1.Preparation) bool { return true })

	own := orderctrl.RenderProcess(c, ns).Kept()
	if len(own) == 0 {
		t.Fatalf("no render child is kept for namespace %s after its render", ns)
	}
	other := orderctrl.RenderProcess(c, "orders-other").Kept()
	for _, pid := range own {
		if slices.Contains(other, pid) {
			t.Errorf("the child %d that rendered for %s is kept for namespace orders-other too", pid, ns)
		}
	}
	shared := c
	shared.RenderChildPerNamespace = false
	if p := orderctrl.RenderProcess(shared, ns); p.Namespace != "" {
		t.Errorf("without the flag the render process is keyed by namespace %q", p.Namespace)
	}
	for _, pid := range orderctrl.RenderProcess(shared, ns).Kept() {
		if slices.Contains(own, pid) {
			t.Errorf("the child %d kept for namespace %s waits among the shared children too", pid, ns)
		}
	}
}
