package serving

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/notify"
)

// playDeployed writes the status Argo CD would write on cluster's Application after it
// deployed revision (status.history, a sync operation that Succeeded): sync at revision, health
// Healthy, and status.resources with the objects named in outOfSync reported OutOfSync beside a
// ConfigMap in sync.
func (f *fixture) playDeployed(cluster, sync, revision string, outOfSync ...string) {
	f.t.Helper()
	f.eventually("Application of "+cluster+" exists", func() error { _, err := f.app(cluster); return err })
	resources := []any{map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": "podinfo", "name": "cfg", "status": "Synced"}}
	for _, o := range outOfSync {
		kind, name, _ := strings.Cut(o, "/")
		resources = append(resources, map[string]any{"group": "apps", "version": "v1", "kind": kind, "namespace": "podinfo", "name": name,
			"status": "OutOfSync", "health": map[string]any{"status": "Healthy"}})
	}
	for {
		app, err := f.app(cluster)
		must(f.t, err)
		app.Object["status"] = map[string]any{
			"sync":   map[string]any{"status": sync, "revision": revision},
			"health": map[string]any{"status": "Healthy"},
			"operationState": map[string]any{"phase": "Succeeded", "message": "successfully synced (all tasks run)",
				"operation": map[string]any{"sync": map[string]any{"revision": revision}}, "startedAt": "2026-12-07T10:00:00Z"},
			"history":   []any{map[string]any{"id": int64(0), "revision": revision, "deployedAt": "2026-12-07T10:00:05Z"}},
			"resources": resources,
		}
		err = env.Client.Update(f.ctx, app)
		if apierrors.IsConflict(err) {
			continue
		}
		must(f.t, err)
		return
	}
}

// servingClusters is the controller's kokumi_serving_clusters of the fixture's Serving in state.
func (f *fixture) servingClusters(state string) (float64, error) {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return 0, err
	}
	for _, fam := range families {
		if fam.GetName() != metrics.ServingClustersName {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == f.ns && labels["serving"] == "podinfo-edge" && labels["state"] == state {
				return m.GetGauge().GetValue(), nil
			}
		}
	}
	return 0, fmt.Errorf("no series of state %s", state)
}

// drifts returns the bodies of the Drifted deliveries h received, by delivery id.
func (h *hookReceiver) drifts() map[string]notify.Body {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]notify.Body{}
	for _, r := range h.got {
		var body notify.Body
		if json.Unmarshal(r.body, &body) == nil && body.Event == v1.NotificationDrifted {
			out[r.header.Get(notify.IDHeader)] = body
		}
	}
	return out
}

// A cluster of the last wave whose workload someone changed after Argo CD deployed it (Argo CD
// reports it OutOfSync at the revision deployed, a Deployment out of sync, no operation
// running) is Drifted within the drift threshold: the Serving counts it drifted, not healthy, and
// names the Deployment; its wave does not count it healthy, so the roll-out does not complete and
// no record of the Environment is signed while it is drifted; the Drifted webhook is told once,
// the Serving gets a Warning Event, and kokumi_serving_clusters reads drifted 1. Synced again, it
// is Healthy: the roll-out completes and the record names it.
func TestADriftedClusterIsCountedAndToldAndNotHealthy(t *testing.T) {
	f := newFixture(t)
	hook, other := newHookReceiver(t, 0), newHookReceiver(t, 0)
	key, name := newKey(t), "webhooks-"+f.ns
	f.keySecret(name, key)
	signing := &v1.SecretKeyRef{Name: name, Key: "signing"}
	must(t, f.setNotifications(env.Client, []v1.Notification{
		{Name: "drift", URL: hook.URL, SecretRef: signing, Events: []v1.NotificationEvent{v1.NotificationDrifted}},
		{Name: "halts", URL: other.URL, SecretRef: signing, Events: []v1.NotificationEvent{"RolloutHalted"}},
	}))
	f.setRollout(canaryThenRest(0, v1.RolloutHalt))
	canary, a, b := "dr-canary-"+f.ns, "dr-a-"+f.ns, "dr-b-"+f.ns
	f.ringCluster(canary, "canary", true)
	f.ringCluster(a, "", true)
	f.ringCluster(b, "", true)
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	f.order("edge", one.Name)
	f.deployAll(one, []string{canary}, []string{a, b})

	two := f.preparation("podinfo-edge-2", "podinfo", false)
	rev := two.Spec.Artifact.Digest
	f.promote(two.Name)
	f.targets(rev, canary)
	f.playDeployed(canary, "Synced", rev)
	f.targets(rev, a, b)
	f.playDeployed(a, "Synced", rev)
	f.playDeployed(b, "OutOfSync", rev, "Deployment/web")

	var s *v1.Serving
	f.eventually(b+" Drifted", func() error {
		s = f.serving()
		tg := f.target(s, b)
		if tg == nil || tg.Conditions[0].Type != "Drifted" || tg.Conditions[0].Reason != v1.ReasonDrifted {
			return fmt.Errorf("target %+v", tg)
		}
		if msg := tg.Conditions[0].Message; !strings.Contains(msg, "OutOfSync: Deployment/web") || strings.Contains(msg, "ConfigMap/cfg") {
			t.Errorf("the target's message %q names the objects out of sync, and those alone", msg)
		}
		if want := (v1.ClusterCounts{Selected: 3, Healthy: 2, Drifted: 1}); s.Status.Clusters != want {
			return fmt.Errorf("counts %+v, want %+v", s.Status.Clusters, want)
		}
		return nil
	})
	if r := s.Status.Rollout; r == nil || r.State == v1.RolloutComplete || r.Preparation != two.Name {
		t.Fatalf("the roll-out completed with a drifted cluster: %+v", r)
	} else if i := slices.IndexFunc(r.Waves, func(w v1.WaveCount) bool { return w.Name == r.Wave }); i < 0 || r.Waves[i].Selected != 2 || r.Waves[i].Healthy != 1 {
		t.Errorf("wave %s counts %+v, want 2 selected, 1 healthy (the drifted cluster is not)", r.Wave, r.Waves)
	}
	if ready := f.ready(v1.ReasonDrifted, "drifted on "+b); ready.Status.Clusters.Drifted != 1 {
		t.Errorf("Ready %+v", ready.Status.Conditions)
	}
	f.records(two.Name, 0) // no record of the Environment names a drifted cluster: none is signed
	f.eventually("kokumi_serving_clusters drifted 1", func() error {
		if v, err := f.servingClusters(metrics.StateDrifted); err != nil || v != 1 {
			return fmt.Errorf("drifted %v (%v)", v, err)
		}
		return nil
	})
	f.eventually("the Drifted webhook is told", func() error {
		if len(hook.drifts()) == 0 {
			return fmt.Errorf("%d requests, none of Drifted", hook.count())
		}
		return nil
	})
	for _, body := range hook.drifts() {
		if !body.Warning || !strings.Contains(body.Message, "1 cluster of Preparation "+two.Name+" drifted: "+b) || body.Serving != "podinfo-edge" {
			t.Errorf("Drifted body %+v", body)
		}
	}
	f.expectEvents(v1.ReasonDrifted, b)

	// Argo CD reports it synced again: Healthy, the roll-out completes, the record names it.
	f.playDeployed(b, "Synced", rev)
	f.ready(v1.ReasonDeployed, "Deployed Preparation "+two.Name)
	f.rolloutIs(v1.RolloutComplete, v1.UnselectedWave)
	if recs := f.records(two.Name, 1); recs[0].Clusters != 3 {
		t.Errorf("the record of %s names %d clusters, want 3", two.Name, recs[0].Clusters)
	}
	f.eventually("kokumi_serving_clusters drifted 0", func() error {
		if v, err := f.servingClusters(metrics.StateDrifted); err != nil || v != 0 {
			return fmt.Errorf("drifted %v (%v)", v, err)
		}
		return nil
	})
	if n := len(hook.drifts()); n != 1 {
		t.Errorf("%d Drifted deliveries, want 1: one entry into drift", n)
	}
	if n := other.count(); n != 0 {
		t.Errorf("the webhook of RolloutHalted alone got %d requests", n)
	}
}
