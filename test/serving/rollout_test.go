package serving

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/stages"
)

// ringCluster registers a Ready Cluster of the fixture's tier, labelled ring=ring when ring is
// not empty.
func (f *fixture) ringCluster(name, ring string, ready bool) {
	f.t.Helper()
	c := &v1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tier": f.tier}},
		Spec:       v1.ClusterSpec{Server: "https://" + name + ".example:6443", CredentialsRef: v1.LocalObjectReference{Name: name}},
	}
	if ring != "" {
		c.Labels["ring"] = ring
	}
	must(f.t, f.createCluster(c))
	f.setReady(c, ready)
}

// setRollout sets the Environment edge's spec.rollout.
func (f *fixture) setRollout(p *v1.RolloutPolicy) {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e v1.Environment
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e); err != nil {
			return err
		}
		e.Spec.Rollout = p
		return env.Client.Update(f.ctx, &e)
	}))
}

// laterStage checks that a stage requiring the Environment edge is not passed by prep: an
// Environment prod of the namespace requires edge, and the pipeline holds prep back naming
// why edge's Order does not count.
func (f *fixture) laterStage(prep *v1.Preparation, why string) {
	f.t.Helper()
	prod := &v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: f.ns}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "none"}}, Project: f.project,
		Requires: []v1.StageRequirement{{Environment: "edge"}},
	}}
	if err := env.Client.Create(f.ctx, prod); err != nil && !apierrors.IsAlreadyExists(err) {
		f.t.Fatal(err)
	}
	v, err := stages.NewPipeline(env.Client, env.Client, cfg).Check(f.ctx, f.ns, "prod", prep)
	must(f.t, err)
	if v.Allowed || !strings.Contains(v.Message, why) {
		f.t.Errorf("the stage after edge: allowed %v, %q; want held with %q", v.Allowed, v.Message, why)
	}
}

// canaryThenRest is a policy of two waves: the clusters of ring canary, with soak, then the
// others.
func canaryThenRest(soak time.Duration, onFailure v1.RolloutFailureAction) *v1.RolloutPolicy {
	return &v1.RolloutPolicy{Waves: []v1.RolloutWave{
		{Name: "canary", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}, Soak: &metav1.Duration{Duration: soak}},
		{Name: "rest"},
	}, OnFailure: onFailure}
}

// targetRevision is the revision cluster's Application targets; empty when it has none.
func (f *fixture) targetRevision(cluster string) string {
	f.t.Helper()
	app, err := f.app(cluster)
	if apierrors.IsNotFound(err) {
		return ""
	}
	must(f.t, err)
	rev, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
	return rev
}

// targets waits until every cluster's Application targets revision (empty: has none).
func (f *fixture) targets(revision string, clusters ...string) {
	f.t.Helper()
	for _, c := range clusters {
		f.eventually(c+" targets "+revision, func() error {
			if got := f.targetRevision(c); got != revision {
				return fmt.Errorf("targets %q", got)
			}
			return nil
		})
	}
}

// stillTargets checks, for a while, that the clusters' Applications keep targeting revision.
func (f *fixture) stillTargets(revision string, clusters ...string) {
	f.t.Helper()
	for range 10 {
		for _, c := range clusters {
			if got := f.targetRevision(c); got != revision {
				f.t.Fatalf("%s targets %q, want %q still", c, got, revision)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rolloutIs waits for status.rollout to be in state at wave.
func (f *fixture) rolloutIs(state v1.RolloutState, wave string) *v1.Serving {
	f.t.Helper()
	var s *v1.Serving
	f.eventually(fmt.Sprintf("roll-out %s at wave %s", state, wave), func() error {
		s = f.serving()
		if r := s.Status.Rollout; r == nil || r.State != state || r.Wave != wave || s.Status.ObservedGeneration != s.Generation {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})
	return s
}

// waiting waits until cluster is a Waiting target whose message has msg.
func (f *fixture) waiting(cluster, msg string) {
	f.t.Helper()
	f.eventually(cluster+" Waiting", func() error {
		t := f.target(f.serving(), cluster)
		if t == nil || t.Conditions[0].Reason != v1.ReasonWaiting || !strings.Contains(t.Conditions[0].Message, msg) {
			return fmt.Errorf("target %+v", t)
		}
		return nil
	})
}

// soaking waits until the current wave of the roll-out of prep is healthy and soaks.
func (f *fixture) soaking(prep string) {
	f.t.Helper()
	f.eventually("the wave soaks", func() error {
		s := f.serving()
		if r := s.Status.Rollout; r == nil || r.Preparation != prep || r.WaveHealthySince == nil {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})
}

// afterSoak reconciles the Serving with a clock hours ahead, as if the current wave's soak had
// passed, until check passes.
func (f *fixture) afterSoak(what string, check func() error) {
	f.t.Helper()
	r := reconciler(cachedClient())
	r.Now = func() time.Time { return time.Now().Add(3 * time.Hour) }
	f.eventually(what, func() error {
		f.settled()
		if _, err := r.Reconcile(f.ctx, f.request()); err != nil {
			return err
		}
		return check()
	})
}

// deployAll rolls prep out through canaryThenRest's waves to canaries, then rest, healthy.
func (f *fixture) deployAll(prep *v1.Preparation, canaries, rest []string) {
	f.t.Helper()
	rev := prep.Spec.Artifact.Digest
	f.targets(rev, canaries...)
	f.healthy(rev, canaries...)
	f.targets(rev, rest...)
	f.healthy(rev, rest...)
	f.ready(v1.ReasonDeployed, "Deployed Preparation "+prep.Name)
	f.rolloutIs(v1.RolloutComplete, v1.UnselectedWave)
}

func TestRolloutWavesRollInOrderAfterTheSoak(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(time.Hour, ""))
	f.ringCluster("wv-canary", "canary", true)
	f.ringCluster("wv-a", "", true)
	f.ringCluster("wv-b", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", one.Name)

	// The first release: the canary first; the rest has no Application until it soaked.
	f.targets(one.Spec.Artifact.Digest, "wv-canary")
	f.waiting("wv-a", "wave rest waits for wave canary to be healthy and soak 1h0m0s")
	f.healthy(one.Spec.Artifact.Digest, "wv-canary")
	f.rolloutIs(v1.RolloutProgressing, "canary")
	f.soaking(one.Name)
	f.stillTargets("", "wv-a", "wv-b")
	f.afterSoak("the rest wave starts after the soak", func() error {
		if f.targetRevision("wv-a") != one.Spec.Artifact.Digest || f.targetRevision("wv-b") != one.Spec.Artifact.Digest {
			return fmt.Errorf("rest not updated")
		}
		return nil
	})
	f.deployAll(one, []string{"wv-canary"}, []string{"wv-a", "wv-b"})

	// The second release: the canary is updated; the rest keeps running the first, its
	// Applications untouched, while the canary is not healthy and while it soaks.
	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "wv-canary")
	f.waiting("wv-b", "wave rest waits for wave canary")
	s := f.ready(v1.ReasonProgressing, "Deploying Preparation podinfo-edge-2")
	if got := s.Status.Rollout.Waves; len(got) != 3 || got[1] != (v1.WaveCount{Name: "rest", Selected: 2, Waiting: 2}) || got[0].Name != "canary" || got[0].Selected != 1 {
		t.Errorf("status.rollout.waves %+v", got)
	}
	f.stillTargets(one.Spec.Artifact.Digest, "wv-a", "wv-b")
	f.healthy(two.Spec.Artifact.Digest, "wv-canary")
	f.soaking(two.Name)
	f.ready(v1.ReasonProgressing, "; roll-out at wave canary (1 of 3), healthy and soaking since")
	f.stillTargets(one.Spec.Artifact.Digest, "wv-a", "wv-b")
	f.afterSoak("the rest wave starts after the soak", func() error {
		if f.targetRevision("wv-a") != two.Spec.Artifact.Digest {
			return fmt.Errorf("rest not updated")
		}
		return nil
	})
	f.deployAll(two, []string{"wv-canary"}, []string{"wv-a", "wv-b"})
}

func TestRolloutMaxUnavailableIsHonouredAtEveryMomentCountedFromTheApplications(t *testing.T) {
	f := newFixture(t)
	one := intstr.FromInt32(1)
	f.setRollout(&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "all", MaxUnavailable: &one}}})
	clusters := []string{"mu-a", "mu-b", "mu-c"}
	for _, c := range clusters {
		f.ringCluster(c, "", true)
	}
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	rev := prep.Spec.Artifact.Digest

	// A watcher reads the Applications all along: never more than one targets the release
	// without being synced and healthy at it.
	var worst atomic.Int32
	// While the test itself makes mu-a unhealthy again, the watcher leaves it out.
	var regressed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := int32(0)
			for _, app := range f.apps() {
				target, _, _ := unstructured.NestedString(app.Object, "spec", "source", "targetRevision")
				sync, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status")
				health, _, _ := unstructured.NestedString(app.Object, "status", "health", "status")
				if regressed.Load() && app.GetLabels()[argocd.LabelCluster] == "mu-a" {
					continue
				}
				if target == rev && (sync != "Synced" || health != "Healthy") {
					n++
				}
			}
			if n > worst.Load() {
				worst.Store(n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	defer func() { close(stop); wg.Wait() }()

	f.order("edge", prep.Name)
	f.targets(rev, "mu-a")
	f.waiting("mu-b", "wave all has as many clusters updating as its maxUnavailable allows")
	f.stillTargets("", "mu-b", "mu-c")
	f.healthy(rev, "mu-a")
	f.targets(rev, "mu-b")
	f.stillTargets("", "mu-c")

	// mu-a, healthy before, is not any more: its Application counts, whatever the status said.
	regressed.Store(true)
	f.playArgoCD("mu-a", "Synced", "Progressing", rev)
	f.healthy(rev, "mu-b")
	f.stillTargets("", "mu-c")
	f.healthy(rev, "mu-a")
	regressed.Store(false)
	f.targets(rev, "mu-c")
	f.healthy(rev, "mu-c")
	s := f.ready(v1.ReasonDeployed, "to mu-a, mu-b, mu-c")
	if r := s.Status.Rollout; r == nil || r.State != v1.RolloutComplete {
		t.Errorf("status.rollout %+v", r)
	}
	if w := worst.Load(); w > 1 {
		t.Errorf("%d Applications targeted the release unhealthy at once, want at most 1", w)
	}
}

func TestRolloutAFailureInTheCanaryHaltsBeforeTheSecondWave(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(0, v1.RolloutHalt))
	f.ringCluster("hl-canary", "canary", true)
	f.ringCluster("hl-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", one.Name)
	f.deployAll(one, []string{"hl-canary"}, []string{"hl-a"})

	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "hl-canary")
	f.playArgoCD("hl-canary", "Synced", "Degraded", two.Spec.Artifact.Digest)
	s := f.ready(v1.ReasonRolloutHalted, "halted in wave canary: it failed on hl-canary (Degraded), past the failure budget of 0")
	if r := s.Status.Rollout; r.State != v1.RolloutHalted || r.Waves[0].Failed != 1 || r.Waves[1].Waiting != 1 {
		t.Errorf("status.rollout %+v", r)
	}
	f.waiting("hl-a", "halted")
	// It stays halted, the rest untouched, even once the canary recovers.
	f.healthy(two.Spec.Artifact.Digest, "hl-canary")
	f.stillTargets(one.Spec.Artifact.Digest, "hl-a")
	s = f.ready(v1.ReasonRolloutHalted, "hl-canary")
	// A halted release satisfies no stage: it is never Deployed, and has no record here.
	if _, ok := s.Status.DeployedAt(two.Spec.Artifact.Digest); ok {
		t.Error("the halted release counts as Deployed")
	}
	var p v1.Preparation
	must(t, env.Client.Get(f.ctx, client.ObjectKeyFromObject(two), &p))
	if len(p.Status.DeploymentRecords) != 0 {
		t.Errorf("the halted release has records %+v", p.Status.DeploymentRecords)
	}
	f.laterStage(&p, "edge has not deployed this release yet (Order podinfo-edge: RolloutHalted)")
}

func TestRolloutRollsBackToTheLastRecordedGoodPreparation(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(0, v1.RolloutRollback))
	f.ringCluster("rb-canary", "canary", true)
	f.ringCluster("rb-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)

	// The first release fails with nothing recorded before it: it halts and says why.
	f.targets(one.Spec.Artifact.Digest, "rb-canary")
	f.playArgoCD("rb-canary", "Synced", "Degraded", one.Spec.Artifact.Digest)
	f.ready(v1.ReasonRolloutHalted, "it cannot roll back: no Preparation older than podinfo-edge-1 has a deployment record in Environment edge")

	// The second runs healthily everywhere: it is recorded. (Each Preparation is made a second
	// after the last: a rollback goes to an older one, by creation.)
	time.Sleep(time.Second)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.promote(two.Name)
	f.deployAll(two, []string{"rb-canary"}, []string{"rb-a"})
	f.records(two.Name, 1)

	// The third fails on the canary: every cluster it changed goes back to the second.
	time.Sleep(time.Second)
	three := f.preparation("podinfo-edge-3", "podinfo", false)
	f.promote(three.Name)
	f.targets(three.Spec.Artifact.Digest, "rb-canary")
	f.playArgoCD("rb-canary", "Synced", "Degraded", three.Spec.Artifact.Digest)
	s := f.ready(v1.ReasonRolledBack, "goes back to Preparation podinfo-edge-2")
	if r := s.Status.Rollout; r.State != v1.RolloutRolledBack || r.RollbackTo != two.Name || !strings.Contains(r.Message, "rb-canary (Degraded)") {
		t.Errorf("status.rollout %+v", r)
	}
	f.targets(two.Spec.Artifact.Digest, "rb-canary")
	f.stillTargets(two.Spec.Artifact.Digest, "rb-a")
	f.healthy(two.Spec.Artifact.Digest, "rb-canary")
	s = f.ready(v1.ReasonRolledBack, "podinfo-edge-2")
	if _, ok := s.Status.DeployedAt(three.Spec.Artifact.Digest); ok {
		t.Error("the rolled-back release counts as Deployed")
	}
	if _, ok := s.Status.DeployedAt(two.Spec.Artifact.Digest); ok {
		t.Error("a rolled-back Serving counts as Deployed")
	}
	f.laterStage(three, "edge has not deployed this release yet (Order podinfo-edge: RolledBack)")
}

func TestRolloutAClusterThatJoinsGetsTheReleaseOfItsWave(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(time.Hour, ""))
	f.ringCluster("jn-canary", "canary", true)
	f.ringCluster("jn-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", one.Name)
	f.targets(one.Spec.Artifact.Digest, "jn-canary")
	f.healthy(one.Spec.Artifact.Digest, "jn-canary")
	f.soaking(one.Name)
	f.afterSoak("the rest wave starts", func() error {
		if f.targetRevision("jn-a") != one.Spec.Artifact.Digest {
			return fmt.Errorf("rest not updated")
		}
		return nil
	})
	f.deployAll(one, []string{"jn-canary"}, []string{"jn-a"})

	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "jn-canary")
	f.healthy(two.Spec.Artifact.Digest, "jn-canary")
	f.rolloutIs(v1.RolloutProgressing, "canary")
	f.soaking(two.Name)

	// While the canary soaks, one cluster joins each wave: the canary's runs the new release,
	// the rest's the one its wave runs.
	f.ringCluster("jn-canary2", "canary", true)
	f.ringCluster("jn-b", "", true)
	f.targets(two.Spec.Artifact.Digest, "jn-canary2")
	f.targets(one.Spec.Artifact.Digest, "jn-b")
	f.stillTargets(one.Spec.Artifact.Digest, "jn-a", "jn-b")
	s := f.serving()
	if r := s.Status.Rollout; r == nil || r.From != one.Name || r.Wave != "canary" {
		t.Errorf("status.rollout %+v", r)
	}
}

func TestRolloutHeldClustersNeitherFailNorBlockAWave(t *testing.T) {
	f := newFixture(t)
	f.setRollout(canaryThenRest(0, v1.RolloutHalt))
	f.ringCluster("hd-canary", "canary", true)
	f.ringCluster("hd-canary-down", "canary", false)
	f.ringCluster("hd-a", "", true)
	prep := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", prep.Name)
	f.targets(prep.Spec.Artifact.Digest, "hd-canary")
	f.stillTargets("", "hd-a")
	f.healthy(prep.Spec.Artifact.Digest, "hd-canary")
	f.targets(prep.Spec.Artifact.Digest, "hd-a")
	f.healthy(prep.Spec.Artifact.Digest, "hd-a")
	s := f.ready(v1.ReasonDeployed, "not ready: hd-canary-down")
	r := s.Status.Rollout
	if r == nil || r.State != v1.RolloutComplete || r.Waves[0] != (v1.WaveCount{Name: "canary", Selected: 2, Healthy: 1}) {
		t.Errorf("status.rollout %+v", r)
	}
	if f.targetRevision("hd-canary-down") != "" {
		t.Error("the held cluster got an Application")
	}
}

func TestWithoutARolloutEveryClusterUpdatesAtOnce(t *testing.T) {
	f := newFixture(t)
	f.ringCluster("na-canary", "canary", true)
	f.ringCluster("na-a", "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	f.order("edge", one.Name)
	f.targets(one.Spec.Artifact.Digest, "na-canary", "na-a")
	f.healthy(one.Spec.Artifact.Digest, "na-canary", "na-a")
	f.ready(v1.ReasonDeployed, "to na-a, na-canary")
	f.promote(two.Name)
	// Both Applications are updated before any of them is healthy.
	f.targets(two.Spec.Artifact.Digest, "na-canary", "na-a")
	s := f.ready(v1.ReasonProgressing, "Deploying Preparation podinfo-edge-2")
	if s.Status.Rollout != nil {
		t.Errorf("status.rollout %+v without a policy", s.Status.Rollout)
	}
	for _, tg := range s.Status.Targets {
		if tg.Conditions[0].Reason == v1.ReasonWaiting {
			t.Errorf("target %+v waits without a policy", tg)
		}
	}
}

func TestARolloutPolicyIsValidated(t *testing.T) {
	f := newFixture(t)
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	zero := intstr.FromInt32(0)
	hour := metav1.Duration{Duration: time.Hour}
	for _, tc := range []struct {
		policy *v1.RolloutPolicy
		want   string
	}{
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a"}, {Name: "a"}}}, "wave names must be unique"},
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: v1.UnselectedWave}}}, "reserved"},
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a", MaxUnavailable: pct("0%")}}}, "a percent from 1% to 100%"},
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a", MaxUnavailable: pct("101%")}}}, "a percent from 1% to 100%"},
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a", MaxUnavailable: &zero}}}, "a count of at least 1"},
		{&v1.RolloutPolicy{Waves: make([]v1.RolloutWave, 17)}, "must have at most 16 items"},
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a"}}, OnFailure: "Retry"}, "Unsupported value"},
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a"}}, Windows: make([]v1.RolloutWindow, 9)}, "must have at most 8 items"},
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a"}}, Windows: []v1.RolloutWindow{{Kind: "Maybe", Schedule: "0 22 * * *", Duration: hour}}}, "Unsupported value"},
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a"}}, Windows: []v1.RolloutWindow{{Schedule: "0", Duration: hour}}}, "spec.rollout.windows[0].schedule"},
		{&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a"}}, OnWindowClose: "Stop"}, "Unsupported value"},
	} {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var e v1.Environment
			must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e))
			e.Spec.Rollout = tc.policy
			return env.Client.Update(f.ctx, &e)
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("policy %+v: error %v, want %q", tc.policy, err, tc.want)
		}
	}
	ten := pct("10%")
	f.setRollout(&v1.RolloutPolicy{Waves: []v1.RolloutWave{{Name: "a", MaxUnavailable: ten}, {Name: "b"}}, FailureBudget: 2})
	var e v1.Environment
	must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "edge"}, &e))
	if e.Spec.Rollout.OnFailure != v1.RolloutHalt || e.Spec.Rollout.OnWindowClose != v1.WindowCloseFinish {
		t.Errorf("onFailure %q, onWindowClose %q: want the defaults Halt and Finish", e.Spec.Rollout.OnFailure, e.Spec.Rollout.OnWindowClose)
	}

	// An Order's pace is validated as a wave's maxUnavailable is.
	f.order("edge", "")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var o v1.Order
		must(t, env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "podinfo-edge"}, &o))
		o.Spec.RolloutPace = &v1.RolloutPace{MaxUnavailable: &zero}
		return env.Client.Update(f.ctx, &o)
	})
	if err == nil || !strings.Contains(err.Error(), "a count of at least 1") {
		t.Errorf("an Order's rolloutPace.maxUnavailable of 0: %v", err)
	}
}
