package promotion

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/record"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

var release = Release{Artifact: "sha256:release", Configuration: "sha256:values"}

func verified(order, env string) record.Record {
	return record.Record{Digest: "sha256:rec-" + order, Verified: true, KeyID: "k1",
		Predicate: record.Predicate{Order: order, Namespace: "team", Environment: env, Clusters: []string{"edge-1"}}}
}

func deployedRun(env string, since time.Time, recs ...record.Record) Run {
	return Run{Order: "app-" + env, Environment: env, Preparation: "app-" + env + "-1", Release: release,
		Deployed: true, State: "Deployed", Since: since, Records: recs}
}

func TestEvaluate(t *testing.T) {
	staging := []Stage{{Environment: "staging", Soak: 30 * time.Minute}}
	stagingRelease := []Stage{{Environment: "staging", Soak: 30 * time.Minute, Match: v1.MatchRelease}}
	otherValues := func(configuration string) Run {
		r := deployedRun("staging", t0.Add(-time.Hour), verified("app-staging", "staging"))
		r.Release.Configuration = configuration
		return r
	}
	cases := []struct {
		name         string
		in           Input
		allowed      bool
		message      string
		recheckAfter time.Duration
	}{
		{name: "an Environment without stages promotes at once", in: Input{}, allowed: true},
		{name: "a stage that never deployed the release holds it",
			in: Input{Requires: staging}, message: "staging has not deployed this release"},
		{name: "a stage running another release holds it",
			in:      Input{Requires: staging, Runs: []Run{{Order: "app-staging", Environment: "staging", Release: Release{Artifact: "sha256:other"}, Deployed: true}}},
			message: "staging has not deployed this release (it runs another one)"},
		{name: "a stage still rolling the release out holds it",
			in:      Input{Requires: staging, Runs: []Run{{Order: "app-staging", Environment: "staging", Release: release, State: "Progressing"}}},
			message: "staging has not deployed this release yet (Order app-staging: Progressing)"},
		{name: "a stage soaking says how far and when it ends",
			in:           Input{Requires: staging, Runs: []Run{deployedRun("staging", t0.Add(-12*time.Minute), verified("app-staging", "staging"))}},
			message:      "staging soaking 12m of 30m (same chart and images)",
			recheckAfter: 18 * time.Minute},
		{name: "a stage that soaked long enough passes",
			in:      Input{Requires: staging, Runs: []Run{deployedRun("staging", t0.Add(-31*time.Minute), verified("app-staging", "staging"))}},
			allowed: true},
		{name: "a stage without a soak passes once deployed with a record",
			in:      Input{Requires: []Stage{{Environment: "staging"}}, Runs: []Run{deployedRun("staging", t0, verified("app-staging", "staging"))}},
			allowed: true},
		{name: "a deployed stage without any record waits for it",
			in:      Input{Requires: staging, Runs: []Run{deployedRun("staging", t0.Add(-time.Hour))}},
			message: "staging runs this release; its deployment record is not written yet"},
		{name: "a record whose signature fails is ignored and named",
			in: Input{Requires: staging, Runs: []Run{deployedRun("staging", t0.Add(-time.Hour),
				record.Record{Digest: "sha256:bad", Problem: "signature does not match any listed key"})}},
			message: "staging runs this release but its deployment record does not verify (signature does not match any listed key), so Kokumi ignores it"},
		{name: "a record made for an Order of another namespace does not count",
			in: Input{Requires: staging, Runs: []Run{deployedRun("staging", t0.Add(-time.Hour),
				record.Record{Digest: "sha256:abc", Verified: true, Predicate: record.Predicate{Order: "app-staging", Namespace: "stranger", Environment: "staging"}})}},
			message: "was made for Order stranger/app-staging in Environment staging"},
		{name: "a verified record after a bad one still counts",
			in: Input{Requires: staging, Runs: []Run{deployedRun("staging", t0.Add(-time.Hour),
				verified("app-staging", "staging"), record.Record{Digest: "sha256:bad", Problem: "altered"})}},
			allowed: true},
		{name: "records that cannot be read hold the stage and say why",
			in: Input{Requires: staging, Runs: []Run{func() Run {
				r := deployedRun("staging", t0.Add(-time.Hour))
				r.RecordsError = "reading them from registry/x failed: connection refused"
				return r
			}()}},
			message: "connection refused"},
		{name: "a required Environment that does not exist holds it",
			in:      Input{Requires: staging, Missing: []string{"staging"}},
			message: "required Environment staging does not exist in namespace team"},
		{name: "a cycle holds it and says so",
			in:      Input{Requires: staging, Cycle: []string{"prod", "staging", "prod"}},
			message: "cycle (prod → staging → prod)"},
		{name: "every stage must pass; the earliest soak end is when to look again",
			in: Input{Requires: []Stage{{Environment: "staging", Soak: time.Hour}, {Environment: "qa", Soak: 10 * time.Minute}},
				Runs: []Run{deployedRun("staging", t0.Add(-20*time.Minute), verified("app-staging", "staging")),
					deployedRun("qa", t0.Add(-5*time.Minute), verified("app-qa", "qa"))}},
			message:      "staging soaking 20m of 1h (same chart and images); qa soaking 5m of 10m (same chart and images)",
			recheckAfter: 5 * time.Minute},
		{name: "of two Orders in the stage the one furthest along decides",
			in: Input{Requires: staging, Runs: []Run{
				{Order: "a", Environment: "staging", Release: release, State: "DeploymentFailed"},
				func() Run {
					r := deployedRun("staging", t0.Add(-40*time.Minute), verified("b", "staging"))
					r.Order = "b"
					return r
				}()}},
			allowed: true},
		{name: "match: Release passes the same chart, images and values, and says so",
			in:           Input{Requires: stagingRelease, Runs: []Run{deployedRun("staging", t0.Add(-10*time.Minute), verified("app-staging", "staging"))}},
			message:      "staging soaking 10m of 30m (same chart, images and values)",
			recheckAfter: 20 * time.Minute},
		{name: "match: Release holds the same chart and images with other values, and says why",
			in:      Input{Requires: stagingRelease, Runs: []Run{otherValues("sha256:zero-replicas")}},
			message: "staging runs the same chart and images with other values (match: Release)"},
		{name: "match: Release never matches values that were not recorded",
			in:      Input{Requires: stagingRelease, Runs: []Run{otherValues("")}},
			message: "staging runs the same chart and images, but its Preparation app-staging-1 was rendered before Kokumi recorded values, so they cannot be compared (match: Release)"},
		{name: "match: Artifact passes other values, as before",
			in:      Input{Requires: staging, Runs: []Run{otherValues("sha256:zero-replicas")}},
			allowed: true},
		{name: "a revoked release holds the stage, naming the revocation, its record and what failed",
			in: Input{Requires: []Stage{{Environment: "staging"}}, Runs: []Run{func() Run {
				r := deployedRun("staging", t0.Add(-time.Hour), verified("app-staging", "staging"))
				r.Revocations = []Revoked{{Digest: "sha256:rev-1", Record: "sha256:rec-app-staging", Verification: "error-rate", Message: "the answer: 200 OK", Time: t0.Add(-10 * time.Minute)}}
				return r
			}()}},
			message: "staging revoked this release (Order app-staging): its guard's verification error-rate failed at 2026-12-03T11:50:00Z after it was Deployed (revocation sha256:rev-1 of record sha256:rec-app-staging); the answer: 200 OK: promote another release"},
		{name: "a revoked release that halted says it was revoked, not that it is not deployed",
			in: Input{Requires: staging, Runs: []Run{{Order: "app-staging", Environment: "staging", Release: release, State: "RolloutHalted",
				Revocations: []Revoked{{Digest: "sha256:rev-1", Verification: "error-rate", Time: t0}}}}},
			message: "staging revoked this release (Order app-staging)"},
		{name: "match: Release names itself when the stage runs another release",
			in:      Input{Requires: stagingRelease, Runs: []Run{{Order: "app-staging", Environment: "staging", Release: Release{Artifact: "sha256:other"}, Deployed: true}}},
			message: "staging has not deployed this release (it runs another one; match: Release)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.Namespace, c.in.Release, c.in.Now = "team", release, t0
			v := Evaluate(c.in)
			if v.Allowed != c.allowed {
				t.Fatalf("allowed = %v (%q), want %v", v.Allowed, v.Message, c.allowed)
			}
			if !strings.Contains(v.Message, c.message) {
				t.Errorf("message %q does not say %q", v.Message, c.message)
			}
			if v.RecheckAfter != c.recheckAfter {
				t.Errorf("recheck after %v, want %v", v.RecheckAfter, c.recheckAfter)
			}
		})
	}
}

func TestReleaseIgnoresOrderOfImagesAndWhereTheyLive(t *testing.T) {
	rel := func(source string, images ...string) Release {
		return NewRelease(Contents{SourceDigest: source, Images: images})
	}
	a := rel("sha256:chart", "ghcr.io/a@sha256:1", "docker.io/b@sha256:2")
	b := rel("sha256:chart", "registry.local/b@sha256:2", "registry.local/a@sha256:1", "x/a@sha256:1")
	if !a.Same(b, v1.MatchArtifact) {
		t.Errorf("the same digests make two releases: %s, %s", a.Artifact, b.Artifact)
	}
	if a.Same(rel("sha256:chart", "ghcr.io/a@sha256:1", "docker.io/b@sha256:3"), v1.MatchArtifact) {
		t.Error("another image digest makes the same release")
	}
	if a.Same(rel("sha256:other", "ghcr.io/a@sha256:1", "docker.io/b@sha256:2"), v1.MatchArtifact) {
		t.Error("another source digest makes the same release")
	}
	// Images given by digest where Kokumi does not pin (a Rollout's) count as any other.
	hidden := NewRelease(Contents{SourceDigest: "sha256:chart", Images: []string{"ghcr.io/a@sha256:1"}, HiddenDigests: []string{"sha256:2"}})
	if !hidden.Same(a, v1.MatchArtifact) {
		t.Error("a hidden image by digest does not count into the release")
	}
	if hidden.Same(rel("sha256:chart", "ghcr.io/a@sha256:1"), v1.MatchArtifact) {
		t.Error("a release without the hidden image is the same")
	}
}

func TestMatchReleaseComparesTheConfigurationToo(t *testing.T) {
	withValues := func(configuration string) Release {
		return NewRelease(Contents{SourceDigest: "sha256:chart", Images: []string{"a@sha256:1"}, Configuration: configuration})
	}
	replicas3, again, zero := withValues("sha256:three"), withValues("sha256:three"), withValues("sha256:zero")
	if !replicas3.Same(again, v1.MatchRelease) || !replicas3.Same(zero, v1.MatchArtifact) {
		t.Error("the same chart, images and values are not the same release")
	}
	if replicas3.Same(zero, v1.MatchRelease) {
		t.Error("other values are the same release under match: Release")
	}
	if withValues("").Same(withValues(""), v1.MatchRelease) {
		t.Error("values that were not recorded match under match: Release")
	}
}

func TestAReleaseWithUnpinnedImagesPassesNoStage(t *testing.T) {
	unpinned := release
	unpinned.Unpinned = []string{"Rollout/web: spec.template.spec.containers[0].image (ghcr.io/x/web:1.0)"}
	unpinned.UnpinnedOmitted = 2
	for _, match := range []v1.StageMatch{v1.MatchArtifact, v1.MatchRelease} {
		run := deployedRun("staging", t0.Add(-time.Hour), verified("app-staging", "staging"))
		run.Release = unpinned // the stage ran it for an hour: still no
		v := Evaluate(Input{Namespace: "team", Release: unpinned, Now: t0, Runs: []Run{run},
			Requires: []Stage{{Environment: "staging", Soak: 30 * time.Minute, Match: match}}})
		want := "it has images Kokumi cannot pin, outside the pod specs it reads (Rollout/web: spec.template.spec.containers[0].image (ghcr.io/x/web:1.0), and 2 more): no stage passes it until they are given by digest"
		if v.Allowed || !strings.Contains(v.Message, want) || len(v.Stages) != 1 || v.Stages[0].State != Waiting {
			t.Errorf("match %s: %+v", match, v)
		}
	}
	if v := Evaluate(Input{Release: unpinned}); !v.Allowed {
		t.Error("an Environment without stages holds a release with unpinned images")
	}
}

func TestFindCycle(t *testing.T) {
	cases := []struct {
		requires map[string][]string
		start    string
		want     []string
	}{
		{map[string][]string{"prod": {"staging"}, "staging": {"dev"}}, "prod", nil},
		{map[string][]string{"prod": {"staging"}, "staging": {"prod"}}, "prod", []string{"prod", "staging", "prod"}},
		{map[string][]string{"prod": {"staging"}, "staging": {"qa"}, "qa": {"staging"}}, "prod", []string{"staging", "qa", "staging"}},
		{map[string][]string{"prod": {"a", "b"}, "a": {"c"}, "b": {"c"}}, "prod", nil},
	}
	for _, c := range cases {
		if got := FindCycle(c.requires, c.start); !reflect.DeepEqual(got, c.want) {
			t.Errorf("FindCycle(%v, %s) = %v, want %v", c.requires, c.start, got, c.want)
		}
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		5 * time.Second: "5s", 12 * time.Minute: "12m", 12*time.Minute + 30*time.Second: "12m",
		2*time.Minute + 5*time.Second: "2m5s", 90 * time.Minute: "1h30m", 2 * time.Hour: "2h",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

// BenchmarkEvaluate decides a stage whose Environment runs the release with 100 records,
// each naming 1,000 clusters, already verified.
func BenchmarkEvaluate(b *testing.B) {
	clusters := make([]string, 1000)
	for i := range clusters {
		clusters[i] = fmt.Sprintf("edge-%04d", i)
	}
	recs := make([]record.Record, 100)
	for i := range recs {
		recs[i] = verified("app-staging", "staging")
		recs[i].Predicate.Clusters = clusters
	}
	in := Input{Namespace: "team", Release: release, Now: t0,
		Requires: []Stage{{Environment: "staging", Soak: 30 * time.Minute}},
		Runs:     []Run{deployedRun("staging", t0.Add(-time.Hour), recs...)}}
	b.ResetTimer()
	for b.Loop() {
		if !Evaluate(in).Allowed {
			b.Fatal("not allowed")
		}
	}
}

// A stage passed (or soaking) under match: Artifact by an Order that runs the artifact with
// other values says which Order, and that the values differ; with the same values, or values
// not recorded, it says what it always says.
func TestAStagePassedWithOtherValuesSaysSo(t *testing.T) {
	for _, c := range []struct {
		name, configuration string
		since               time.Duration
		want                string
	}{
		{"passed with other values", "sha256:other-values", time.Hour, "staging passed (Order app-staging runs the same chart and images with other values, soaked 30m)"},
		{"soaking with other values", "sha256:other-values", 12 * time.Minute, "staging soaking 12m of 30m (Order app-staging runs the same chart and images with other values)"},
		{"passed with the same values", release.Configuration, time.Hour, "staging passed (same chart and images, soaked 30m)"},
		{"passed, values not recorded", "", time.Hour, "staging passed (same chart and images, soaked 30m)"},
	} {
		run := deployedRun("staging", t0.Add(-c.since), verified("app-staging", "staging"))
		run.Release.Configuration = c.configuration
		v := Evaluate(Input{Namespace: "team", Release: release, Now: t0, Runs: []Run{run},
			Requires: []Stage{{Environment: "staging", Soak: 30 * time.Minute}}})
		if len(v.Stages) != 1 || v.Stages[0].Message != c.want {
			t.Errorf("%s: %+v, want the message %q", c.name, v.Stages, c.want)
		}
	}
}
