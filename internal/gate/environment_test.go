package gate_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cluster"
	"github.com/kokumi-dev/kokumi/internal/gate"
)

func TestEnvironmentReadyNamesTheFirstProblem(t *testing.T) {
	bad := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Within"}}}
	_, selErr := cluster.Selector(&bad)
	if selErr == nil {
		t.Fatal("a selector with operator Within parsed")
	}
	sel, _ := cluster.Selector(&metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}})
	ok := gate.EnvironmentFacts{Selector: sel, Selected: 3, Ready: 2, Project: "edge", ArgoCDNamespace: "argocd", ArgoCDInstalled: true, ProjectFound: true}
	for _, tc := range []struct {
		name       string
		mutate     func(*gate.EnvironmentFacts)
		wantStatus metav1.ConditionStatus
		wantReason string
		wantText   []string
	}{
		{"everything in place", nil, metav1.ConditionTrue, v1.ReasonEnvironmentReady, []string{"2 of 3", `"edge"`}},
		{"no Cluster Ready is still Ready: the Serving holds them", func(f *gate.EnvironmentFacts) { f.Ready = 0 }, metav1.ConditionTrue, v1.ReasonEnvironmentReady, []string{"0 of 3"}},
		{"a selector that does not parse", func(f *gate.EnvironmentFacts) { f.SelectorError = selErr }, metav1.ConditionFalse, v1.ReasonInvalidSelector, []string{"spec.clusterSelector", "Within", "operator In or NotIn"}},
		{"a selector that picks nothing", func(f *gate.EnvironmentFacts) { f.Selected, f.Ready = 0, 0 }, metav1.ConditionFalse, v1.ReasonNoClusters, []string{`"tier=edge"`, "label the Clusters"}},
		{"Argo CD missing", func(f *gate.EnvironmentFacts) { f.ArgoCDInstalled, f.ProjectFound = false, false }, metav1.ConditionFalse, v1.ReasonArgoCDNotInstalled, []string{"install Argo CD"}},
		{"the AppProject missing", func(f *gate.EnvironmentFacts) { f.ProjectFound = false }, metav1.ConditionFalse, v1.ReasonProjectNotFound, []string{"spec.project", `"edge"`, `"argocd"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := ok
			if tc.mutate != nil {
				tc.mutate(&f)
			}
			status, reason, msg := gate.EnvironmentReady(f)
			if status != tc.wantStatus || reason != tc.wantReason {
				t.Fatalf("got %s/%s (%s), want %s/%s", status, reason, msg, tc.wantStatus, tc.wantReason)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not say %q", msg, w)
				}
			}
		})
	}
}

// The pipeline's problem and the verifications' come before every other reason, the
// verifications' first: the admin fixes them first, whatever else holds.
func TestEnvironmentReadyPutsTheVerificationsAndThePipelineFirst(t *testing.T) {
	sel, _ := cluster.Selector(&metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}})
	for _, tc := range []struct {
		name         string
		facts        gate.EnvironmentFacts
		reason, text string
	}{
		{"a required Environment missing, over no Cluster", gate.EnvironmentFacts{Selector: sel, Namespace: "team", MissingRequired: []string{"staging"}},
			v1.ReasonRequiredEnvironmentNotFound, "spec.requires names staging, which does not exist in namespace team"},
		{"a cycle of requirements", gate.EnvironmentFacts{Selector: sel, Selected: 1, RequirementCycle: []string{"prod", "staging", "prod"}},
			v1.ReasonRequirementCycle, "spec.requires forms a cycle (prod → staging → prod)"},
		{"the verifications' problem over the pipeline's", gate.EnvironmentFacts{Selector: sel, Selected: 1, MissingRequired: []string{"staging"}, VerificationProblem: "spec.verify[0].http.url is empty"},
			v1.ReasonInvalidVerification, "spec.verify[0].http.url"},
		{"no problem of either: the first other reason", gate.EnvironmentFacts{Selector: sel}, v1.ReasonNoClusters, "selects no Cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, reason, msg := gate.EnvironmentReady(tc.facts)
			if status != metav1.ConditionFalse || reason != tc.reason || !strings.Contains(msg, tc.text) {
				t.Fatalf("got %s/%s (%s), want False/%s saying %q", status, reason, msg, tc.reason, tc.text)
			}
		})
	}
}
