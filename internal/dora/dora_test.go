package dora_test

import (
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/dora"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// at is a time of the fixture, in UTC: "2026-01-02T10:00".
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse("2006-01-02T15:04", s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

// prep is one Preparation's artifact in the fixture: what it carries.
type prep struct {
	name    string
	changed string // the provenance's startedOn; "" none
	records []rec
	fails   []rec // outcome in env
	revoked string
	bad     int // records signed by a key nobody trusts
}

type rec struct{ env, wave, time, outcome string }

func attested(t *testing.T, ns, order string, p prep) record.Attested {
	a := record.Attested{}
	for _, r := range p.records {
		a.Records = append(a.Records, record.Record{Verified: true, Digest: "sha256:r", Predicate: record.Predicate{
			Namespace: ns, Order: order, Environment: r.env, Wave: r.wave, Preparation: p.name, Time: at(t, r.time)}})
	}
	for i := 0; i < p.bad; i++ {
		a.Records = append(a.Records, record.Record{Digest: "sha256:bad", Problem: "signature does not match any listed key",
			Predicate: record.Predicate{Namespace: ns, Order: order, Environment: "prod", Preparation: p.name, Time: at(t, "2026-01-15T00:00")}})
	}
	// Another tool's attestation: no evidence, not skipped either.
	a.Records = append(a.Records, record.Record{Digest: "sha256:other", Problem: `not a Kokumi record (predicate type "https://example.com/x")`})
	for _, f := range p.fails {
		a.Failures = append(a.Failures, record.Failure{Verified: true, Digest: "sha256:f", Predicate: record.FailurePredicate{
			Namespace: ns, Order: order, Environment: f.env, Preparation: p.name, Outcome: f.outcome, Time: at(t, f.time)}})
	}
	if p.revoked != "" {
		a.Revocations = append(a.Revocations, record.Revocation{Verified: true, Digest: "sha256:v", Predicate: record.RevocationPredicate{
			Namespace: ns, Order: order, Environment: "prod", Preparation: p.name, Time: at(t, p.revoked)}})
	}
	if p.changed != "" {
		a.Changes = append(a.Changes, record.Change{Verified: true, Digest: "sha256:p", StartedOn: at(t, p.changed)})
	}
	return a
}

// The fixture history of Order shop/web, in prod (and staging), over the window January 1–31,
// 2026 (30 days). Hand computation:
//
//	web-1  render 12-30 10:00; prod record 12-30 12:00 (before the window: no deployment in it,
//	       but it makes its later records no new deployment); staging record 01-01 00:00, at the
//	       window's start (counted: lead 01-01 00:00 − 12-30 10:00 = 38h); prod record again
//	       01-09 00:00 (re-promoted: not a deployment; no outage open then).
//	web-2  render 01-02 08:00; canary wave record 01-02 09:00 (a wave: none); prod record
//	       01-02 10:00 — deployment 1, lead 2h; prod record 01-02 11:00 (more clusters: none).
//	web-3  render 01-05; halted 01-05 06:00 — failure 1 (halted), outage A opens.
//	web-4  render 01-06 00:00; prod record 01-06 12:00 — deployment 2, lead 12h; ends outage A:
//	       30h. Revoked 01-06 13:00 — failure 2 (revoked), outage B opens.
//	web-5  aborted 01-07 01:00 — failure 3 (aborted), outage B is open: no outage of its own.
//	web-6  render 01-08 00:00; prod record 01-08 04:00 — deployment 3, lead 4h; ends outage B:
//	       01-08 04:00 − 01-06 13:00 = 39h. One record signed by an untrusted key: skipped.
//	web-7  rolled back 01-10 02:00 — failure 4 (rolledback), outage C opens.
//	web-8  no provenance; prod record 01-12 00:00 — deployment 4, no lead time; ends outage C:
//	       46h.
//	web-9  halted 01-20 00:00 — failure 5 (halted), outage D opens and stays open: unrestored 1.
//
// prod: deployments 4 (4/30 a day); lead times 2h, 4h, 12h: median 4h, mean 6h, max 12h;
// failures halted 2, revoked 1, aborted 1, rolledback 1 = 5; roll-outs 4 + (2+1+1) = 8; change
// failure rate 5/8 = 0.625; restores 30h, 39h, 46h: median 39h, mean 115h/3 = 38h20m, max 46h;
// unrestored 1. staging: deployments 1, lead 38h, roll-outs 1, rate 0. Skipped: 1.
func TestComputeGivesTheHandComputedMeasures(t *testing.T) {
	preps := []prep{
		{name: "web-1", changed: "2025-12-30T10:00", records: []rec{{env: "prod", time: "2025-12-30T12:00"}, {env: "staging", time: "2026-01-01T00:00"}, {env: "prod", time: "2026-01-09T00:00"}}},
		{name: "web-2", changed: "2026-01-02T08:00", records: []rec{{env: "prod", wave: "canary", time: "2026-01-02T09:00"}, {env: "prod", time: "2026-01-02T10:00"}, {env: "prod", time: "2026-01-02T11:00"}}},
		{name: "web-3", changed: "2026-01-05T00:00", fails: []rec{{env: "prod", time: "2026-01-05T06:00", outcome: record.OutcomeHalted}}},
		{name: "web-4", changed: "2026-01-06T00:00", records: []rec{{env: "prod", time: "2026-01-06T12:00"}}, revoked: "2026-01-06T13:00"},
		{name: "web-5", changed: "2026-01-07T00:00", fails: []rec{{env: "prod", time: "2026-01-07T01:00", outcome: record.OutcomeAborted}}},
		{name: "web-6", changed: "2026-01-08T00:00", records: []rec{{env: "prod", time: "2026-01-08T04:00"}}, bad: 1},
		{name: "web-7", changed: "2026-01-10T00:00", fails: []rec{{env: "prod", time: "2026-01-10T02:00", outcome: record.OutcomeRolledBack}}},
		{name: "web-8", records: []rec{{env: "prod", time: "2026-01-12T00:00"}}},
		{name: "web-9", changed: "2026-01-19T00:00", fails: []rec{{env: "prod", time: "2026-01-20T00:00", outcome: record.OutcomeHalted}}},
	}
	var evidence []dora.Evidence
	for _, p := range preps {
		evidence = append(evidence, dora.FromAttested("shop", "web", p.name, attested(t, "shop", "web", p)))
	}
	rep := dora.Compute(evidence, at(t, "2026-01-01T00:00"), at(t, "2026-01-31T00:00"))
	if len(rep.Skipped) != 1 || rep.Skipped[0].Preparation != "web-6" || rep.Skipped[0].Problem != "signature does not match any listed key" {
		t.Fatalf("skipped = %+v, want the one bad record of web-6", rep.Skipped)
	}
	if len(rep.Measures) != 2 {
		t.Fatalf("measures = %+v, want prod and staging", rep.Measures)
	}
	prod, staging := rep.Measures[0], rep.Measures[1]
	if prod.Environment != "prod" || staging.Environment != "staging" {
		t.Fatalf("measures in the order %s, %s; want prod, staging", prod.Environment, staging.Environment)
	}
	h := time.Hour
	checks := []struct {
		what      string
		got, want any
	}{
		{"prod deployments", prod.Deployments, 4},
		{"prod per day", prod.PerDay, 4.0 / 30},
		{"prod lead time", prod.LeadTime, dora.Summary{Count: 3, Median: 4 * h, Mean: 6 * h, Max: 12 * h}},
		{"prod halted", prod.Failures[dora.Halted], 2},
		{"prod revoked", prod.Failures[dora.Revoked], 1},
		{"prod aborted", prod.Failures[dora.Aborted], 1},
		{"prod rolled back", prod.Failures[dora.RolledBack], 1},
		{"prod failures", prod.FailureCount, 5},
		{"prod roll-outs", prod.Rollouts, 8},
		{"prod change failure rate", prod.ChangeFailureRate, 0.625},
		{"prod time to restore", prod.TimeToRestore, dora.Summary{Count: 3, Median: 39 * h, Mean: 38*h + 20*time.Minute, Max: 46 * h}},
		{"prod unrestored", prod.Unrestored, 1},
		{"staging deployments", staging.Deployments, 1},
		{"staging lead time", staging.LeadTime, dora.Summary{Count: 1, Median: 38 * h, Mean: 38 * h, Max: 38 * h}},
		{"staging roll-outs", staging.Rollouts, 1},
		{"staging change failure rate", staging.ChangeFailureRate, 0.0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// A narrower window counts only what happened in it, but reads what came before: January 6 to
// 8 holds web-4's deployment (lead 12h), its revocation and web-5's abort (2 failures; 2
// roll-outs: 1 deployment + 1 aborted, a revocation is no roll-out; rate 2/2 = 1); outage A
// started before the window, so its end is no restore of the window; outage B (from the
// revocation, 01-06 13:00) ends 01-08 04:00, after the window: open at its end, unrestored 1, no
// restore. web-6's record (01-08 04:00) is after the window: no deployment of it.
func TestComputeCountsTheWindowAlone(t *testing.T) {
	preps := []prep{
		{name: "web-3", changed: "2026-01-05T00:00", fails: []rec{{env: "prod", time: "2026-01-05T06:00", outcome: record.OutcomeHalted}}},
		{name: "web-4", changed: "2026-01-06T00:00", records: []rec{{env: "prod", time: "2026-01-06T12:00"}}, revoked: "2026-01-06T13:00"},
		{name: "web-5", changed: "2026-01-07T00:00", fails: []rec{{env: "prod", time: "2026-01-07T01:00", outcome: record.OutcomeAborted}}},
		{name: "web-6", changed: "2026-01-08T00:00", records: []rec{{env: "prod", time: "2026-01-08T04:00"}}},
	}
	var evidence []dora.Evidence
	for _, p := range preps {
		evidence = append(evidence, dora.FromAttested("shop", "web", p.name, attested(t, "shop", "web", p)))
	}
	rep := dora.Compute(evidence, at(t, "2026-01-06T00:00"), at(t, "2026-01-08T00:00"))
	if len(rep.Measures) != 1 {
		t.Fatalf("measures = %+v", rep.Measures)
	}
	m := rep.Measures[0]
	if m.Deployments != 1 || m.LeadTime.Median != 12*time.Hour || m.FailureCount != 2 || m.Rollouts != 2 ||
		m.ChangeFailureRate != 1 || m.TimeToRestore.Count != 0 || m.Unrestored != 1 {
		t.Errorf("measures = %+v; want 1 deployment (lead 12h), 2 failures, 2 roll-outs, rate 1, no restore, 1 unrestored", m)
	}
}

// Evidence made for another Order, or for another Preparation, is skipped, saying so; a
// provenance that does not verify gives no lead time and is skipped.
func TestFromAttestedSkipsWhatIsNotThePreparations(t *testing.T) {
	a := record.Attested{
		Records: []record.Record{{Verified: true, Digest: "sha256:a", Predicate: record.Predicate{Namespace: "shop", Order: "api", Environment: "prod", Preparation: "web-1"}}},
		Failures: []record.Failure{{Verified: true, Digest: "sha256:b", Predicate: record.FailurePredicate{Namespace: "shop", Order: "web", Environment: "prod",
			Preparation: "web-2", Outcome: record.OutcomeHalted}}},
		Changes: []record.Change{{Digest: "sha256:c", Problem: "signature does not match any listed key", StartedOn: time.Unix(1, 0)}},
	}
	ev := dora.FromAttested("shop", "web", "web-1", a)
	if len(ev.Events) != 0 || len(ev.Skipped) != 3 || !ev.Changed.IsZero() {
		t.Fatalf("evidence = %+v; want nothing counted and 3 skipped", ev)
	}
	if ev.Skipped[0].Problem != "made for Order shop/api and Preparation web-1, not this one" {
		t.Errorf("problem = %q", ev.Skipped[0].Problem)
	}
}
