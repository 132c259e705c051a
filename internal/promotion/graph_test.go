package promotion

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

func env(name string, requires ...string) v1.Environment {
	e := v1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, r := range requires {
		e.Spec.Requires = append(e.Spec.Requires, v1.StageRequirement{Environment: r, Soak: &metav1.Duration{Duration: time.Minute}})
	}
	return e
}

func TestTheGraphReadsStagesMissingCyclesAndWhatComesAfter(t *testing.T) {
	g := NewGraph([]v1.Environment{env("dev"), env("staging", "dev"), env("prod", "staging", "qa"), env("a", "b"), env("b", "a")})
	if st := g.Stages("prod"); len(st) != 2 || st[0].Environment != "staging" || st[0].Soak != time.Minute {
		t.Errorf("stages of prod: %+v", st)
	}
	if m := g.Missing("prod"); !slices.Equal(m, []string{"qa"}) {
		t.Errorf("missing of prod: %v", m)
	}
	if c := g.Cycle("prod"); c != nil {
		t.Errorf("prod has no cycle, got %v", c)
	}
	if c := g.Cycle("a"); !slices.Equal(c, []string{"a", "b", "a"}) {
		t.Errorf("cycle of a: %v", c)
	}
	if d := g.Downstream("staging"); len(d) != 1 || !d["prod"] {
		t.Errorf("downstream of staging: %v", d)
	}
	in := g.Input("team", "prod", Release{Artifact: "r1"}, time.Unix(0, 0))
	if len(in.Requires) != 2 || !slices.Equal(in.Missing, []string{"qa"}) || in.Cycle != nil || in.Release.Artifact != "r1" {
		t.Errorf("input: %+v", in)
	}
	if st := g.Stages("prod"); st[0].Match != v1.MatchArtifact {
		t.Errorf("a requirement without match compares %q, want Artifact", st[0].Match)
	}
	release := env("prod", "staging")
	release.Spec.Requires[0].Match = v1.MatchRelease
	if st := NewGraph([]v1.Environment{release}).Stages("prod"); st[0].Match != v1.MatchRelease {
		t.Errorf("match: Release reads as %q", st[0].Match)
	}
	if len(g.Stages("dev")) != 0 || g.Exists("qa") || !g.Exists("dev") {
		t.Error("dev requires nothing, qa does not exist")
	}
}
