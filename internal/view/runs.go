package view

import (
	"strconv"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// What runs: the clusters of a Serving run the Preparations whose artifacts its
// status.running counts (what Argo CD last synced on each), which is not always the promoted one
// (spec.preparationName): a promotion may wait for an approval, roll out in waves, be paused,
// halted or aborted. The server, the UI (through the API) and the kubectl plugin all read it
// here, so that "runs" means one thing everywhere.

// States of the promoted Preparation, as Runs.PromotedState says them.
const (
	// PromotedDeployed: every cluster runs it healthily.
	PromotedDeployed = "deployed"
	// PromotedRollingOut: it is on its way to the clusters.
	PromotedRollingOut = "rolling out"
	// PromotedAwaitingApproval: a gate of its roll-out waits for approvals.
	PromotedAwaitingApproval = "awaiting approval"
	// PromotedPaused: someone paused its roll-out.
	PromotedPaused = "paused"
	// PromotedAborted: someone aborted its roll-out; the clusters it had not reached keep what
	// they ran.
	PromotedAborted = "aborted"
	// PromotedHalted: its roll-out stopped on a failure.
	PromotedHalted = "halted"
	// PromotedRolledBack: its roll-out failed and the changed clusters went back.
	PromotedRolledBack = "rolled back"
)

// Runs is what a Serving's clusters run, and how the promoted Preparation stands.
type Runs struct {
	// Clusters counts, by Preparation name, the clusters that run it.
	Clusters map[string]int32
	// Current is the Preparation most clusters run: what a diff or a rollback compares with;
	// empty when no cluster runs one of the Preparations given.
	Current string
	// Promoted is the Preparation the Serving is pointed at (spec.preparationName).
	Promoted string
	// PromotedState is how it stands (one of the Promoted* states); empty when none is promoted.
	PromotedState string
}

// RunsOf says what the clusters of sv run, among preps (the Preparations of its Order), from
// sv's status.running, and how its promoted Preparation stands.
func RunsOf(sv *v1.Serving, preps []v1.Preparation) Runs {
	r := Runs{Clusters: map[string]int32{}, Promoted: sv.Spec.PreparationName}
	byDigest := map[string]string{}
	for i := range preps {
		if d := preps[i].Spec.Artifact.Digest; d != "" {
			byDigest[d] = preps[i].Name
		}
	}
	var most int32
	for _, rc := range sv.Status.Running { // most-run first
		name, ok := byDigest[rc.Revision]
		if !ok || rc.Clusters <= 0 {
			continue
		}
		r.Clusters[name] += rc.Clusters
		if r.Clusters[name] > most {
			most, r.Current = r.Clusters[name], name
		}
	}
	r.PromotedState = promotedState(sv, preps, r.Clusters)
	return r
}

// promotedState says how the promoted Preparation of sv stands; clusters counts what runs.
func promotedState(sv *v1.Serving, preps []v1.Preparation, clusters map[string]int32) string {
	promoted := sv.Spec.PreparationName
	if promoted == "" {
		return ""
	}
	if ro := sv.Status.Rollout; ro != nil && ro.Preparation == promoted {
		switch {
		case ro.State == v1.RolloutAborted:
			return PromotedAborted
		case ro.State == v1.RolloutHalted:
			return PromotedHalted
		case ro.State == v1.RolloutRolledBack:
			return PromotedRolledBack
		case ro.State == v1.RolloutPaused:
			return PromotedPaused
		case ro.Awaiting != "":
			return PromotedAwaitingApproval
		}
	}
	digest := ""
	for i := range preps {
		if preps[i].Name == promoted {
			digest = preps[i].Spec.Artifact.Digest
		}
	}
	// Deployed healthily everywhere, or (not healthy everywhere) every cluster runs it: no
	// cluster waits to take it.
	if digest != "" && sv.Status.DeployedRevision == digest || clusters[promoted] > 0 && len(clusters) == 1 && sv.Status.RunningOmitted == 0 {
		return PromotedDeployed
	}
	return PromotedRollingOut
}

// Label says how a Preparation stands in what runs, for a person: "runs on 2 clusters",
// "promoted, awaiting approval", or both; empty for one neither run nor promoted.
func (r Runs) Label(name string) string {
	label := ""
	if n := r.Clusters[name]; n > 0 {
		label = "runs on " + clusters(n)
	}
	if name == r.Promoted && r.PromotedState != PromotedDeployed {
		if label != "" {
			label += "; "
		}
		label += "promoted, " + r.PromotedState
	}
	return label
}

func clusters(n int32) string {
	if n == 1 {
		return "1 cluster"
	}
	return strconv.Itoa(int(n)) + " clusters"
}
