package promotion

import (
	"time"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// Graph is the one reading of a namespace's promotion pipelines (Environment.spec.requires):
// which Environments exist, what each requires, which required ones are missing, the cycles,
// and who comes after whom. The stage gate, the Environment's status and the watches that bring
// back the Orders downstream of a change all read it.
type Graph struct {
	requires map[string][]v1.StageRequirement
}

// NewGraph reads the requirements of one namespace's Environments.
func NewGraph(envs []v1.Environment) Graph {
	g := Graph{requires: make(map[string][]v1.StageRequirement, len(envs))}
	for i := range envs {
		g.requires[envs[i].Name] = envs[i].Spec.Requires
	}
	return g
}

// Exists reports whether the namespace has an Environment of that name.
func (g Graph) Exists(environment string) bool {
	_, ok := g.requires[environment]
	return ok
}

// Stages are the stages environment requires, in the order its spec lists them.
func (g Graph) Stages(environment string) []Stage {
	reqs := g.requires[environment]
	out := make([]Stage, 0, len(reqs))
	for _, r := range reqs {
		st := Stage{Environment: r.Environment, Match: r.Match, Wave: r.Wave, Verified: r.Verified}
		if st.Match == "" {
			st.Match = v1.MatchArtifact
		}
		if r.Soak != nil {
			st.Soak = r.Soak.Duration
		}
		out = append(out, st)
	}
	return out
}

// Missing lists the Environments environment requires that do not exist.
func (g Graph) Missing(environment string) []string {
	var out []string
	for _, r := range g.requires[environment] {
		if !g.Exists(r.Environment) {
			out = append(out, r.Environment)
		}
	}
	return out
}

// Cycle returns a cycle of requirements reachable from environment, such as
// [prod staging prod], or nil.
func (g Graph) Cycle(environment string) []string {
	names := make(map[string][]string, len(g.requires))
	for env, reqs := range g.requires {
		for _, r := range reqs {
			names[env] = append(names[env], r.Environment)
		}
	}
	return FindCycle(names, environment)
}

// Downstream lists the Environments that require environment directly: a change of what runs
// there may let them promote.
func (g Graph) Downstream(environment string) map[string]bool {
	out := map[string]bool{}
	for env, reqs := range g.requires {
		for _, r := range reqs {
			if r.Environment == environment {
				out[env] = true
			}
		}
	}
	return out
}

// Input begins the gate's input for release going to environment at now: its stages, the
// missing ones and any cycle. The caller adds the runs of the stages (Input.Runs).
func (g Graph) Input(namespace, environment string, release Release, now time.Time) Input {
	return Input{Namespace: namespace, Release: release, Now: now, Requires: g.Stages(environment),
		Missing: g.Missing(environment), Cycle: g.Cycle(environment)}
}
