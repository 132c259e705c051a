package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/view"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
)

func prepNamed(name string, ready bool, created time.Time) v1.Preparation {
	p := v1.Preparation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}}
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	apimeta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: status, Reason: "R"})
	return p
}

func TestPipelinePreparationPicksWhatWaitsOrComesNext(t *testing.T) {
	now := time.Now()
	preps := []v1.Preparation{ // newest first
		prepNamed("p3", false, now), prepNamed("p2", true, now.Add(-time.Minute)), prepNamed("p1", true, now.Add(-2*time.Minute)),
	}
	awaiting := &v1.Serving{Spec: v1.ServingSpec{PreparationName: "p1"}}
	apimeta.SetStatusCondition(&awaiting.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonAwaitingStage})
	deployed := &v1.Serving{Spec: v1.ServingSpec{PreparationName: "p1"}}
	for _, c := range []struct {
		s     *v1.Serving
		preps []v1.Preparation
		want  string
	}{
		{awaiting, preps, "p1"},                       // what the Serving waits to deploy
		{deployed, preps, "p2"},                       // the next to promote
		{deployed, preps[:1], "p3"},                   // nothing Ready: the newest
		{&v1.Serving{}, []v1.Preparation{}, "<none>"}, // no Preparation
	} {
		got := "<none>"
		if p := pipelinePreparation(c.s, c.preps); p != nil {
			got = p.Name
		}
		if got != c.want {
			t.Errorf("Serving %q (%v): picked %s, want %s", c.s.Spec.PreparationName, c.s.Status.Conditions, got, c.want)
		}
	}
}

func TestPromotionOfCapsTheNewestPreparations(t *testing.T) {
	now := time.Now()
	var preps []v1.Preparation
	for i := range MaxPreparations + 3 {
		preps = append(preps, prepNamed(fmt.Sprintf("p%02d", i), true, now.Add(-time.Duration(i)*time.Minute)))
	}
	p := promotionOf(&v1.Serving{Spec: v1.ServingSpec{PreparationName: "p01"}}, &v1.Order{}, preps)
	if p.Mode != "Manual" || len(p.Preparations) != MaxPreparations || p.PreparationsOmitted != 3 || p.Preparations[0].Name != "p00" || !p.Preparations[1].Promoted {
		t.Errorf("promotion %+v", p)
	}
	if p := promotionOf(&v1.Serving{}, nil, nil); p.Mode != "" || p.Preparations == nil {
		t.Errorf("promotion of a gone Order %+v, want no mode and an empty list", p)
	}
}

func TestChangesOfAPreparationNameItsServing(t *testing.T) {
	prep := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop-1"}, Spec: v1.PreparationSpec{OrderRef: v1.LocalObjectReference{Name: "shop"}}}
	if got := fmt.Sprint(changesOf("Preparation", prep)); got != "[{Preparation ns shop-1 } {Serving ns shop }]" {
		t.Errorf("changes %s", got)
	}
	app := &argocd.Application{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "ns-shop-edge-1",
		Labels: map[string]string{argocd.LabelServing: "shop", argocd.LabelServingNamespace: "ns", argocd.LabelCluster: "edge-1"}}}
	if got := fmt.Sprint(changesOf("Application", app)); got != "[{Serving ns shop edge-1}]" {
		t.Errorf("changes %s", got)
	}
	if got := fmt.Sprint(changesOf("Cluster", &v1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}})); got != "[{Cluster  edge-1 }]" {
		t.Errorf("changes %s", got)
	}
}

func TestWritePEMPrintsTheCurrentKeyOrAll(t *testing.T) {
	k := PublicKeys{Current: "CUR", Keys: []PublicKey{{ID: "a1", PEM: "OLD\n"}, {ID: "b2", PEM: "CUR"}}}
	var b strings.Builder
	if err := k.WritePEM(&b, false); err != nil || b.String() != "CUR\n" {
		t.Errorf("current: %q %v", b.String(), err)
	}
	b.Reset()
	if err := k.WritePEM(&b, true); err != nil || b.String() != "# a1\nOLD\n# b2\nCUR\n" {
		t.Errorf("all: %q %v", b.String(), err)
	}
}

func TestRequirementsOfFormatTheSoakAndTheMatch(t *testing.T) {
	e := &v1.Environment{Spec: v1.EnvironmentSpec{Requires: []v1.StageRequirement{
		{Environment: "staging", Soak: &metav1.Duration{Duration: 90 * time.Minute}}, {Environment: "qa", Match: v1.MatchRelease},
	}}}
	if got := fmt.Sprint(view.RequirementsOf(e)); got != "[{staging 1h30m Artifact} {qa  Release}]" {
		t.Errorf("requirements %s", got)
	}
}
