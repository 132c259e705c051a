package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/rollout"
)

// The roll-out policy RunRollout measures: a canary wave of the clusters labelled
// canaryLabel=canaryValue (one in canaryEvery), then the rest, rolloutMaxUnavailable at a time.
const (
	canaryLabel           = "ring"
	canaryValue           = "canary"
	canaryEvery           = 100
	canaryWave            = "canary"
	restWave              = "rest"
	rolloutMaxUnavailable = "10%"
)

// RolloutOptions configure one roll-out run (RunRollout). Of Options, N, KokumiBinary,
// ApplicationWriters, ProbePeriod, ControllerArgs, GoMemLimit, Timeout, WorkDir, KeepWorkDir
// and Log are used.
type RolloutOptions struct {
	Options
	// Soak is the canary wave's soak (none when zero).
	Soak time.Duration
	// HealthDelay is how long after Kokumi points an Application at a revision the harness,
	// playing Argo CD, reports it Synced and Healthy there.
	HealthDelay time.Duration
}

// RolloutRow is what one roll-out run measured.
type RolloutRow struct {
	N int
	// Canary and Rest are the waves' sizes; MaxUnavailable is the rest wave's limit, and
	// Batches how many times the health delay the waves wait at least: one for the canary
	// wave, plus the rest wave's size over its limit, rounded up.
	Canary, Rest, MaxUnavailable, Batches int
	Soak, HealthDelay                     time.Duration
	// AllAtOnce is from patching the Serving's preparationName, its Environment without a
	// roll-out policy, until the Serving is Deployed at the new revision; Waves, the same with
	// the two-wave policy.
	AllAtOnce, Waves time.Duration
	// MostUnavailable is the most Applications of the rest wave the harness saw at once
	// targeting the new revision without being Synced and Healthy there.
	MostUnavailable int
	// CanaryHealthy is when, after the promotion, every Application of the canary wave was seen
	// healthy at the new revision; RestStarted, when the first of the rest wave was seen
	// pointed at it (zero: not seen).
	CanaryHealthy, RestStarted time.Duration
	// Notes say what else was seen.
	Notes []string
}

// Ideal is what the two-wave roll-out cannot take less than: the all-at-once time, the soak,
// and the health delay once per batch beyond the one the all-at-once time already waited.
func (r RolloutRow) Ideal() time.Duration {
	if r.AllAtOnce <= 0 {
		return 0
	}
	return r.AllAtOnce + r.Soak + time.Duration(max(r.Batches-1, 0))*r.HealthDelay
}

// Overhead is the two-wave roll-out's time beyond Ideal.
func (r RolloutRow) Overhead() time.Duration {
	if r.Waves <= 0 || r.Ideal() <= 0 {
		return 0
	}
	return r.Waves - r.Ideal()
}

// InOrder says whether the rest wave started only after the canary wave was healthy and had
// soaked, as the harness saw the Applications (with 100 ms for the controller's and the
// harness's informers to see the same write at different times).
func (r RolloutRow) InOrder() bool {
	return r.CanaryHealthy > 0 && r.RestStarted > 0 && r.RestStarted-r.CanaryHealthy >= r.Soak-100*time.Millisecond
}

// RunRollout brings up a hub, opts.N fake members (one in a hundred labelled as the canary
// wave's) and the controller, plays Argo CD (every Application Kokumi points at a revision is
// Synced and Healthy there opts.HealthDelay later), and times the same Serving's promotion
// to a new Preparation all at once, then through a two-wave policy: canary, with opts.Soak,
// then the rest, 10% at a time.
func RunRollout(ctx context.Context, opts RolloutOptions) (row *RolloutRow, err error) {
	if opts.N <= 0 {
		return nil, fmt.Errorf("the number of clusters must be positive, not %d", opts.N)
	}
	if opts.KokumiBinary == "" {
		return nil, errors.New("no kokumi binary: build one with BuildKokumi")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := newRun(ctx, opts.Options)
	if err != nil {
		return nil, err
	}
	defer r.finish(&err)
	canary := (opts.N + canaryEvery - 1) / canaryEvery
	maxUnavailable := intstr.FromString(rolloutMaxUnavailable)
	limit := rollout.MaxUnavailable(&maxUnavailable, opts.N-canary)
	row = &RolloutRow{
		N: opts.N, Canary: canary, Rest: opts.N - canary, MaxUnavailable: limit,
		Batches: 1 + (opts.N-canary+limit-1)/limit, Soak: opts.Soak, HealthDelay: opts.HealthDelay,
	}
	if err := r.rollout(row, opts); err != nil {
		return row, err
	}
	return row, nil
}

func (r *run) rollout(row *RolloutRow, opts RolloutOptions) error {
	start := time.Now()
	if err := r.setUpHub(hubOptions{}, argocdNamespace); err != nil {
		return err
	}
	var preps [3]prep
	for i := range preps {
		var err error
		if preps[i], err = r.preparation(orderName, fmt.Sprintf("%s-%d", orderName, i+1)); err != nil {
			return err
		}
	}
	r.logf("hub, members, registry and RBAC up in %s", time.Since(start).Round(time.Millisecond))
	if err := r.startController(); err != nil {
		return fmt.Errorf("run kokumi controller: %w", err)
	}
	alive := r.kokumi.alive

	// The clusters, every canaryEvery-th one in the canary wave.
	n := r.opts.N
	waves := make(map[string]string, n)
	start = time.Now()
	if err := parallel(16, n, func(i int) error {
		labels := map[string]string{"tier": environmentName}
		if i%canaryEvery == 0 {
			labels[canaryLabel] = canaryValue
		}
		return r.createLabeledCluster(ClusterName(i), labels)
	}); err != nil {
		return err
	}
	for i := range n {
		wave := restWave
		if i%canaryEvery == 0 {
			wave = canaryWave
		}
		waves[fleet.ApplicationName(tenantNamespace, orderName, ClusterName(i))] = wave
	}
	// The first Preparation, until Deployed: the starting point of both promotions.
	argo, err := r.deployFirst(start, n, fmt.Sprintf(" (%d in the canary wave)", row.Canary), opts.HealthDelay, waves, preps[0], alive)
	if err != nil {
		return err
	}
	defer argo.stop()

	// (a) All at once.
	if row.AllAtOnce, err = r.promote(preps[1], alive); err != nil {
		return err
	}
	r.logf("all at once: promotion → %d clusters Deployed at %s in %s", n, preps[1].name, row.AllAtOnce.Round(time.Millisecond))

	// (b) The Environment gets the two-wave policy; the Serving stays Deployed.
	maxUnavailable := intstr.FromString(rolloutMaxUnavailable)
	canary := v1.RolloutWave{Name: canaryWave, ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{canaryLabel: canaryValue}}}
	if opts.Soak > 0 {
		canary.Soak = &metav1.Duration{Duration: opts.Soak}
	}
	env := &v1.Environment{}
	if err := r.admin.Get(r.ctx, client.ObjectKey{Namespace: tenantNamespace, Name: environmentName}, env); err != nil {
		return fmt.Errorf("get the Environment: %w", err)
	}
	env.Spec.Rollout = &v1.RolloutPolicy{Waves: []v1.RolloutWave{canary, {Name: restWave, MaxUnavailable: &maxUnavailable}}}
	if err := r.admin.Update(r.ctx, env); err != nil {
		return fmt.Errorf("set the Environment's roll-out policy: %w", err)
	}
	// The controller sees the policy before the promotion: it is Deployed still, and its
	// status says where the roll-out stands.
	if _, err := waitCount(r.ctx, time.Now(), r.opts.Timeout, "the Serving's status to show the roll-out policy", 1, func() (int, error) {
		s, err := r.obs.serving(r.ctx, tenantNamespace, orderName)
		if err != nil || s == nil || s.Status.Rollout == nil {
			return 0, err
		}
		return 1, nil
	}, alive); err != nil {
		return err
	}
	if _, err := r.waitDeployed(time.Now(), preps[1], alive); err != nil {
		return err
	}
	argo.watch(preps[2].digest)
	if row.Waves, err = r.promote(preps[2], alive); err != nil {
		return err
	}
	row.MostUnavailable, row.CanaryHealthy, row.RestStarted = argo.seen()
	r.logf("two waves: promotion → %d clusters Deployed at %s in %s; the canary wave was healthy after %s, the rest wave started %s after that, at most %d of it unavailable at once (limit %d)",
		n, preps[2].name, row.Waves.Round(time.Millisecond), row.CanaryHealthy.Round(time.Millisecond), (row.RestStarted - row.CanaryHealthy).Round(time.Millisecond),
		row.MostUnavailable, row.MaxUnavailable)
	if argo.failed() != nil {
		return argo.failed()
	}
	return nil
}

// promote patches the Serving's preparationName to p and returns how long until it is Deployed
// there.
func (r *run) promote(p prep, alive func() error) (time.Duration, error) {
	start := time.Now()
	patch := r.promotion(p.name)
	if err := r.admin.Patch(r.ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: tenantNamespace}}, patch); err != nil {
		return 0, fmt.Errorf("promote %s: %w", p.name, err)
	}
	return r.waitDeployed(start, p, alive)
}

// waitDeployed waits until the Serving is Deployed at p's digest, of its generation.
// deployFirst waits until want Clusters are Ready (note adds to the line it logs), starts the
// player of Argo CD (healthDelay, waves: startArgoCD), and deploys first, the Preparation the
// promotions measured start from, until Deployed. The caller stops the player.
func (r *run) deployFirst(start time.Time, want int, note string, healthDelay time.Duration, waves map[string]string, first prep, alive func() error) (*argoCD, error) {
	if _, err := waitCount(r.ctx, start, r.opts.Timeout, "every Cluster Ready", want, func() (int, error) {
		return r.obs.readyClusters(r.ctx)
	}, alive); err != nil {
		return nil, err
	}
	r.logf("%d Clusters Ready in %s%s", want, time.Since(start).Round(time.Millisecond), note)
	argo, err := startArgoCD(r.ctx, r, healthDelay, waves)
	if err != nil {
		return nil, err
	}
	start = time.Now()
	if err := r.createOrder(first.name); err != nil {
		argo.stop()
		return nil, err
	}
	d, err := r.waitDeployed(start, first, alive)
	if err != nil {
		argo.stop()
		return nil, err
	}
	r.logf("Serving → %d clusters Deployed at %s in %s", r.opts.N, first.name, d.Round(time.Millisecond))
	return argo, nil
}

func (r *run) waitDeployed(start time.Time, p prep, alive func() error) (time.Duration, error) {
	return waitCount(r.ctx, start, r.opts.Timeout, "the Serving Deployed at "+p.name, 1, func() (int, error) {
		reason, err := r.obs.servingReady(r.ctx, tenantNamespace, orderName)
		if err != nil || reason != v1.ReasonDeployed {
			return 0, err
		}
		s, err := r.obs.serving(r.ctx, tenantNamespace, orderName)
		if err != nil || s == nil || !argocd.SameRevision(s.Status.DeployedRevision, p.digest) {
			return 0, err
		}
		return 1, nil
	}, alive)
}

// argoCD plays Argo CD's application-controller for the Applications of the benchmark's
// Serving: delay after one is seen pointed at a revision it is not Synced and Healthy at, it
// reports it so. For the revision given to watch, it also keeps what the roll-out's checks
// need: the most Applications of the rest wave unavailable at once, when the canary wave was
// all healthy and when the rest wave started.
type argoCD struct {
	r     *run
	delay time.Duration
	waves map[string]string
	// canaries counts the canary wave's Applications.
	canaries int
	reg      toolscache.ResourceEventHandlerRegistration
	inf      interface {
		RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error
	}
	sem chan struct{}
	wg  sync.WaitGroup

	mu        sync.Mutex
	scheduled map[string]string // Application → the revision a report is due for
	err       error
	stopped   bool
	// Of the watched revision.
	revision      string
	from          time.Time
	unavailable   map[string]bool // rest wave Applications at it, not healthy there
	canaryHealthy map[string]bool
	most          int
	canaryAt      time.Duration
	restAt        time.Duration
}

// startArgoCD starts playing Argo CD on the observer's Applications; waves maps each
// Application's name to its wave.
func startArgoCD(ctx context.Context, r *run, delay time.Duration, waves map[string]string) (*argoCD, error) {
	a := &argoCD{r: r, delay: delay, waves: waves, sem: make(chan struct{}, 16), scheduled: map[string]string{}}
	for _, w := range waves {
		if w == canaryWave {
			a.canaries++
		}
	}
	inf, err := r.obs.cache.GetInformer(ctx, newApplication())
	if err != nil {
		return nil, fmt.Errorf("the Applications' informer: %w", err)
	}
	a.inf = inf
	if a.reg, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    a.seeObject,
		UpdateFunc: func(_, obj any) { a.seeObject(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watch the Applications: %w", err)
	}
	return a, nil
}

// watch starts keeping the roll-out's checks for revision, from now.
func (a *argoCD) watch(revision string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.revision, a.from = revision, time.Now()
	a.unavailable, a.canaryHealthy = map[string]bool{}, map[string]bool{}
	a.most, a.canaryAt, a.restAt = 0, 0, 0
}

// seen returns the watched revision's checks.
func (a *argoCD) seen() (most int, canaryHealthy, restStarted time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.most, a.canaryAt, a.restAt
}

func (a *argoCD) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

func (a *argoCD) stop() {
	_ = a.inf.RemoveEventHandler(a.reg)
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.wg.Wait()
}

func (a *argoCD) seeObject(obj any) {
	app, ok := obj.(*unstructured.Unstructured)
	if !ok || app.GetLabels()[argocd.LabelServing] != orderName {
		return
	}
	name := app.GetName()
	target, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
	syncStatus, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status")
	synced, _, _ := unstructured.NestedString(app.Object, "status", "sync", "revision")
	health, _, _ := unstructured.NestedString(app.Object, "status", "health", "status")
	var st argocd.Status
	st.Sync.Status, st.Sync.Revision, st.Health.Status = syncStatus, synced, health
	healthy := st.HealthyAt(target)

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.revision != "" && target == a.revision {
		switch a.waves[name] {
		case restWave:
			if a.restAt == 0 {
				a.restAt = time.Since(a.from)
			}
			if healthy {
				delete(a.unavailable, name)
			} else {
				a.unavailable[name] = true
				a.most = max(a.most, len(a.unavailable))
			}
		case canaryWave:
			if healthy {
				a.canaryHealthy[name] = true
				if a.canaryAt == 0 && len(a.canaryHealthy) == a.canaries {
					a.canaryAt = time.Since(a.from)
				}
			}
		}
	}
	if healthy || target == "" || a.scheduled[name] == target || a.stopped {
		return
	}
	a.scheduled[name] = target
	a.wg.Add(1)
	time.AfterFunc(a.delay, func() {
		defer a.wg.Done()
		a.sem <- struct{}{}
		defer func() { <-a.sem }()
		a.report(name, target)
	})
}

// report writes Synced and Healthy at revision into the Application name, as Argo CD would
// after its sync.
func (a *argoCD) report(name, revision string) {
	app := newApplication()
	app.SetNamespace(argocdNamespace)
	app.SetName(name)
	patch := fmt.Sprintf(`{"status":{"sync":{"status":%q,"revision":%q},"health":{"status":%q}}}`, argocd.SyncSynced, revision, argocd.HealthHealthy)
	err := a.r.admin.Patch(a.r.ctx, app, client.RawPatch(types.MergePatchType, []byte(patch)))
	if client.IgnoreNotFound(err) != nil && a.r.ctx.Err() == nil {
		a.mu.Lock()
		if a.err == nil {
			a.err = fmt.Errorf("report Application %s Synced and Healthy: %w", name, err)
		}
		a.mu.Unlock()
	}
}
