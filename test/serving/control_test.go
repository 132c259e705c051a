package serving

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/promotion"
	"github.com/kokumi-dev/kokumi/internal/stages"
)

// tenant returns a client of a person of the namespace with the edit role, and their name.
func (f *fixture) tenant(name string) (client.Client, string) {
	f.t.Helper()
	must(f.t, env.AggregateTenantRoles(f.ctx))
	return f.person(name, "edit")
}

// control sets the Serving's spec.rollout as c.
func (f *fixture) control(c client.Client, set func(*v1.RolloutControl)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := f.serving()
		if s.Spec.Rollout == nil {
			s.Spec.Rollout = &v1.RolloutControl{}
		}
		set(s.Spec.Rollout)
		return c.Update(f.ctx, s)
	})
}

// controlEvent waits for an Event of reason on the Serving whose message has msg. Under API
// faults an Event may be lost: then the status, checked before, is the proof.
func (f *fixture) controlEvent(reason, msg string) {
	f.t.Helper()
	if faults != nil {
		return
	}
	f.eventually("Event "+reason, func() error {
		for _, m := range f.eventsOf(f.serving().Name, reason) {
			if strings.Contains(m, msg) {
				return nil
			}
		}
		return fmt.Errorf("no Event %s with %q", reason, msg)
	})
}

func TestRolloutAPersonPausesResumesAndAbortsIt(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(0, v1.RolloutHalt))
	f.ringCluster("pz-canary", "canary", true)
	f.ringCluster("pz-a", "", true)
	f.ringCluster("pz-b", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.deployAll(one, []string{"pz-canary"}, []string{"pz-a", "pz-b"})
	f.records(one.Name, 1)
	time.Sleep(time.Second) // a rollback goes to an older Preparation, by creation
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	tenant, alice := f.tenant("alice-" + f.ns)

	// Paused while the canary updates: once it is healthy, the rest is not changed.
	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "pz-canary")
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = true, alice }))
	f.healthy(two.Spec.Artifact.Digest, "pz-canary")
	s := f.rolloutIs(v1.RolloutPaused, "canary")
	if r := s.Status.Rollout; r.By != alice || !strings.Contains(r.Message, alice+" paused the roll-out of Preparation podinfo-edge-2") {
		t.Errorf("status.rollout %+v", r)
	}
	f.waiting("pz-a", "wave rest waits for wave canary")
	f.ready(v1.ReasonProgressing, alice+" paused the roll-out")
	f.afterSoak("the paused roll-out stays paused", func() error {
		if r := f.serving().Status.Rollout; r == nil || r.State != v1.RolloutPaused {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})
	f.stillTargets(one.Spec.Artifact.Digest, "pz-a", "pz-b")
	f.controlEvent("RolloutPaused", alice+" paused")

	// Nobody writes another's name, nor lifts a pause without theirs.
	err := f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = false, "bob" })
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.rollout.by: a change of spec.rollout names who makes it: set by to "+alice) {
		t.Fatalf("a tenant resumed in another's name: %v", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sv := f.serving()
		sv.Spec.Rollout = nil
		return tenant.Update(f.ctx, sv)
	})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a tenant lifted the pause without a name: %v", err)
	}

	// Resumed: the rest wave rolls out.
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = false, alice }))
	f.targets(two.Spec.Artifact.Digest, "pz-a", "pz-b")
	f.controlEvent("RolloutResumed", alice+" resumed the roll-out of Preparation podinfo-edge-2")
	f.healthy(two.Spec.Artifact.Digest, "pz-a", "pz-b")
	f.ready(v1.ReasonDeployed, "Deployed Preparation "+two.Name)
	f.records(two.Name, 1)

	// Aborted on the canary: it goes back to the last recorded release; the rest is left.
	time.Sleep(time.Second)
	three := f.preparation("podinfo-edge-3", "podinfo", false)
	f.promote(three.Name)
	f.targets(three.Spec.Artifact.Digest, "pz-canary")
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Abort, c.By = three.Name, alice }))
	s = f.ready(v1.ReasonRolloutAborted, alice+" aborted the roll-out of Preparation podinfo-edge-3: every cluster it changed goes back to Preparation podinfo-edge-2")
	if r := s.Status.Rollout; r.State != v1.RolloutAborted || r.RollbackTo != two.Name || r.By != alice {
		t.Errorf("status.rollout %+v", r)
	}
	f.targets(two.Spec.Artifact.Digest, "pz-canary")
	f.stillTargets(two.Spec.Artifact.Digest, "pz-a", "pz-b")
	f.controlEvent(v1.ReasonRolloutAborted, alice+" aborted")

	// The abort cleared, the release rolls out again from its first wave.
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Abort, c.By = "", alice }))
	f.targets(three.Spec.Artifact.Digest, "pz-canary")
	f.rolloutIs(v1.RolloutProgressing, "canary")
	f.stillTargets(two.Spec.Artifact.Digest, "pz-a", "pz-b")
}

// A Serving whose Environment has no roll-out policy pauses too: a promotion made while it is
// paused changes no cluster, and resumed, every cluster updates at once.
func TestRolloutWithoutAPolicyAPausedServingChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.ringCluster("np-a", "", true)
	f.ringCluster("np-b", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", one.Name)
	f.targets(one.Spec.Artifact.Digest, "np-a", "np-b")
	f.healthy(one.Spec.Artifact.Digest, "np-a", "np-b")
	f.ready(v1.ReasonDeployed, "Deployed Preparation "+one.Name)

	tenant, bob := f.tenant("bob-" + f.ns)
	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = true, bob }))
	f.promote(two.Name)
	f.waiting("np-a", "the roll-out is paused")
	s := f.rolloutIs(v1.RolloutPaused, "all")
	if r := s.Status.Rollout; r.Preparation != two.Name || r.Waves[0].Waiting != 2 {
		t.Errorf("status.rollout %+v", r)
	}
	f.stillTargets(one.Spec.Artifact.Digest, "np-a", "np-b")

	must(t, f.control(tenant, func(c *v1.RolloutControl) { c.Paused, c.By = false, bob }))
	f.targets(two.Spec.Artifact.Digest, "np-a", "np-b")
	f.eventually("no roll-out once resumed", func() error {
		if r := f.serving().Status.Rollout; r != nil {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})
}

// windowAt returns an Allow window opening daily at the hour of at, in UTC, for an hour.
func windowAt(at time.Time) v1.RolloutWindow {
	return v1.RolloutWindow{Schedule: fmt.Sprintf("0 %d * * *", at.UTC().Hour()), Duration: metav1.Duration{Duration: time.Hour}}
}

// The windows with a clock that the test moves: the controller's own clock finds them closed
// (the window opens two hours from now); a reconcile with a clock inside the window starts the
// wave.
func TestRolloutWavesStartOnlyInsideTheWindows(t *testing.T) {
	f := newFixture(t)
	opens := time.Now().UTC().Add(2 * time.Hour).Truncate(time.Hour)
	policy := canaryThenRest(0, v1.RolloutHalt)
	policy.Windows = []v1.RolloutWindow{windowAt(opens)}
	f.setRollout(policy)
	f.ringCluster("wn-canary", "canary", true)
	f.ringCluster("wn-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)

	f.waiting("wn-canary", "wave canary waits for the roll-out to start: outside the roll-out windows: the next opens at "+opens.Format(time.RFC3339))
	s := f.ready(v1.ReasonProgressing, "roll-out not started; outside the roll-out windows: the next opens at "+opens.Format(time.RFC3339))
	if r := s.Status.Rollout; r.NextWindow == nil || !r.NextWindow.Time.Equal(opens) || r.Wave != "" {
		t.Errorf("status.rollout %+v", r)
	}
	f.stillTargets("", "wn-canary", "wn-a")

	inside := reconciler(cachedClient())
	inside.Now = func() time.Time { return opens.Add(time.Minute) }
	f.eventually("the canary starts inside the window", func() error {
		f.settled()
		if _, err := inside.Reconcile(f.ctx, f.request()); err != nil {
			return err
		}
		if f.targetRevision("wn-canary") != one.Spec.Artifact.Digest {
			return fmt.Errorf("the canary is not updated")
		}
		return nil
	})
	// Healthy, the canary is done, but the window closed (the controller's clock): the rest
	// waits for the next.
	f.healthy(one.Spec.Artifact.Digest, "wn-canary")
	f.waiting("wn-a", "wave rest waits for a roll-out window: outside the roll-out windows")
	f.stillTargets("", "wn-a")
	f.eventually("the rest starts inside the window", func() error {
		f.settled()
		if _, err := inside.Reconcile(f.ctx, f.request()); err != nil {
			return err
		}
		if f.targetRevision("wn-a") != one.Spec.Artifact.Digest {
			return fmt.Errorf("the rest is not updated")
		}
		return nil
	})
}

// setPace sets the Order's spec.rolloutPace.
func (f *fixture) setPace(pace *v1.RolloutPace) {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var o v1.Order
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "podinfo-edge"}, &o); err != nil {
			return err
		}
		o.Spec.RolloutPace = pace
		return env.Client.Update(f.ctx, &o)
	}))
}

// An Order slows its Environment down: without a policy, one cluster at a time; with one, a
// longer soak than the Environment's.
func TestRolloutAnOrdersPaceIsSlowerThanItsEnvironment(t *testing.T) {
	f := newFixture(t)
	f.ringCluster("pc-a", "", true)
	f.ringCluster("pc-b", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", "")
	oneAtATime := intstr.FromInt32(1)
	f.setPace(&v1.RolloutPace{MaxUnavailable: &oneAtATime, MinSoak: &metav1.Duration{Duration: time.Hour}})
	f.promote(one.Name)
	f.waiting("pc-b", "wave all has as many clusters updating as its maxUnavailable allows (the Environment's, or the Order's rolloutPace.maxUnavailable of 1)")
	f.targets(one.Spec.Artifact.Digest, "pc-a")
	f.stillTargets("", "pc-b")
	f.healthy(one.Spec.Artifact.Digest, "pc-a")
	f.targets(one.Spec.Artifact.Digest, "pc-b")
	f.healthy(one.Spec.Artifact.Digest, "pc-b")
	f.ready(v1.ReasonDeployed, "Deployed Preparation "+one.Name)

	// With the Environment's waves that do not soak, the Order's hour holds the rest back.
	f.setRollout(canaryThenRest(0, v1.RolloutHalt))
	f.ringCluster("pc-canary", "canary", true)
	time.Sleep(time.Second)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "pc-canary")
	f.healthy(two.Spec.Artifact.Digest, "pc-canary")
	f.soaking(two.Name)
	f.waiting("pc-a", "wave rest waits for wave canary to be healthy and soak 1h0m0s")
	f.stillTargets(one.Spec.Artifact.Digest, "pc-a", "pc-b")
}

// stageAfter returns the verdict of a stage prod that requires req of the Environment edge, for
// prep.
func (f *fixture) stageAfter(req v1.StageRequirement, prep *v1.Preparation) promotion.Verdict {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		prod := &v1.Environment{}
		err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "prod"}, prod)
		if apierrors.IsNotFound(err) {
			return env.Client.Create(f.ctx, &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: f.ns}, Spec: v1.EnvironmentSpec{
				ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "none"}}, Project: f.project,
				Requires: []v1.StageRequirement{req},
			}})
		}
		if err != nil {
			return err
		}
		prod.Spec.Requires = []v1.StageRequirement{req}
		return env.Client.Update(f.ctx, prod)
	}))
	v, err := stages.NewPipeline(env.Client, env.Client, cfg).Check(f.ctx, f.ns, "prod", prep)
	must(f.t, err)
	return v
}

// A wave the roll-out went past gets a deployment record of its own, and a later stage may
// require that wave rather than the whole Environment.
func TestRolloutAWavePassedIsRecordedAndPassesAStageThatRequiresIt(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(time.Hour, v1.RolloutHalt))
	f.ringCluster("wr-canary", "canary", true)
	f.ringCluster("wr-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	rev := one.Spec.Artifact.Digest
	f.targets(rev, "wr-canary")
	f.healthy(rev, "wr-canary")
	f.soaking(one.Name)
	canary := v1.StageRequirement{Environment: "edge", Wave: "canary"}
	if v := f.stageAfter(canary, one); v.Allowed || !strings.Contains(v.Message, "edge has not rolled this release out past wave canary yet") {
		t.Errorf("the canary still soaks: allowed %v, %q", v.Allowed, v.Message)
	}

	f.afterSoak("the rest wave starts after the soak", func() error {
		if f.targetRevision("wr-a") != rev {
			return fmt.Errorf("rest not updated")
		}
		return nil
	})
	recs := f.recordsOf(one.Name, "canary", 1)
	if recs[0].Clusters != 1 || recs[0].Environment != "edge" {
		t.Fatalf("record %+v, want one of wave canary naming the canary", recs[0])
	}
	// The rest still progresses: a stage of the canary passes, one of the whole Environment not.
	f.eventually("a stage of the canary passes", func() error {
		if v := f.stageAfter(canary, one); !v.Allowed {
			return fmt.Errorf("held: %s", v.Message)
		}
		return nil
	})
	if v := f.stageAfter(v1.StageRequirement{Environment: "edge"}, one); v.Allowed || !strings.Contains(v.Message, "edge has not deployed this release yet") {
		t.Errorf("the whole Environment with the rest progressing: allowed %v, %q", v.Allowed, v.Message)
	}
	// A wave's record is no evidence of the Environment for a rollback either.
	time.Sleep(time.Second)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.setRollout(canaryThenRest(time.Hour, v1.RolloutRollback))
	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "wr-canary")
	f.playArgoCD("wr-canary", "Synced", "Degraded", two.Spec.Artifact.Digest)
	f.ready(v1.ReasonRolloutHalted, "it cannot roll back: no Preparation older than podinfo-edge-2 has a deployment record in Environment edge")
}
