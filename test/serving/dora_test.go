package serving

import (
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	kmetrics "github.com/kokumi-dev/kokumi/internal/metrics"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/provenance"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// doraSample is what the registry the controller serves says of a series of family with
// labels: a counter's value, or a histogram's count and sum.
func doraSample(family string, labels map[string]string) (value float64, count uint64, sum float64) {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return 0, 0, 0
	}
	for _, mf := range families {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			if h := m.GetHistogram(); h != nil {
				return 0, h.GetSampleCount(), h.GetSampleSum()
			}
			return m.GetCounter().GetValue(), 0, 0
		}
	}
	return 0, 0, 0
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// A Serving that deploys, halts, and deploys again signs each piece of evidence and counts it in
// the delivery measures' series, labelled by its Environment and Order: the deployment with its
// lead time from the render's start in the signed provenance (an hour before), the halt as a
// signed roll-out failure that stock verification reads back, and the next deployment as a
// deployment that ends the outage (its time to restore).
func TestSignedEvidenceCountsInTheDeliveryMeasures(t *testing.T) {
	kmetrics.SetDORAOrderLabels(1 << 20) // every test's Order is named, whatever ran before
	f := newFixture(t)
	f.setRollout(canaryThenRest(0, v1.RolloutHalt))
	f.ringCluster("dm-canary", "canary", true)
	f.ringCluster("dm-a", "", true)
	signer, err := (&record.Keys{Client: env.Client, Namespace: cfg.Namespace}).Ensure(f.ctx)
	must(t, err)
	store := &record.Store{Client: &oci.Client{}}
	rendered := time.Now().Add(-time.Hour)
	withProvenance := func(name string) *v1.Preparation {
		p := f.preparation(name, "podinfo", false)
		repository, _, _ := strings.Cut(oci.TrimScheme(p.Spec.Artifact.Ref), "@")
		_, err := provenance.Attach(f.ctx, store, signer, repository, p.Spec.Artifact.Digest, provenance.Render{Namespace: f.ns, Order: "podinfo-edge",
			Product: "podinfo-fleet", SourceURL: p.Spec.Source.URL, SourceDigest: p.Spec.Source.Digest, StartedOn: rendered})
		must(t, err)
		return p
	}
	labels := map[string]string{"environment": "edge", "order": f.ns + "/podinfo-edge"}
	failures := map[string]string{"environment": "edge", "order": f.ns + "/podinfo-edge", "kind": "halted"}
	wantSeries := func(what string, check func() error) { f.eventually(what, check) }

	one := withProvenance("podinfo-edge-1")
	f.order("edge", one.Name)
	f.deployAll(one, []string{"dm-canary"}, []string{"dm-a"})
	f.records(one.Name, 1)
	wantSeries("one deployment with its lead time", func() error {
		n, _, _ := doraSample(kmetrics.DeploymentsName, labels)
		_, leads, sum := doraSample(kmetrics.LeadTimeName, labels)
		if n != 1 || leads != 1 || sum < 3600 || sum > 3600+600 {
			return fmt.Errorf("deployments %v, lead times %d summing %vs; want 1, 1, about an hour", n, leads, sum)
		}
		return nil
	})

	two := withProvenance("podinfo-edge-2")
	f.promote(two.Name)
	f.targets(two.Spec.Artifact.Digest, "dm-canary")
	f.playArgoCD("dm-canary", "Synced", "Degraded", two.Spec.Artifact.Digest)
	s := f.ready(v1.ReasonRolloutHalted, "halted in wave canary")
	keys, err := (&record.Keys{Client: env.Client, Namespace: cfg.Namespace}).Trusted(f.ctx)
	must(t, err)
	repository, _, _ := strings.Cut(oci.TrimScheme(two.Spec.Artifact.Ref), "@")
	f.eventually("a signed roll-out failure of podinfo-edge-2", func() error {
		a, err := store.Attestations(f.ctx, repository, two.Spec.Artifact.Digest, keys)
		if err != nil {
			return err
		}
		if len(a.Failures) != 1 || !a.Failures[0].Verified {
			return fmt.Errorf("failures %+v", a.Failures)
		}
		p := a.Failures[0].Predicate
		if p.Outcome != record.OutcomeHalted || p.Environment != "edge" || p.Order != "podinfo-edge" || p.Namespace != f.ns ||
			p.Preparation != two.Name || p.Attempt != s.Status.Rollout.Attempt || p.Wave != "canary" {
			return fmt.Errorf("the failure says %+v", p)
		}
		return nil
	})
	wantSeries("one halt", func() error {
		if n, _, _ := doraSample(kmetrics.ChangeFailuresName, failures); n != 1 {
			return fmt.Errorf("halts %v, want 1", n)
		}
		return nil
	})
	// Reconciled again (a promotion of the same release), the halt is neither signed nor
	// counted again.
	f.promote(two.Name)
	f.settled()
	if n, _, _ := doraSample(kmetrics.ChangeFailuresName, failures); n != 1 {
		t.Errorf("halts %v after another reconcile, want 1", n)
	}

	three := withProvenance("podinfo-edge-3")
	f.promote(three.Name)
	f.deployAll(three, []string{"dm-canary"}, []string{"dm-a"})
	f.records(three.Name, 1)
	wantSeries("a second deployment that restores", func() error {
		n, _, _ := doraSample(kmetrics.DeploymentsName, labels)
		_, restores, _ := doraSample(kmetrics.TimeToRestoreName, labels)
		if n != 2 || restores != 1 {
			return fmt.Errorf("deployments %v, restores %d; want 2 and 1", n, restores)
		}
		return nil
	})
	a, err := store.Attestations(f.ctx, repository, two.Spec.Artifact.Digest, keys)
	must(t, err)
	if len(a.Failures) != 1 {
		t.Errorf("the halted release carries %d failures, want 1", len(a.Failures))
	}
}
