package rollout

import (
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/argocd"
	"github.com/kokumi-dev/kokumi/internal/fleet"
)

const (
	newDigest = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	oldDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
)

func prepOf(name, digest string) *v1.Preparation {
	p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
	p.Spec.Artifact.Ref, p.Spec.Artifact.Digest = "oci://registry.example/team/web@"+digest, digest
	p.Spec.TargetNamespace = "web"
	return p
}

// planInputs is a Serving team/web rolling out p-2 (newDigest) to clusters c1 (wave canary)
// and r1 (wave rest), from p-1 (oldDigest); apps are the Applications that exist, by cluster,
// at their revision and with Argo CD's report.
func planInputs(t *testing.T, pol *v1.RolloutPolicy, apps map[string]*argocd.Application, preps ...*v1.Preparation) Inputs {
	t.Helper()
	clusters := []fleet.Cluster{{Name: "c1", Server: "https://c1", Ready: true}, {Name: "r1", Server: "https://r1", Ready: true}}
	base := fleet.Request{ServingNamespace: "team", ServingName: "web", ArgoCDNamespace: "argocd", Clusters: clusters,
		Project: argocd.Project{Name: "default", Spec: argocd.ProjectSpec{Destinations: []argocd.Destination{{Server: "*", Namespace: "*"}}}}}
	byName := map[string]*argocd.Application{}
	for c, app := range apps {
		byName[fleet.ApplicationName("team", "web", c)] = app
	}
	in := Inputs{Request: Request(base, "", prepOf("p-2", newDigest)), Applications: byName,
		Ours:     func(*argocd.Application) bool { return true },
		UpToDate: func(spec argocd.ApplicationSpec, app *argocd.Application) bool { return spec.UpToDate(app) },
		Now:      metav1.NewTime(stepNoon), Deadline: time.Hour, Waves: map[string]int{"c1": 0, "r1": 1},
		Preparation: func(name string) (*v1.Preparation, error) {
			for _, p := range preps {
				if p.Name == name {
					return p, nil
				}
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "preparations"}, name)
		},
	}
	in.Rollout = Input{Policy: pol, Preparation: "p-2", From: "p-1"}
	return in
}

// appAt is the Application of cluster c as Kokumi writes it for prep, reported health by Argo CD.
func appAt(t *testing.T, in Inputs, c string, prep *v1.Preparation, health string) *argocd.Application {
	t.Helper()
	req := Request(in.Request, "", prep)
	spec := req.Spec(fleet.Cluster{Name: c, Server: "https://" + c})
	app, err := argocd.ApplicationFrom(spec.Build())
	if err != nil {
		t.Fatal(err)
	}
	app.Status.Sync.Status, app.Status.Sync.Revision = argocd.SyncSynced, prep.Spec.Artifact.Digest
	app.Status.Health.Status = health
	return app
}

func TestPlanDecidesTheFleetOnceAndEditsTheRequestOfTheClustersItHolds(t *testing.T) {
	type want struct {
		state   fleet.State
		reason  string
		write   bool
		rev     string
		message string
	}
	p1, p2 := prepOf("p-1", oldDigest), prepOf("p-2", newDigest)
	withRollback := policy(v1.RolloutRollback, 0)
	withRollback.Waves[0].Soak = nil
	for _, tc := range []struct {
		name     string
		policy   *v1.RolloutPolicy
		apps     func(in Inputs) map[string]*argocd.Application
		preps    []*v1.Preparation
		rollback func() (string, string)
		course   bool
		revision string
		want     map[string]want
	}{
		{"without a policy: fleet.Decide, every cluster at once", nil, nil, nil, nil, false, newDigest, map[string]want{
			"c1": {fleet.Progressing, v1.ReasonProgressing, true, newDigest, "creating Application"},
			"r1": {fleet.Progressing, v1.ReasonProgressing, true, newDigest, "creating Application"},
		}},
		{"in waves: the first wave is written, the next waits as it is", policy(v1.RolloutHalt, 0),
			func(in Inputs) map[string]*argocd.Application {
				return map[string]*argocd.Application{"r1": appAt(t, in, "r1", p1, argocd.HealthHealthy)}
			}, []*v1.Preparation{p1}, nil, true, newDigest, map[string]want{
				"c1": {fleet.Progressing, v1.ReasonProgressing, true, newDigest, "creating Application"},
				"r1": {fleet.Progressing, v1.ReasonWaiting, false, "", "wave rest waits for wave canary"},
			}},
		{"a joiner of a wave not reached gets what its wave runs", policy(v1.RolloutHalt, 0), nil, []*v1.Preparation{p1}, nil, true, newDigest, map[string]want{
			"c1": {fleet.Progressing, v1.ReasonProgressing, true, newDigest, "creating Application"},
			"r1": {fleet.Progressing, v1.ReasonProgressing, true, oldDigest, "creating Application"},
		}},
		{"a joiner whose wave's Preparation is gone waits", policy(v1.RolloutHalt, 0), nil, nil, nil, true, newDigest, map[string]want{
			"c1": {fleet.Progressing, v1.ReasonProgressing, true, newDigest, "creating Application"},
			"r1": {fleet.Progressing, v1.ReasonWaiting, false, "", "the Preparation p-1 its wave runs no longer exists"},
		}},
		{"a failed roll-out goes back: the clusters it changed get the Preparation before", withRollback,
			func(in Inputs) map[string]*argocd.Application {
				return map[string]*argocd.Application{"c1": appAt(t, in, "c1", p2, argocd.HealthDegraded), "r1": appAt(t, in, "r1", p1, argocd.HealthHealthy)}
			}, []*v1.Preparation{p1, p2}, func() (string, string) { return "p-1", "" }, true, oldDigest, map[string]want{
				"c1": {fleet.Progressing, v1.ReasonProgressing, true, oldDigest, "updating Application to 111111111111"},
				"r1": {fleet.Healthy, "", false, oldDigest, ""},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := planInputs(t, tc.policy, nil, tc.preps...)
			if tc.apps != nil {
				in = planInputs(t, tc.policy, tc.apps(in), tc.preps...)
			}
			in.Rollout.RollbackTo = tc.rollback
			out, err := Plan(in)
			if err != nil {
				t.Fatal(err)
			}
			if (out.Course != nil) != tc.course || out.Request.Revision != tc.revision {
				t.Fatalf("course %v, revision %s; want course %v, revision %s", out.Course != nil, out.Request.Revision, tc.course, tc.revision)
			}
			if again := fleet.Decide(out.Request); len(again) != len(out.Decisions) {
				t.Fatalf("the request as planned decides %d clusters, the outcome %d", len(again), len(out.Decisions))
			} else {
				for i := range again {
					if again[i].State != out.Decisions[i].State || again[i].Reason != out.Decisions[i].Reason || again[i].Write != out.Decisions[i].Write || again[i].Spec != out.Decisions[i].Spec {
						t.Errorf("%s: the outcome %+v is not what its request decides %+v", again[i].Cluster, out.Decisions[i], again[i])
					}
				}
			}
			for _, d := range out.Decisions {
				w := tc.want[d.Cluster]
				if d.State != w.state || d.Reason != w.reason || d.Write != w.write || !strings.HasPrefix(d.Message, w.message) || (w.rev != "" && d.Spec.Revision != w.rev) {
					t.Errorf("%s: %s/%s write %v at %s (%q); want %s/%s write %v at %s (%q)", d.Cluster, d.State, d.Reason, d.Write, d.Spec.Revision, d.Message,
						w.state, w.reason, w.write, w.rev, w.message)
				}
			}
		})
	}
}

func TestPlanReturnsTheErrorOfAPreparationItCannotRead(t *testing.T) {
	in := planInputs(t, policy(v1.RolloutHalt, 0), nil)
	in.Preparation = func(string) (*v1.Preparation, error) { return nil, errors.New("the API server is away") }
	if _, err := Plan(in); err == nil || !strings.Contains(err.Error(), `get Preparation "p-1"`) {
		t.Fatalf("got %v", err)
	}
}

func TestFoldTakesTheWritesTheDeadlineAndTheCoursesReady(t *testing.T) {
	halted := &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonRolloutHalted, Message: "halted"}
	for _, tc := range []struct {
		name    string
		course  *Course
		results []fleet.WriteResult
		reason  string
		says    string
		optIn   bool
		recheck time.Duration
	}{
		{"without a course: the fleet's fold", nil, nil, v1.ReasonProgressing, "", false, time.Hour},
		{"a halted course's Ready replaces the fleet's", &Course{Ready: halted}, nil, v1.ReasonRolloutHalted, "halted", false, time.Hour},
		{"a course that goes on adds where it stands", &Course{Status: v1.RolloutStatus{State: v1.RolloutProgressing, Wave: "canary", Waves: []v1.WaveCount{{Name: "canary"}}}, RecheckAfter: time.Minute},
			nil, v1.ReasonProgressing, "roll-out at wave canary (1 of 1)", false, time.Minute},
		{"an Application someone else's: opt in", nil, []fleet.WriteResult{{NotOurs: true}}, v1.ReasonDeploymentFailed, "c1 (OptInRequired)", true, time.Hour},
		{"a failed write is retried", nil, []fleet.WriteResult{{Err: errors.New("conflict")}}, v1.ReasonProgressing, "", false, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := planInputs(t, nil, nil)
			out, err := Plan(in)
			if err != nil {
				t.Fatal(err)
			}
			out.Course = tc.course
			f := Fold(in, out, tc.results, "prod")
			if f.Ready.Reason != tc.reason || !strings.Contains(f.Ready.Message, tc.says) || f.OptIn != tc.optIn || f.RecheckAfter != tc.recheck {
				t.Fatalf("Ready %s (%q), opt-in %v, recheck %s", f.Ready.Reason, f.Ready.Message, f.OptIn, f.RecheckAfter)
			}
			if f.Clusters.Selected != 2 {
				t.Errorf("selected %d, want 2", f.Clusters.Selected)
			}
			if len(tc.results) > 0 && !tc.results[0].NotOurs && f.Targets[0].Conditions[0].Reason != v1.ReasonApplicationWriteFailed {
				t.Errorf("a failed write folds into %+v", f.Targets[0])
			}
		})
	}
}
