package pipeline

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// requireMatch sets the match of prod's requirement of staging.
func (f *fixture) requireMatch(match v1.StageMatch) {
	f.t.Helper()
	must(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var e v1.Environment
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "prod"}, &e); err != nil {
			return err
		}
		e.Spec.Requires[0].Match = match
		return env.Client.Update(f.ctx, &e)
	}))
}

// With match: Release, staging soaking the chart and images with zero replicas proves nothing
// for prod's three: prod waits and says why; once staging runs prod's values, prod follows
// after the soak.
func TestMatchReleaseHoldsAReleaseWhoseValuesStagingDidNotRun(t *testing.T) {
	f := newFixture(t, soak)
	f.requireMatch(v1.MatchRelease)
	f.productWith("podinfo-staging", "6.14.1", `"replicaCount":0`)
	f.productWith("podinfo-prod", "6.14.1", `"replicaCount":3`)
	harmless := f.deployStaging()
	f.order("prod", v1.PromotionAutomatic)
	prod := f.latest("app-prod")
	if harmless.Spec.ConfigurationDigest == "" || prod.Spec.ConfigurationDigest == "" || harmless.Spec.ConfigurationDigest == prod.Spec.ConfigurationDigest {
		t.Fatalf("configuration digests: staging %q, prod %q", harmless.Spec.ConfigurationDigest, prod.Spec.ConfigurationDigest)
	}
	clock.Advance(soak + time.Minute)
	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging runs the same chart and images with other values (match: Release)",
		"the Serving keeps running what it runs")
	if got := f.serving("app-prod").Spec.PreparationName; got != "" {
		t.Fatalf("prod was promoted to %s with values staging never ran", got)
	}

	// staging runs prod's values (another Product, the same values): the same release. What
	// staging runs is what its Serving's spec names (the Order's status may name harmless a
	// moment longer).
	f.productWith("podinfo-staging", "6.14.1", `"replicaCount":3`)
	same := f.promoted("app-staging", harmless.Name)
	if same.Spec.ConfigurationDigest != prod.Spec.ConfigurationDigest {
		t.Fatalf("the same values under two Products and Orders differ: %s %q, %s %q",
			same.Name, same.Spec.ConfigurationDigest, prod.Name, prod.Spec.ConfigurationDigest)
	}
	f.playArgoCD("app-staging", []string{"staging-1"}, "Healthy")
	f.records(same.Name, 1)
	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging soaking", "of 30m (same chart, images and values)")
	clock.Advance(soak + time.Minute)
	f.eventually("prod promoted once the soak of its values ends", func() error {
		if got := f.serving("app-prod").Spec.PreparationName; got != prod.Name {
			return fmt.Errorf("prod runs %q", got)
		}
		return nil
	})
	f.orderReady("app-prod", v1.ReasonRendered)
}

// Without a match (Artifact), as before: the values do not count; the message says what did,
// and, as staging runs other values, which Order runs them.
// And a Preparation with an image Kokumi could not pin passes no stage, whatever ran there.
func TestMatchArtifactIgnoresTheValuesButNeverPassesUnpinnedImages(t *testing.T) {
	f := newFixture(t, soak)
	f.productWith("podinfo-staging", "6.14.1", `"replicaCount":0`)
	f.deployStaging()
	f.order("prod", v1.PromotionAutomatic)
	prod := f.latest("app-prod")
	f.orderReady("app-prod", v1.ReasonAwaitingStage, "staging soaking", "of 30m (Order app-staging runs the same chart and images with other values)")
	clock.Advance(soak + time.Minute)
	f.eventually("prod promoted after the soak", func() error {
		if got := f.serving("app-prod").Spec.PreparationName; got != prod.Name {
			return fmt.Errorf("prod runs %q", got)
		}
		return nil
	})

	// The same chart and images, plus a Rollout whose image is a tag Kokumi did not pin.
	hidden := prod.DeepCopy()
	hidden.Spec.HiddenImages = &v1.HiddenImages{Unpinned: []string{"Rollout/web: spec.template.spec.containers[0].image (ghcr.io/x/web:1.0)"}}
	for _, match := range []v1.StageMatch{v1.MatchArtifact, v1.MatchRelease} {
		f.requireMatch(match)
		verdict, err := pipeline.Check(f.ctx, f.ns, "prod", hidden)
		must(t, err)
		if verdict.Allowed || !strings.Contains(verdict.Message, "Rollout/web: spec.template.spec.containers[0].image (ghcr.io/x/web:1.0)") ||
			!strings.Contains(verdict.Message, "no stage passes it until they are given by digest") {
			t.Errorf("match %s: a Preparation with an unpinned image: %+v", match, verdict)
		}
	}
}
