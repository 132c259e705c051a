// Package promotion decides whether a release may be promoted to an Environment whose
// spec.requires names stages of other Environments: pure logic on plain values, so that it is
// tested and measured without a server.
//
// A stage passes when an Order of the same namespace runs the same release (as the stage's
// match says: see Release) in the required Environment, its Serving reports it Deployed, a
// deployment record of it verifies, and it has stayed Deployed without a break for at least the
// soak. A Preparation with image references Kokumi could not pin passes no stage.
package promotion

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/record"
)

// Stage is one requirement of an Environment: another Environment, its soak, and what makes
// the same release there.
type Stage struct {
	// Environment is the required Environment, in the same namespace.
	Environment string
	// Soak is how long the release must have been Deployed there without a break.
	Soak time.Duration
	// Match is MatchArtifact or MatchRelease (Graph.Stages reads an absent one as Artifact).
	Match v1.StageMatch
	// Wave, when set, asks only that the release rolled out past this wave of the Environment's
	// roll-out, with a record of it (StageRequirement.Wave).
	Wave string
	// Verified asks for a record that says every verification and approval the Environment
	// asked for passed (StageRequirement.Verified, record.Predicate.Verified).
	Verified bool
}

// Run is what one Order of the namespace runs in a required Environment.
type Run struct {
	// Order is the Order (and its Serving).
	Order string
	// Environment is the Order's Environment.
	Environment string
	// Preparation is the Preparation its Serving deploys.
	Preparation string
	// Release identifies that Preparation's release (see NewRelease).
	Release Release
	// Deployed is true when the Serving reports the Preparation Deployed (Ready=True) at its digest.
	Deployed bool
	// State is the Serving's Ready reason, for messages when it is not Deployed.
	State string
	// Since is when the Serving last became Deployed: the start of the soak.
	Since time.Time
	// PassedWaves are the waves of the Environment's roll-out this release rolled out past
	// (healthy and soaked), while the roll-out goes on or completed.
	PassedWaves []string
	// Records are the records attached to the Preparation's artifact, as read and verified.
	Records []record.Record
	// RecordsError says why the records could not be read, if they could not.
	RecordsError string
	// Revocations revoke the release in the run's Environment: those the Preparation's status
	// lists (only Kokumi writes it) and those verified in the registry.
	Revocations []Revoked
}

// Revoked is a revocation of a run's release in its Environment: the Environment's guard failed
// after it was Deployed.
type Revoked struct {
	// Digest of the signed revocation; Record the digest of the record it revokes.
	Digest, Record string
	// Verification is the guard's verification that failed; Message what it measured.
	Verification, Message string
	// Time it failed.
	Time time.Time
}

// Input is everything Evaluate needs.
type Input struct {
	// Namespace of the Order whose promotion is decided.
	Namespace string
	// Release of the Preparation to promote.
	Release Release
	// Requires are the stages of the Order's Environment.
	Requires []Stage
	// Runs are the Orders of the namespace in the required Environments.
	Runs []Run
	// Missing lists required Environments that do not exist.
	Missing []string
	// Cycle, when not empty, is a cycle of requirements through the Order's Environment.
	Cycle []string
	// Now is the time of the decision.
	Now time.Time
}

// State of one stage.
type State string

// Stage states.
const (
	// Passed: the stage ran the release healthily for its soak.
	Passed State = "Passed"
	// Soaking: the stage runs the release healthily; the soak has not ended.
	Soaking State = "Soaking"
	// Waiting: the stage has not deployed the release, or it has no verified record.
	Waiting State = "Waiting"
)

// StageStatus is how one stage stands, for the Order's message and the UI.
type StageStatus struct {
	// Environment is the required Environment.
	Environment string
	// State is Passed, Soaking or Waiting.
	State State
	// Message says how it stands, such as "staging soaking 12m of 30m (same chart and images)".
	Message string
	// Match is what made the same release there.
	Match v1.StageMatch
	// Order is the Order whose run decided it, if any.
	Order string
	// Soak is the stage's soak; Elapsed is how long the release has been Deployed there.
	Soak, Elapsed time.Duration
	// Record is the digest of the verified record that is the evidence, if any.
	Record string
}

// Verdict is the decision.
type Verdict struct {
	// Allowed is true when every stage passed.
	Allowed bool
	// Message says why not, stage by stage; empty when allowed.
	Message string
	// RecheckAfter is how long until a soak ends and the verdict may change by itself; zero
	// when no soak runs.
	RecheckAfter time.Duration
	// Stages are the stages in the order the Environment lists them.
	Stages []StageStatus
}

// Evaluate decides whether the release may be promoted.
func Evaluate(in Input) Verdict {
	if len(in.Cycle) > 0 {
		msg := "the Environments' spec.requires form a cycle (" + strings.Join(in.Cycle, " → ") + "), so no release can pass them: an admin fixes spec.requires"
		return Verdict{Message: msg}
	}
	if len(in.Requires) > 0 && !in.Release.Pinned() {
		msg := in.Release.PinProblem()
		v := Verdict{Message: msg}
		for _, stage := range in.Requires {
			v.Stages = append(v.Stages, StageStatus{Environment: stage.Environment, State: Waiting, Message: msg, Soak: stage.Soak, Match: stage.Match})
		}
		return v
	}
	v := Verdict{Allowed: true}
	missing := make(map[string]bool, len(in.Missing))
	for _, m := range in.Missing {
		missing[m] = true
	}
	var why []string
	for _, stage := range in.Requires {
		st := evaluateStage(in, stage, missing[stage.Environment])
		v.Stages = append(v.Stages, st)
		if st.State == Passed {
			continue
		}
		v.Allowed = false
		why = append(why, st.Message)
		if st.State == Soaking {
			if left := stage.Soak - st.Elapsed; v.RecheckAfter == 0 || left < v.RecheckAfter {
				v.RecheckAfter = left
			}
		}
	}
	if !v.Allowed {
		v.Message = strings.Join(why, "; ")
	}
	return v
}

// evaluateStage picks the run of the release in the stage that is furthest along.
func evaluateStage(in Input, stage Stage, missing bool) StageStatus {
	st := StageStatus{Environment: stage.Environment, State: Waiting, Soak: stage.Soak, Match: stage.Match}
	if missing {
		st.Message = fmt.Sprintf("required Environment %s does not exist in namespace %s: an admin creates it or fixes spec.requires", stage.Environment, in.Namespace)
		return st
	}
	var best *StageStatus
	others := 0
	var otherValues *Run // a run of the same artifact whose configuration differs, or is unknown
	for i := range in.Runs {
		run := &in.Runs[i]
		if run.Environment != stage.Environment {
			continue
		}
		if !in.Release.Same(run.Release, stage.Match) {
			others++
			if run.Release.Artifact == in.Release.Artifact && otherValues == nil {
				otherValues = run
			}
			continue
		}
		cand := evaluateRun(in, stage, run)
		if best == nil || rank(cand) > rank(*best) {
			best = &cand
		}
	}
	if best != nil {
		return *best
	}
	suffix := ""
	if stage.Match == v1.MatchRelease {
		suffix = " (match: Release)"
	}
	switch {
	case otherValues != nil && (in.Release.Configuration == "" || otherValues.Release.Configuration == ""):
		which := "this Preparation was"
		if in.Release.Configuration != "" {
			which = "its Preparation " + otherValues.Preparation + " was"
		}
		st.Message = fmt.Sprintf("%s runs the same chart and images, but %s rendered before Kokumi recorded values, so they cannot be compared%s", stage.Environment, which, suffix)
	case otherValues != nil:
		st.Message = fmt.Sprintf("%s runs the same chart and images with other values%s", stage.Environment, suffix)
	case others > 0:
		if stage.Match == v1.MatchRelease {
			st.Message = fmt.Sprintf("%s has not deployed this release (it runs another one; match: Release)", stage.Environment)
		} else {
			st.Message = fmt.Sprintf("%s has not deployed this release (it runs another one)", stage.Environment)
		}
	default:
		st.Message = fmt.Sprintf("%s has not deployed this release%s", stage.Environment, suffix)
	}
	return st
}

func rank(s StageStatus) int64 {
	switch s.State {
	case Passed:
		return 1 << 62
	case Soaking:
		return 1<<61 + int64(s.Elapsed)
	}
	if s.Record != "" {
		return 1
	}
	return 0
}

func evaluateRun(in Input, stage Stage, run *Run) StageStatus {
	st := StageStatus{Environment: stage.Environment, State: Waiting, Soak: stage.Soak, Order: run.Order, Match: stage.Match}
	if len(run.Revocations) > 0 {
		st.Message = revokedMessage(stage.Environment, run)
		return st
	}
	wavePassed := stage.Wave != "" && slices.Contains(run.PassedWaves, stage.Wave)
	if !run.Deployed && !wavePassed {
		state := run.State
		if state == "" {
			state = "not deployed yet"
		}
		if stage.Wave != "" {
			st.Message = fmt.Sprintf("%s has not rolled this release out past wave %s yet (Order %s: %s)", stage.Environment, stage.Wave, run.Order, state)
		} else {
			st.Message = fmt.Sprintf("%s has not deployed this release yet (Order %s: %s)", stage.Environment, run.Order, state)
		}
		return st
	}
	wave := ""
	if !run.Deployed {
		wave = stage.Wave // only the wave's record proves it; the Environment's, when Deployed
	}
	rec, problem := Evidence(in.Namespace, run, wave, stage.Verified)
	if rec == nil && run.RecordsError != "" {
		problem = run.RecordsError
	}
	if rec == nil {
		switch {
		case problem == unverifiedProblem:
			st.Message = fmt.Sprintf("%s runs this release; its deployment record does not say verified yet (the verifications and approvals %s asks for have not all passed)", stage.Environment, stage.Environment)
		case problem != "":
			st.Message = fmt.Sprintf("%s runs this release but its deployment record does not verify (%s), so Kokumi ignores it", stage.Environment, problem)
		default:
			st.Message = fmt.Sprintf("%s runs this release; its deployment record is not written yet", stage.Environment)
		}
		return st
	}
	st.Record = rec.Digest
	since := run.Since
	if wave != "" {
		since = rec.Predicate.Time // the wave passed when its record was made
	}
	st.Elapsed = in.Now.Sub(since)
	if st.Elapsed < 0 {
		st.Elapsed = 0
	}
	if st.Elapsed >= stage.Soak {
		st.State = Passed
		st.Message = fmt.Sprintf("%s passed (%s", stage.Environment, compared(stage.Match, in.Release, run))
		if stage.Soak > 0 {
			st.Message += fmt.Sprintf(", soaked %s", Duration(stage.Soak))
		}
		st.Message += ")"
		return st
	}
	st.State = Soaking
	st.Message = fmt.Sprintf("%s soaking %s of %s (%s)", stage.Environment, Duration(st.Elapsed), Duration(stage.Soak), compared(stage.Match, in.Release, run))
	return st
}

// revokedMessage says why a stage refuses a release its Environment revoked: the newest
// revocation, named by its digest, the check that failed and what it measured.
func revokedMessage(environment string, run *Run) string {
	rev := run.Revocations[0]
	for _, r := range run.Revocations[1:] {
		if r.Time.After(rev.Time) {
			rev = r
		}
	}
	what := "revocation " + rev.Digest
	if rev.Digest == "" {
		what = "a revocation"
	}
	if rev.Record != "" {
		what += " of record " + rev.Record
	}
	msg := fmt.Sprintf("%s revoked this release (Order %s): its guard's verification %s failed at %s after it was Deployed (%s); %s: promote another release",
		environment, run.Order, rev.Verification, rev.Time.UTC().Format(time.RFC3339), what, rev.Message)
	return msg
}

// unverifiedProblem is evidence's problem when the run's records verify but none says verified.
const unverifiedProblem = "not verified"

// Evidence returns the newest verified record of the run made by its Order in its
// Environment and namespace, of the wave (the whole Environment when wave is empty), that says
// verified when verified is asked; or the problem of the newest record that did not verify.
func Evidence(namespace string, run *Run, wave string, verified bool) (*record.Record, string) {
	problem := ""
	for i := len(run.Records) - 1; i >= 0; i-- { // attached oldest first
		r := &run.Records[i]
		if !r.Verified {
			if problem == "" {
				problem = r.Problem
			}
			continue
		}
		p := r.Predicate
		if p.Wave != wave {
			continue // a wave's record proves less than the Environment, and another wave's
		}
		if p.Namespace != namespace || p.Environment != run.Environment || p.Order != run.Order {
			if problem == "" {
				problem = fmt.Sprintf("record %s was made for Order %s/%s in Environment %s", shortDigest(r.Digest), p.Namespace, p.Order, p.Environment)
			}
			continue
		}
		if verified && !p.Verified {
			if problem == "" {
				problem = unverifiedProblem
			}
			continue
		}
		return r, ""
	}
	return nil, problem
}

// FindCycle returns a cycle of requirements reachable from start, such as [prod staging prod],
// or nil. requires maps each Environment to the Environments it requires.
func FindCycle(requires map[string][]string, start string) []string {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(string) []string
	visit = func(env string) []string {
		state[env] = onPath
		path = append(path, env)
		for _, next := range requires[env] {
			switch state[next] {
			case onPath:
				for i, e := range path {
					if e == next {
						return append(append([]string(nil), path[i:]...), next)
					}
				}
			case unseen:
				if c := visit(next); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[env] = done
		return nil
	}
	return visit(start)
}

// Duration prints a duration as people write a soak: 45s, 12m, 1h30m, 2h.
func Duration(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%ds", int(d/time.Second))
	}
	h, m, s := int(d/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second)
	out := ""
	if h > 0 {
		out += fmt.Sprintf("%dh", h)
	}
	if m > 0 {
		out += fmt.Sprintf("%dm", m)
	}
	if s > 0 && h == 0 && m < 10 {
		out += fmt.Sprintf("%ds", s)
	}
	return out
}

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}
