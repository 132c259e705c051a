package gate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/gate"
)

func TestTheServingGateNamesTheFirstThingThatHoldsIt(t *testing.T) {
	ok := gate.ServingFacts{ArgoCDInstalled: true, ArgoCDNamespace: "argocd", ArgoCDNamespaceFound: true, Namespace: "team",
		Order: "web", OrderFound: true, Environment: "edge", EnvironmentFound: true, Clusters: 3,
		Project: "edge", ProjectFound: true, ProjectAdmitsNamespace: true, Preparation: "web-1", PreparationFound: true, PreparationOrder: "web"}
	if v := gate.Serving(ok); v.Reason != "" || !v.TargetKnown || v.Stop {
		t.Fatalf("nothing holds it: %+v", v)
	}
	for _, tc := range []struct {
		name              string
		mutate            func(*gate.ServingFacts)
		reason            string
		stop, targetKnown bool
		recheck           time.Duration
		messageHas        string
	}{
		// A later problem never hides an earlier one: each case breaks everything after it too.
		{"no Argo CD", func(f *gate.ServingFacts) { f.ArgoCDInstalled, f.OrderFound = false, false }, v1.ReasonArgoCDNotInstalled, false, false, 0, "CRD is not installed"},
		{"no Argo CD namespace", func(f *gate.ServingFacts) { f.ArgoCDNamespaceFound, f.OrderFound = false, false }, v1.ReasonArgoCDNotInstalled, false, false, gate.RecheckArgoCD, "--argocd-namespace"},
		{"no Order", func(f *gate.ServingFacts) { f.OrderFound, f.EnvironmentFound = false, false }, v1.ReasonOrderNotFound, true, false, 0, "spec.orderRef"},
		{"local off", func(f *gate.ServingFacts) { f.Environment, f.EnvironmentFound = v1.LocalEnvironmentName, false }, v1.ReasonEnvironmentNotFound, true, false, 0, "--local-project"},
		{"no Environment", func(f *gate.ServingFacts) { f.EnvironmentFound, f.Clusters = false, 0 }, v1.ReasonEnvironmentNotFound, true, false, 0, "ask an admin to create it"},
		{"bad selector", func(f *gate.ServingFacts) { f.SelectorError, f.Clusters = errors.New("bad"), 0 }, v1.ReasonInvalidSelector, true, false, 0, "spec.clusterSelector"},
		{"no clusters", func(f *gate.ServingFacts) { f.Clusters, f.ProjectFound = 0, false }, v1.ReasonNoClusters, true, false, 0, "selects no Cluster"},
		{"no project", func(f *gate.ServingFacts) { f.ProjectFound, f.Preparation = false, "" }, v1.ReasonProjectNotFound, true, true, 0, "AppProject argocd/edge"},
		{"project refuses", func(f *gate.ServingFacts) { f.ProjectAdmitsNamespace, f.Preparation = false, "" }, v1.ReasonProjectNotPermitted, true, true, 0, "sourceNamespaces"},
		{"nothing promoted", func(f *gate.ServingFacts) { f.Preparation, f.PreparationFound = "", false }, v1.ReasonNoPreparation, false, true, 0, "spec.preparationName"},
		{"no Preparation", func(f *gate.ServingFacts) { f.PreparationFound = false }, v1.ReasonPreparationNotFound, false, true, 0, "does not exist"},
		{"another Order's", func(f *gate.ServingFacts) { f.PreparationOrder = "api" }, v1.ReasonPreparationNotFound, false, true, 0, "rendered for Order api"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := ok
			tc.mutate(&f)
			v := gate.Serving(f)
			if v.Reason != tc.reason || v.Stop != tc.stop || v.TargetKnown != tc.targetKnown || v.RecheckAfter != tc.recheck || !strings.Contains(v.Message, tc.messageHas) {
				t.Errorf("%+v; want %s, stop %v, target known %v, recheck %s, a message with %q", v, tc.reason, tc.stop, tc.targetKnown, tc.recheck, tc.messageHas)
			}
		})
	}
	local := ok
	local.Environment, local.EnvironmentFound, local.LocalEnabled = v1.LocalEnvironmentName, false, true
	if v := gate.Serving(local); v.Reason != "" {
		t.Errorf("the Environment local Kokumi provides: %+v", v)
	}
	if v := gate.AwaitingStage("web-1", "prod", "staging soaking", time.Minute); v.Reason != v1.ReasonAwaitingStage || v.RecheckAfter != time.Minute+time.Second || v.Stop {
		t.Errorf("awaiting a stage: %+v", v)
	}
}
