package crash

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterctrl "github.com/kokumi-dev/kokumi/internal/controller/clusters"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/dev/bench"
	"github.com/kokumi-dev/kokumi/internal/fleet"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/text"
	"github.com/kokumi-dev/kokumi/test/harness"
)

const (
	argocdNamespace = "argocd"
	kokumiNamespace = harness.ControllerNamespace
	// namespace holds the tenant's Environment, Order, Preparations and Serving.
	namespace = "crash"
	// orderName names the Order and its Serving.
	orderName       = "podinfo-edge"
	environmentName = "edge"
	projectName     = "crash-edge"
	targetNamespace = "podinfo"

	// selectedClusters of the Clusters the Environment selects (tier=edge); spareClusters more
	// are registered outside it (tier=spare), and movers of each swap sides during the
	// Preparation change.
	selectedClusters = 1000
	spareClusters    = 50
	movers           = 25

	// killsPerPhase is how many times the controller is killed in each phase.
	killsPerPhase = 20
	// earlyKills is the share of kills at a random delay of at most earlyWindow after a start,
	// while the controller starts up; the others wait for a random number of its writes.
	earlyKills  = 0.3
	earlyWindow = 1500 * time.Millisecond
	// noProgress is how long a kill waits for the writes it was drawn to wait for.
	noProgress = 30 * time.Second
	// waitTimeout bounds every wait for convergence: generous, for a loaded two-core machine.
	waitTimeout = 4 * time.Minute
)

// TestSIGKILLAnywhereConverges kills the controller at 20 random points of a roll-out to 1,000
// Clusters (from its very first start, while it also sets up 1,050 Clusters), then at 20 more
// while the Serving moves to another Preparation and 25 Clusters leave and 25 join the
// Environment, restarting it each time. After the last restart of each, every selected Cluster
// must have exactly one Application, named as Kokumi names them, as Kokumi writes it for the
// current Preparation; no Application may remain for a Cluster that is not selected, none may
// have been deleted or replaced but those of the Clusters that left; the Serving must count
// 1,000 Healthy and say Deployed, with a deployment record signed by the one published key; and
// every Cluster must have its finalizer, its Argo CD cluster Secret and the controller's probe.
// KOKUMI_CRASH_SEED replays a schedule of kills.
func TestSIGKILLAnywhereConverges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KOKUMI_CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("KOKUMI_CRASH_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (KOKUMI_CRASH_SEED=%d replays the kill schedule)", seed, seed)
	obs, err := startObserver(ctx)
	must(t, err)
	r := &crashRun{t: t, ctx: ctx, rng: rand.New(rand.NewPCG(seed, 0x5eed)), obs: obs}

	start := time.Now()
	r.setUpFleet()
	first, second := r.preparation(orderName+"-1"), r.preparation(orderName+"-2")
	edge := make([]string, selectedClusters)
	for i := range edge {
		edge[i] = clusterName(i)
	}
	must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: namespace}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo-fleet"}, EnvironmentRef: v1.LocalObjectReference{Name: environmentName},
		Promotion: v1.Promotion{Mode: v1.PromotionManual},
	}}))
	must(t, env.Client.Create(ctx, &v1.Serving{ObjectMeta: metav1.ObjectMeta{Name: orderName, Namespace: namespace}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: orderName}, PreparationName: first.Name, PromotedBy: env.AdminName,
	}}))
	t.Logf("registered %d Clusters, an Environment, an Order and its Serving in %s", selectedClusters+spareClusters, time.Since(start).Round(time.Millisecond))

	r.proc = newControllerProcess(filepath.Join(logDir, t.Name()+".log"),
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--argocd-namespace="+argocdNamespace, "--namespace="+kokumiNamespace,
		"--bundled-registry="+registry.Addr,
		// Each start probes every Cluster; the period only spaces the probes after that.
		"--probe-period=5m")
	t.Cleanup(r.proc.stop)
	// The controller's first start rolls the Serving out, and sets up every Cluster meanwhile.
	rollOut := r.crashThrough("roll-out", expectation{prep: first, clusters: edge}, r.start, 0)
	before := r.applicationUIDs()

	// The Preparation changes, and movers Clusters leave the Environment while as many join.
	leaving := map[string]bool{}
	for _, i := range r.rng.Perm(selectedClusters)[:movers] {
		leaving[clusterName(i)] = true
	}
	var after []string
	for _, name := range edge {
		if !leaving[name] {
			after = append(after, name)
		}
	}
	for i := range movers {
		after = append(after, clusterName(selectedClusters+i))
	}
	change := r.crashThrough("Preparation change", expectation{prep: second, clusters: after}, func() {
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var s v1.Serving
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: orderName}, &s); err != nil {
				return err
			}
			s.Spec.PreparationName, s.Spec.PromotedBy = second.Name, env.AdminName
			return env.Client.Update(ctx, &s)
		}))
		for name := range leaving {
			r.label(name, "spare")
		}
		for i := range movers {
			r.label(clusterName(selectedClusters+i), environmentName)
		}
	}, movers)

	// What runs is never replaced: every Cluster that stayed keeps its Application.
	now := r.applicationUIDs()
	replaced := 0
	for name, uid := range before {
		if leaving[name] {
			continue
		}
		if now[name] != uid {
			replaced++
		}
	}
	if replaced > 0 {
		t.Errorf("%d Applications of Clusters that stayed were replaced (a new UID) during the Preparation change", replaced)
	}

	var all []time.Duration
	for _, p := range []*phaseResult{rollOut, change} {
		all = append(all, p.resumes...)
	}
	t.Logf("convergence after the last restart: roll-out %s (its Applications and Serving status %s), Preparation change %s (%s); after the change began: %s and %s",
		rollOut.converged.Round(time.Millisecond), max(rollOut.parts["Applications"], rollOut.parts["Serving status"]).Round(time.Millisecond),
		change.converged.Round(time.Millisecond), max(change.parts["Applications"], change.parts["Serving status"]).Round(time.Millisecond),
		rollOut.total.Round(time.Millisecond), change.total.Round(time.Millisecond))
	t.Logf("first Application write after a restart that had work left, over %d restarts: %s", len(all), spread(all))
	t.Logf("probes answered by the member servers: %d", servers.Probes())
}

// crashRun is the state of one crash test.
type crashRun struct {
	t    *testing.T
	ctx  context.Context
	rng  *rand.Rand
	obs  *observer
	proc *controllerProcess
}

// expectation is what a phase converges to: the Preparation deployed to the selected Clusters.
type expectation struct {
	prep     *preparation
	clusters []string
}

// preparation is a Preparation and where the test pushed its artifact.
type preparation struct {
	*v1.Preparation
	// repoURL is oci://<registry>/<repository>, and digest the artifact's digest.
	repoURL, digest string
}

// request is the fleet request the Serving reconciler builds for the expectation: its Spec is
// each Application as Kokumi writes it.
func (e expectation) request() fleet.Request {
	req := fleet.Request{
		ServingNamespace: namespace, ServingName: orderName, ArgoCDNamespace: argocdNamespace,
		Preparation: e.prep.Name, RepoURL: e.prep.repoURL, Revision: e.prep.digest, TargetNamespace: targetNamespace,
		Project: argocd.Project{Name: projectName}, Retry: argocd.DefaultSyncRetry,
	}
	for _, name := range e.clusters {
		req.Clusters = append(req.Clusters, fleet.Cluster{Name: name, Server: servers.Server(name), Ready: true})
	}
	return req
}

// phaseResult is what one phase measured.
type phaseResult struct {
	// converged is how long after the last restart everything was as expected; total, how
	// long after the change that started the phase.
	converged, total time.Duration
	// parts are how long after the last restart each part of the check first held.
	parts map[string]time.Duration
	// resumes are how long each restart took to make its first Application write, among the
	// restarts that found work left.
	resumes []time.Duration
}

// crashThrough makes a change, kills the controller killsPerPhase times at random points while
// it carries the change out, restarting it each time, then waits for it to converge to want.
// departures is how many Applications the change must delete.
func (r *crashRun) crashThrough(name string, want expectation, change func(), departures int64) *phaseResult {
	t := r.t
	t.Helper()
	res := &phaseResult{}
	before := r.obs.counts()
	begun := time.Now()
	change()
	for kill := 1; kill <= killsPerPhase; kill++ {
		base, since := r.proc.started, "start"
		if base.Before(begun) {
			base, since = begun, "the change"
		}
		point := r.waitKillPoint(base, since, killsPerPhase-kill+1, want)
		uptime := time.Since(r.proc.started)
		if err := r.proc.kill(); err != nil {
			t.Fatalf("%s, kill %d: %v\n%s", name, kill, err, r.proc.tail(40))
		}
		done, total := r.progress(want)
		resumed := "no Application write"
		if at, ok := r.obs.firstAppWriteSince(); ok && at.After(r.proc.started) {
			d := at.Sub(r.proc.started)
			resumed = "first Application write " + d.Round(time.Millisecond).String() + " after its start"
			if r.proc.incarnation > 1 {
				res.resumes = append(res.resumes, d)
			}
		}
		t.Logf("%s, kill %2d/%d (%s): incarnation %d ran %s, %s; %d/%d Applications as wanted",
			name, kill, killsPerPhase, point, r.proc.incarnation, uptime.Round(time.Millisecond), resumed, done, total)
		r.start()
	}

	// Every part must hold at once; when each first held is measured too.
	parts := []struct {
		name  string
		check func(expectation) error
		after time.Duration
	}{
		{name: "Applications", check: r.applicationsConverged},
		{name: "Serving status", check: r.servingConverged},
		{name: "deployment record", check: r.recorded},
		{name: "Clusters", check: r.clustersConverged},
	}
	deadline, report := r.proc.started.Add(waitTimeout), time.Now().Add(30*time.Second)
	for {
		if err := r.proc.alive(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, r.proc.tail(40))
		}
		var problems []string
		for i := range parts {
			p := &parts[i]
			if err := p.check(want); err != nil {
				problems = append(problems, p.name+": "+err.Error())
			} else if p.after == 0 {
				p.after = time.Since(r.proc.started)
			}
		}
		if len(problems) == 0 {
			break
		}
		if time.Now().After(deadline) {
			// The goroutines' stacks say where a controller that does not converge waits.
			r.proc.dumpStacks()
			t.Fatalf("%s: not converged %s after the last restart: %s\nthe controller's log, with its goroutines' stacks at the end, is kept in %s",
				name, waitTimeout, strings.Join(problems, "; "), r.proc.logPath)
		}
		if time.Now().After(report) {
			t.Logf("%s: %s after the last restart, still: %s", name, time.Since(r.proc.started).Round(time.Second), strings.Join(problems, "; "))
			report = report.Add(30 * time.Second)
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.converged, res.total = time.Since(r.proc.started), time.Since(begun)
	res.parts = map[string]time.Duration{}
	var firsts []string
	for _, p := range parts {
		res.parts[p.name] = p.after
		firsts = append(firsts, fmt.Sprintf("%s %s", p.name, p.after.Round(time.Millisecond)))
	}
	if at, ok := r.obs.firstAppWriteSince(); ok && at.After(r.proc.started) {
		res.resumes = append(res.resumes, at.Sub(r.proc.started))
	}
	t.Logf("%s: after the last restart, first as wanted: %s", name, strings.Join(firsts, ", "))
	writes := r.obs.counts().sub(before)
	t.Logf("%s: converged %s after the last restart, %s after the change; writes that changed something: %s",
		name, res.converged.Round(time.Millisecond), res.total.Round(time.Millisecond), writes)
	if writes.AppDeletes != departures {
		t.Errorf("%s: %d Applications deleted, want %d (those of the Clusters that left): what runs must not be deleted", name, writes.AppDeletes, departures)
	}
	return res
}

// waitKillPoint waits for the next point to kill the controller at, drawn at random: early,
// at a delay after base (its start, or the change) while the controller starts up; or late,
// once the controller made a number of Application writes since base, drawn so that the
// killsLeft kills spread over what is left to write and leave some to the last incarnation,
// or at a delay when nothing is left. It returns how the point was drawn.
func (r *crashRun) waitKillPoint(base time.Time, since string, killsLeft int, want expectation) string {
	early := r.rng.Float64() < earlyKills
	delay := time.Duration(r.rng.Int64N(int64(earlyWindow)))
	lateDelay := earlyWindow + time.Duration(r.rng.Int64N(int64(3*time.Second)))
	pick, jitter := r.rng.Float64(), time.Duration(r.rng.Int64N(int64(100*time.Millisecond)))
	if early {
		time.Sleep(time.Until(base.Add(delay)))
		return fmt.Sprintf("early, %s after %s", delay.Round(time.Millisecond), since)
	}
	done, total := r.progress(want)
	remaining := int64(total - done)
	if remaining == 0 {
		time.Sleep(time.Until(base.Add(lateDelay)))
		return fmt.Sprintf("late, nothing left to write, %s after %s", lateDelay.Round(time.Millisecond), since)
	}
	// Half of an even share on average: the last incarnation is left work to converge from.
	span := max(1, min(remaining-1, remaining/int64(killsLeft)))
	n := 1 + int64(pick*float64(span))
	from := r.obs.appWrites()
	for r.obs.appWrites() < from+n {
		if time.Since(base) > noProgress {
			return fmt.Sprintf("late, waited for %d Application writes, saw %d in %s", n, r.obs.appWrites()-from, noProgress)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(jitter)
	return fmt.Sprintf("late, after %d Application writes and %s", n, jitter.Round(time.Millisecond))
}

// start starts an incarnation of the controller.
func (r *crashRun) start() {
	// The resource version before it starts tells its writes from the late events of the last.
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	must(r.t, env.Client.List(r.ctx, &list, client.InNamespace(argocdNamespace), client.Limit(1)))
	rv, err := strconv.ParseInt(list.ResourceVersion, 10, 64)
	must(r.t, err)
	must(r.t, r.proc.start())
	r.obs.markRestart(rv)
}

// progress counts the selected Clusters whose Application is as Kokumi writes it for want,
// as the observer's cache has them.
func (r *crashRun) progress(want expectation) (done, total int) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	if err := r.obs.cache.List(r.ctx, list, client.InNamespace(argocdNamespace)); err != nil {
		r.t.Fatalf("list the observer's Applications: %v", err)
	}
	byName := make(map[string]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].GetName()] = &list.Items[i]
	}
	req := want.request()
	for _, c := range req.Clusters {
		if app := byName[fleet.ApplicationName(namespace, orderName, c.Name)]; app != nil && req.Spec(c).UpToDate(asKokumiReads(r.t, app)) {
			done++
		}
	}
	return done, len(req.Clusters)
}

// applicationsConverged checks, on the API server, that every selected Cluster has exactly one
// Application, as Kokumi names and writes it for want, that Argo CD reports synced, and that
// no other Cluster has one; and says what is not so.
func (r *crashRun) applicationsConverged(want expectation) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	if err := env.Client.List(r.ctx, list, client.InNamespace(argocdNamespace), client.MatchingLabels{argocd.LabelManagedBy: argocd.ManagedByKokumi}); err != nil {
		return fmt.Errorf("list Applications: %w", err)
	}
	byCluster := map[string][]*unstructured.Unstructured{}
	for i := range list.Items {
		app := &list.Items[i]
		c := app.GetLabels()[argocd.LabelCluster]
		byCluster[c] = append(byCluster[c], app)
	}
	req := want.request()
	var missing, duplicated, misnamed, stale, unsynced, orphaned []string
	selected := map[string]bool{}
	for _, c := range req.Clusters {
		selected[c.Name] = true
		apps := byCluster[c.Name]
		switch {
		case len(apps) == 0:
			missing = append(missing, c.Name)
			continue
		case len(apps) > 1:
			duplicated = append(duplicated, c.Name)
		}
		app := apps[0]
		switch target, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision"); {
		case app.GetName() != fleet.ApplicationName(namespace, orderName, c.Name):
			misnamed = append(misnamed, app.GetName())
		case !req.Spec(c).UpToDate(asKokumiReads(r.t, app)) || !argocd.IsKokumis(app, namespace, orderName):
			stale = append(stale, app.GetName()+" at "+target)
		case !playedAt(app):
			unsynced = append(unsynced, app.GetName())
		}
	}
	for c, apps := range byCluster {
		if !selected[c] {
			for _, app := range apps {
				orphaned = append(orphaned, app.GetName())
			}
		}
	}
	var problems []string
	for _, p := range []struct {
		what  string
		names []string
	}{
		{"selected Clusters without an Application", missing},
		{"selected Clusters with more than one Application", duplicated},
		{"Applications not named as Kokumi names them", misnamed},
		{"Applications not as Kokumi writes them for " + want.prep.Name, stale},
		{"Applications of Clusters not selected (orphaned)", orphaned},
		{"Applications Argo CD has not reported synced yet", unsynced},
	} {
		if len(p.names) > 0 {
			slices.Sort(p.names)
			problems = append(problems, fmt.Sprintf("%d %s (%s)", len(p.names), p.what, text.Names(p.names)))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// clustersConverged checks that the controller set every Cluster up: its finalizer, its own
// probe's Ready and version, and exactly one Argo CD cluster Secret.
func (r *crashRun) clustersConverged(expectation) error {
	var clusters v1.ClusterList
	if err := env.Client.List(r.ctx, &clusters); err != nil {
		return fmt.Errorf("list Clusters: %w", err)
	}
	var secrets corev1.SecretList
	if err := env.Client.List(r.ctx, &secrets, client.InNamespace(argocdNamespace), client.MatchingLabels{
		argocd.LabelManagedBy: argocd.ManagedByKokumi, argocd.LabelSecretType: argocd.SecretTypeCluster,
	}); err != nil {
		return fmt.Errorf("list Argo CD cluster Secrets: %w", err)
	}
	secretsOf := map[string][]string{}
	for _, s := range secrets.Items {
		c := s.Labels[argocd.LabelCluster]
		secretsOf[c] = append(secretsOf[c], s.Name)
	}
	var unprobed, noFinalizer, badSecret []string
	for _, c := range clusters.Items {
		ready := apimeta.FindStatusCondition(c.Status.Conditions, v1.ConditionReady)
		if c.Status.LastProbeTime == nil || c.Status.Version != bench.MemberVersion || ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != v1.ReasonConnected {
			unprobed = append(unprobed, c.Name)
		}
		if !slices.Contains(c.Finalizers, clusterctrl.Finalizer) {
			noFinalizer = append(noFinalizer, c.Name)
		}
		if s := secretsOf[c.Name]; len(s) != 1 || s[0] != cluster.SecretName(c.Name) {
			badSecret = append(badSecret, c.Name)
		}
	}
	switch {
	case len(clusters.Items) != selectedClusters+spareClusters:
		return fmt.Errorf("%d Clusters, want %d", len(clusters.Items), selectedClusters+spareClusters)
	case len(unprobed) > 0:
		return fmt.Errorf("%d Clusters not probed Ready by the controller (%s)", len(unprobed), text.Names(unprobed))
	case len(noFinalizer) > 0:
		return fmt.Errorf("%d Clusters without the finalizer %s (%s)", len(noFinalizer), clusterctrl.Finalizer, text.Names(noFinalizer))
	case len(badSecret) > 0 || len(secrets.Items) != len(clusters.Items):
		return fmt.Errorf("%d Argo CD cluster Secrets for %d Clusters; %d Clusters without exactly their own (%s)", len(secrets.Items), len(clusters.Items), len(badSecret), text.Names(badSecret))
	}
	return nil
}

// servingConverged checks the Serving's status: every selected Cluster Healthy at the
// Preparation's revision, and Deployed.
func (r *crashRun) servingConverged(want expectation) error {
	var s v1.Serving
	if err := env.Client.Get(r.ctx, client.ObjectKey{Namespace: namespace, Name: orderName}, &s); err != nil {
		return fmt.Errorf("get the Serving: %w", err)
	}
	n := int32(len(want.clusters))
	ready := apimeta.FindStatusCondition(s.Status.Conditions, v1.ConditionReady)
	switch {
	case s.Status.ObservedGeneration != s.Generation:
		return fmt.Errorf("the Serving's status is of generation %d, not %d", s.Status.ObservedGeneration, s.Generation)
	case s.Status.Revision != want.prep.digest:
		return fmt.Errorf("the Serving's status.revision is %q, want %s", s.Status.Revision, want.prep.digest)
	case s.Status.Clusters != (v1.ClusterCounts{Selected: n, Healthy: n}):
		return fmt.Errorf("the Serving counts %+v, want %d selected and healthy", s.Status.Clusters, n)
	case len(s.Status.Targets) > 0 || s.Status.TargetsOmitted > 0:
		return fmt.Errorf("the Serving lists %d targets and omits %d, want none", len(s.Status.Targets), s.Status.TargetsOmitted)
	case ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != v1.ReasonDeployed ||
		!strings.HasPrefix(ready.Message, "Deployed Preparation "+want.prep.Name+" to "):
		return fmt.Errorf("the Serving's Ready is %+v, want True, Deployed Preparation %s", ready, want.prep.Name)
	}
	return nil
}

// recorded checks that the Preparation lists a deployment record of the Environment naming
// every selected Cluster, and that every record is signed by the one key Kokumi publishes.
func (r *crashRun) recorded(want expectation) error {
	var secret corev1.Secret
	if err := env.Client.Get(r.ctx, client.ObjectKey{Namespace: kokumiNamespace, Name: record.SecretName}, &secret); err != nil {
		return fmt.Errorf("get the signing key: %w", err)
	}
	signer, err := record.ParseSigner(secret.Data[record.SecretKey])
	if err != nil {
		return fmt.Errorf("the signing key: %w", err)
	}
	var keys corev1.ConfigMap
	if err := env.Client.Get(r.ctx, client.ObjectKey{Namespace: kokumiNamespace, Name: record.ConfigMapName}, &keys); err != nil {
		return fmt.Errorf("get the public keys: %w", err)
	}
	if keys.Data[signer.KeyID()+".pub"] == "" {
		return fmt.Errorf("ConfigMap %s does not publish the signing key %s", record.ConfigMapName, signer.KeyID())
	}
	var preps v1.PreparationList
	if err := env.Client.List(r.ctx, &preps, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("list Preparations: %w", err)
	}
	for _, p := range preps.Items {
		for _, rec := range p.Status.DeploymentRecords {
			if rec.KeyID != signer.KeyID() {
				return fmt.Errorf("Preparation %s lists a record signed by key %s, not the published %s", p.Name, rec.KeyID, signer.KeyID())
			}
		}
		if p.Name != want.prep.Name {
			continue
		}
		recs := p.Status.DeploymentRecords
		if len(recs) == 0 || recs[0].Environment != environmentName || recs[0].Clusters != int32(len(want.clusters)) {
			return fmt.Errorf("Preparation %s's newest deployment record is not of Environment %s with %d Clusters: %+v", p.Name, environmentName, len(want.clusters), recs)
		}
	}
	return nil
}

// applicationUIDs maps each Cluster to the UID of its Application.
func (r *crashRun) applicationUIDs() map[string]types.UID {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(argocd.ApplicationListGVK)
	must(r.t, env.Client.List(r.ctx, list, client.InNamespace(argocdNamespace), client.MatchingLabels{argocd.LabelManagedBy: argocd.ManagedByKokumi}))
	uids := make(map[string]types.UID, len(list.Items))
	for _, app := range list.Items {
		uids[app.GetLabels()[argocd.LabelCluster]] = app.GetUID()
	}
	return uids
}

// setUpFleet creates the namespace, the AppProject, the Environment, and the Clusters with
// their credentials: the first selectedClusters of tier edge, the spares of tier spare. The
// Clusters are Ready already, as a controller that ran before would have left them, so that the
// roll-out starts with the controller's first start while it sets every Cluster up.
func (r *crashRun) setUpFleet() {
	t := r.t
	must(t, env.CreateNamespace(r.ctx, namespace))
	project := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"sourceNamespaces": []any{namespace},
		"destinations":     []any{map[string]any{"server": "*", "namespace": "*"}},
		"sourceRepos":      []any{"*"},
	}}}
	project.SetGroupVersionKind(argocd.AppProjectGVK)
	project.SetName(projectName)
	project.SetNamespace(argocdNamespace)
	must(t, env.Client.Create(r.ctx, project))
	must(t, env.Client.Create(r.ctx, &v1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: environmentName, Namespace: namespace},
		Spec:       v1.EnvironmentSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": environmentName}}, Project: projectName},
	}))
	must(t, parallel(selectedClusters+spareClusters, func(i int) error {
		name, tier := clusterName(i), environmentName
		if i >= selectedClusters {
			tier = "spare"
		}
		if err := env.Client.Create(r.ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kokumiNamespace},
			Data:       map[string][]byte{cluster.KeyToken: []byte(bench.Token(name)), cluster.KeyCA: servers.CA},
		}); err != nil {
			return fmt.Errorf("create the credentials of %s: %w", name, err)
		}
		c := &v1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tier": tier}},
			Spec:       v1.ClusterSpec{Server: servers.Server(name), CredentialsRef: v1.LocalObjectReference{Name: name}},
		}
		if err := env.Client.Create(r.ctx, c); err != nil {
			return fmt.Errorf("create Cluster %s: %w", name, err)
		}
		// Ready, as an earlier probe left it; the convergence check wants the controller's own.
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonConnected, Message: "probed before"})
		if err := env.Client.Status().Update(r.ctx, c); err != nil {
			return fmt.Errorf("set Cluster %s Ready: %w", name, err)
		}
		return nil
	}))
}

// preparation pushes an artifact to the bundled registry and creates a Preparation of the
// Order for it, as the Order reconciler would.
func (r *crashRun) preparation(name string) *preparation {
	t := r.t
	repository := registry.Addr + "/" + namespace + "/" + orderName
	digest, err := (&oci.Client{}).PushArtifact(r.ctx, repository, []byte(name), nil)
	must(t, err)
	p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: orderName}, ProductRef: v1.LocalObjectReference{Name: "podinfo-fleet"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: "sha256:" + strings.Repeat("c", 64)},
		TargetNamespace: targetNamespace,
		Artifact:        v1.Artifact{Ref: "oci://" + repository + "@" + digest, Digest: digest},
		ConfigHash:      name,
	}}
	must(t, env.Client.Create(r.ctx, p))
	return &preparation{Preparation: p, repoURL: "oci://" + repository, digest: digest}
}

// label moves a Cluster to tier.
func (r *crashRun) label(name, tier string) {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"`+tier+`"}}}`))
	must(r.t, env.Client.Patch(r.ctx, &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}, patch))
}

func clusterName(i int) string { return fmt.Sprintf("edge-%04d", i) }

// parallel runs do for 0..n-1 on eight workers and returns the first error.
func parallel(n int, do func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := do(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

// spread prints the minimum, median and maximum of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("min %s, median %s, max %s", s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// must is harness.Must: the test stops at an error.
var must = harness.Must

// asKokumiReads is the Application as Kokumi reads it.
func asKokumiReads(t *testing.T, app *unstructured.Unstructured) *argocd.Application {
	t.Helper()
	read, err := argocd.ApplicationFrom(app)
	if err != nil {
		t.Fatal(err)
	}
	return read
}
