// Package dora computes delivery measures (the DORA measures: deployments, lead time, change
// failure rate, time to restore) per Environment and Order from signed evidence: the deployment
// records, roll-out failures and revocations attached to the Preparations' artifacts, and the
// time each render started as its SLSA provenance says. It does no I/O: `kubectl kokumi dora`
// reads and verifies the evidence and hands it here, and the controller asks it the same rules
// when it signs evidence (its Prometheus series).
//
// The rules, in one place:
//
//   - A deployment is the first verified record of the whole Environment (no wave) of a
//     Preparation, for its Order in that Environment. Later records of it (more clusters, the
//     Serving Deployed again) are not new deployments; a record of a wave is none.
//   - Its lead time runs from the start of the render that made the Preparation (the earliest
//     verified provenance's startedOn) to that record.
//   - A failure is a roll-out that halted, rolled back or was aborted (a roll-out failure) or a
//     release revoked after it was Deployed (a revocation). Roll-outs are deployments plus
//     roll-out failures; the change failure rate is failures over roll-outs.
//   - An outage starts at a failure when none is open for the Environment and Order, and ends
//     at the next record of the whole Environment: its time to restore. Failures while one is
//     open count as failures, not as outages of their own.
//   - Evidence that does not verify counts for nothing, and is counted as skipped.
package dora

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kokumi-dev/kokumi/internal/record"
)

// Kind is what a piece of evidence says happened.
type Kind string

// The kinds of evidence.
const (
	// Deployed is a deployment record.
	Deployed Kind = "deployed"
	// Halted, RolledBack and Aborted are roll-out failures of those outcomes.
	Halted     Kind = "halted"
	RolledBack Kind = "rolledback"
	Aborted    Kind = "aborted"
	// Revoked is a revocation.
	Revoked Kind = "revoked"
)

// FailureKinds are the kinds that are failures, in the order reports list them.
var FailureKinds = []Kind{Halted, RolledBack, Aborted, Revoked}

// Failure says whether evidence of kind k is a failure.
func (k Kind) Failure() bool { return slices.Contains(FailureKinds, k) }

// Key names what the measures are of: an Order of a namespace in an Environment.
type Key struct {
	Namespace   string `json:"namespace"`
	Order       string `json:"order"`
	Environment string `json:"environment"`
}

// Event is one verified piece of evidence.
type Event struct {
	Key
	Kind Kind
	// Preparation is the Preparation it is about.
	Preparation string
	// Wave is the wave of a deployment record; empty for the whole Environment.
	Wave string
	// Time is when it happened, as it says.
	Time time.Time
}

// Skipped is one piece of evidence that did not verify.
type Skipped struct {
	// Preparation is the Preparation whose artifact carries it; Digest its envelope's digest.
	Preparation string `json:"preparation"`
	Digest      string `json:"digest"`
	// Problem says why it did not verify.
	Problem string `json:"problem"`
}

// Evidence is what one Preparation's artifact carries, verified.
type Evidence struct {
	// Namespace and Preparation name the Preparation.
	Namespace, Preparation string
	// Events are the verified records, roll-out failures and revocations.
	Events []Event
	// Changed is when the render that made the Preparation started: the earliest verified
	// provenance's startedOn; zero when none says.
	Changed time.Time
	// Skipped is what did not verify.
	Skipped []Skipped
}

// FromAttested keeps what of an artifact's attestations counts: the evidence a trusted key
// verified and that was made for the Preparation's own Order (namespace, order) and for the
// Preparation itself; the rest is skipped, saying why.
func FromAttested(namespace, order, preparation string, a record.Attested) Evidence {
	ev := Evidence{Namespace: namespace, Preparation: preparation}
	skip := func(digest, problem string) {
		ev.Skipped = append(ev.Skipped, Skipped{Preparation: preparation, Digest: digest, Problem: problem})
	}
	mine := func(ns, o, p string) string {
		if ns != namespace || o != order || p != preparation {
			return "made for Order " + ns + "/" + o + " and Preparation " + p + ", not this one"
		}
		return ""
	}
	add := func(verified bool, problem, digest, ns, o, p string, e Event) {
		if !verified {
			skip(digest, problem)
			return
		}
		if why := mine(ns, o, p); why != "" {
			skip(digest, why)
			return
		}
		ev.Events = append(ev.Events, e)
	}
	for _, r := range a.Records {
		p := r.Predicate
		if !r.Verified && strings.HasPrefix(r.Problem, "not a Kokumi record") {
			continue // another tool's attestation (its media or predicate type): no evidence at all
		}
		add(r.Verified, r.Problem, r.Digest, p.Namespace, p.Order, p.Preparation, Event{
			Key: Key{Namespace: p.Namespace, Order: p.Order, Environment: p.Environment}, Kind: Deployed,
			Preparation: p.Preparation, Wave: p.Wave, Time: p.Time.UTC()})
	}
	for _, f := range a.Failures {
		p := f.Predicate
		add(f.Verified, f.Problem, f.Digest, p.Namespace, p.Order, p.Preparation, Event{
			Key: Key{Namespace: p.Namespace, Order: p.Order, Environment: p.Environment}, Kind: OutcomeKind(p.Outcome),
			Preparation: p.Preparation, Time: p.Time.UTC()})
	}
	for _, r := range a.Revocations {
		p := r.Predicate
		add(r.Verified, r.Problem, r.Digest, p.Namespace, p.Order, p.Preparation, Event{
			Key: Key{Namespace: p.Namespace, Order: p.Order, Environment: p.Environment}, Kind: Revoked,
			Preparation: p.Preparation, Time: p.Time.UTC()})
	}
	for _, c := range a.Changes {
		switch {
		case !c.Verified:
			skip(c.Digest, c.Problem)
		case c.StartedOn.IsZero():
		case ev.Changed.IsZero() || c.StartedOn.Before(ev.Changed):
			ev.Changed = c.StartedOn
		}
	}
	return ev
}

// OutcomeKind is the Kind of a roll-out failure's outcome (record.OutcomeHalted, …); an unknown
// outcome is a halt.
func OutcomeKind(outcome string) Kind {
	switch outcome {
	case record.OutcomeRolledBack:
		return RolledBack
	case record.OutcomeAborted:
		return Aborted
	}
	return Halted
}

// IsDeployment says whether e, a verified record, is a deployment given the records of its
// Environment and Order before it (prior, in any order): it is a record of the whole
// Environment, and none of prior is one of the same Preparation.
func IsDeployment(prior []Event, e Event) bool {
	if e.Kind != Deployed || e.Wave != "" {
		return false
	}
	for _, p := range prior {
		if p.Kind == Deployed && p.Wave == "" && p.Key == e.Key && p.Preparation == e.Preparation && !p.Time.After(e.Time) {
			return false
		}
	}
	return true
}

// LeadTime is the lead time of a deployment at deployed of a Preparation whose render started
// at changed; false when changed is unknown (zero) or after deployed.
func LeadTime(changed, deployed time.Time) (time.Duration, bool) {
	if changed.IsZero() || changed.After(deployed) {
		return 0, false
	}
	return deployed.Sub(changed), true
}

// Restores says whether a record of the whole Environment made at at ends an outage that
// started at failed: it is a record of the whole Environment, made after the failure.
func Restores(e Event, failed time.Time) bool {
	return e.Kind == Deployed && e.Wave == "" && e.Time.After(failed)
}

// Summary sums up durations. In JSON the durations are seconds: {"count": 3,
// "medianSeconds": 14400, "meanSeconds": 21600, "maxSeconds": 43200}.
type Summary struct {
	// Count is how many; Median, Mean and Max are zero when there are none.
	Count  int
	Median time.Duration
	Mean   time.Duration
	Max    time.Duration
}

// summaryJSON is a Summary in JSON.
type summaryJSON struct {
	Count  int     `json:"count"`
	Median float64 `json:"medianSeconds"`
	Mean   float64 `json:"meanSeconds"`
	Max    float64 `json:"maxSeconds"`
}

// MarshalJSON writes the durations as seconds.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(summaryJSON{Count: s.Count, Median: s.Median.Seconds(), Mean: s.Mean.Seconds(), Max: s.Max.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Summary) UnmarshalJSON(data []byte) error {
	var j summaryJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("read a summary of durations: %w", err)
	}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	*s = Summary{Count: j.Count, Median: sec(j.Median), Mean: sec(j.Mean), Max: sec(j.Max)}
	return nil
}

// summarize sums durations up; the median of an even count is the mean of the two middle ones.
func summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	n := len(ds)
	median := ds[n/2]
	if n%2 == 0 {
		median = (ds[n/2-1] + ds[n/2]) / 2
	}
	return Summary{Count: n, Median: median, Mean: sum / time.Duration(n), Max: ds[n-1]}
}

// Measures are the delivery measures of one Environment and Order over a window.
type Measures struct {
	Key
	// Deployments counts the deployments in the window; PerDay is their rate over it.
	Deployments int     `json:"deployments"`
	PerDay      float64 `json:"deploymentsPerDay"`
	// Failures counts the failures in the window by kind (halted, rolledback, aborted,
	// revoked); FailureCount is their sum.
	Failures     map[Kind]int `json:"failures"`
	FailureCount int          `json:"failureCount"`
	// Rollouts are the deployments and the roll-out failures (halted, rolled back, aborted).
	Rollouts int `json:"rollouts"`
	// ChangeFailureRate is FailureCount over Rollouts (0 with no roll-out; it may pass 1 when a
	// release deployed before the window is revoked in it).
	ChangeFailureRate float64 `json:"changeFailureRate"`
	// LeadTime sums up the lead times of the deployments whose render start is known.
	LeadTime Summary `json:"leadTime"`
	// TimeToRestore sums up the outages that started in the window and ended in it; Unrestored
	// counts those that started in it and were still open at its end.
	TimeToRestore Summary `json:"timeToRestore"`
	Unrestored    int     `json:"unrestored"`
}

// Report is what Compute returns.
type Report struct {
	// Since and Until bound the window: evidence at or after Since and at or before Until.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Measures are per Environment and Order, sorted by namespace, Order and Environment; only
	// those with something in the window.
	Measures []Measures `json:"measures"`
	// Skipped is what did not verify, and so counts for nothing.
	Skipped []Skipped `json:"skipped"`
}

// Compute computes the measures of the window [since, until] from the evidence of every
// Preparation of the Orders asked (evidence before the window is needed too: it says which
// records are not new deployments and which outages are open).
func Compute(evidence []Evidence, since, until time.Time) Report {
	rep := Report{Since: since.UTC(), Until: until.UTC(), Measures: []Measures{}, Skipped: []Skipped{}}
	changed := map[string]time.Time{} // by namespace/Preparation
	byKey := map[Key][]Event{}
	for _, ev := range evidence {
		rep.Skipped = append(rep.Skipped, ev.Skipped...)
		changed[ev.Namespace+"/"+ev.Preparation] = ev.Changed
		for _, e := range ev.Events {
			byKey[e.Key] = append(byKey[e.Key], e)
		}
	}
	in := func(t time.Time) bool { return !t.Before(since) && !t.After(until) }
	days := until.Sub(since).Hours() / 24
	for key, events := range byKey {
		// By time; at the same second a failure comes after the record it follows.
		sort.SliceStable(events, func(i, j int) bool {
			if !events[i].Time.Equal(events[j].Time) {
				return events[i].Time.Before(events[j].Time)
			}
			return !events[i].Kind.Failure() && events[j].Kind.Failure()
		})
		m := Measures{Key: key, Failures: map[Kind]int{}}
		var leads, restores []time.Duration
		var open time.Time // the start of the open outage; zero: none
		openIn := false
		for i, e := range events {
			if !open.IsZero() && Restores(e, open) {
				switch {
				case openIn && e.Time.After(until):
					m.Unrestored++ // restored after the window: open at its end
				case openIn:
					restores = append(restores, e.Time.Sub(open))
				}
				open, openIn = time.Time{}, false
			}
			switch {
			case e.Kind == Deployed:
				if IsDeployment(events[:i], e) && in(e.Time) {
					m.Deployments++
					if d, ok := LeadTime(changed[key.Namespace+"/"+e.Preparation], e.Time); ok {
						leads = append(leads, d)
					}
				}
			case e.Kind.Failure():
				if in(e.Time) {
					m.Failures[e.Kind]++
				}
				if open.IsZero() {
					open, openIn = e.Time, in(e.Time)
				}
			}
		}
		if openIn {
			m.Unrestored++
		}
		for k, n := range m.Failures {
			m.FailureCount += n
			if k != Revoked {
				m.Rollouts += n
			}
		}
		m.Rollouts += m.Deployments
		if m.Deployments == 0 && m.FailureCount == 0 && len(restores) == 0 && m.Unrestored == 0 {
			continue
		}
		if m.Rollouts > 0 {
			m.ChangeFailureRate = float64(m.FailureCount) / float64(m.Rollouts)
		}
		if days > 0 {
			m.PerDay = float64(m.Deployments) / days
		}
		m.LeadTime, m.TimeToRestore = summarize(leads), summarize(restores)
		rep.Measures = append(rep.Measures, m)
	}
	sort.Slice(rep.Measures, func(i, j int) bool {
		a, b := rep.Measures[i].Key, rep.Measures[j].Key
		return a.Namespace+"\x00"+a.Order+"\x00"+a.Environment < b.Namespace+"\x00"+b.Order+"\x00"+b.Environment
	})
	return rep
}
