package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/view"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/server"
)

// environment creates an Environment of ns that requires the given stages.
func environment(t *testing.T, ns, name string, requires ...v1.StageRequirement) {
	t.Helper()
	must(t, env.Client.Create(context.Background(), &v1.Environment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.EnvironmentSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": name}}, Project: name, Requires: requires,
	}}))
}

func soak(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// orderAndServing creates a Manual Order of environment and its Serving, deploying prep (which
// may be empty).
func orderAndServing(t *testing.T, ns, name, environment, prep string) *v1.Serving {
	t.Helper()
	ctx := context.Background()
	must(t, env.Client.Create(ctx, &v1.Order{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.OrderSpec{
		ProductRef: v1.LocalObjectReference{Name: "podinfo"}, EnvironmentRef: v1.LocalObjectReference{Name: environment},
		Promotion: v1.Promotion{Mode: v1.PromotionManual},
	}}))
	s := &v1.Serving{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ServingSpec{
		OrderRef: v1.LocalObjectReference{Name: name}, PreparationName: prep, PromotedBy: env.AdminName,
	}}
	must(t, env.Client.Create(ctx, s))
	return s
}

// release creates a Ready Preparation of order carrying the release of source (a source
// digest, no images), whose artifact is repository@digest.
func release(t *testing.T, ns, name, order, source, repository, digest string) *v1.Preparation {
	t.Helper()
	ctx := context.Background()
	p := &v1.Preparation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.PreparationSpec{
		OrderRef: v1.LocalObjectReference{Name: order}, ProductRef: v1.LocalObjectReference{Name: "podinfo"},
		Source:          v1.PreparationSource{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.14.1", Digest: source},
		TargetNamespace: "podinfo", Artifact: v1.Artifact{Ref: "oci://" + repository + "@" + digest, Digest: digest},
		ConfigHash: name,
	}}
	must(t, env.Client.Create(ctx, p))
	apimeta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonRendered, Message: "pushed"})
	must(t, env.Client.Status().Update(ctx, p))
	return p
}

// ready writes the Serving's Ready condition as the Serving reconciler would; Deployed also
// sets the revision to digest, and the soak clock.
func ready(t *testing.T, s *v1.Serving, reason, digest string) {
	t.Helper()
	status := metav1.ConditionFalse
	if reason == v1.ReasonDeployed {
		status, s.Status.Revision = metav1.ConditionTrue, digest
	}
	apimeta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: status, Reason: reason, Message: reason, ObservedGeneration: s.Generation})
	s.Status.TickSoakClock(metav1.Now())
	must(t, env.Client.Status().Update(context.Background(), s))
}

// listRecord lists a record in the Preparation's status, as the Serving reconciler does.
func listRecord(t *testing.T, p *v1.Preparation, r v1.DeploymentRecord) {
	t.Helper()
	p.Status.DeploymentRecords = append([]v1.DeploymentRecord{r}, p.Status.DeploymentRecords...)
	must(t, env.Client.Status().Update(context.Background(), p))
}

type refusal struct {
	Error  string              `json:"error"`
	Fields []server.FieldError `json:"fields"`
}

func promote(t *testing.T, ns, serving, prep string) (int, refusal) {
	t.Helper()
	var out refusal
	res := do(t, call{method: http.MethodPost, path: "/api/v1/namespaces/" + ns + "/servings/" + serving + "/promotion", bearer: token, body: server.PromoteRequest{Preparation: prep}}, &out)
	return res.StatusCode, out
}

func servingPath(ns, name string) string { return "/api/v1/namespaces/" + ns + "/servings/" + name }

func TestAPromotionWaitsForTheStagesItsEnvironmentRequires(t *testing.T) {
	ctx := context.Background()
	ns := "team-pipeline"
	must(t, env.CreateNamespace(ctx, ns))
	environment(t, ns, "staging")
	environment(t, ns, "prod", v1.StageRequirement{Environment: "staging", Soak: soak(30 * time.Minute)})
	orderAndServing(t, ns, "podinfo-prod", "prod", "")
	source := "sha256:" + strings.Repeat("1", 64)
	release(t, ns, "podinfo-prod-1", "podinfo-prod", source, "127.0.0.1:1/"+ns+"/podinfo-prod", "sha256:"+strings.Repeat("a", 64))

	// The Order form says what prod requires.
	get(t, "/api/v1/namespaces/"+ns+"/environments", func(l list[view.EnvironmentSummary]) error {
		if len(l.Items) != 2 || l.Items[0].Name != "prod" || fmt.Sprint(l.Items[0].Requires) != "[{staging 30m Artifact}]" || l.Items[1].Requires != nil {
			return fmt.Errorf("environments %+v, want prod requiring staging (soak 30m, match Artifact) and staging requiring nothing", l.Items)
		}
		return nil
	})

	// The Serving page shows the stage prod waits for; the server's cache knows it now, and that
	// the Preparation is Ready (else a promotion is refused as not checked yet).
	d := get(t, servingPath(ns, "podinfo-prod"), func(d view.ServingDetail) error {
		if d.Pipeline == nil || len(d.Pipeline.Stages) != 1 || d.Pipeline.Preparation != "podinfo-prod-1" {
			return fmt.Errorf("pipeline %+v, want the stage staging for podinfo-prod-1", d.Pipeline)
		}
		if d.Promotion == nil || len(d.Promotion.Preparations) != 1 || d.Promotion.Preparations[0].Ready.Status != string(metav1.ConditionTrue) {
			return fmt.Errorf("promotion %+v, want podinfo-prod-1 Ready", d.Promotion)
		}
		return nil
	})
	p, st := d.Pipeline, d.Pipeline.Stages[0]
	if p.Environment != "prod" || p.Allowed || p.Error != "" || !strings.Contains(p.Message, "staging has not deployed this release") {
		t.Errorf("pipeline %+v", p)
	}
	if st.Environment != "staging" || st.State != "Waiting" || st.Soak != "30m" || st.Left != "" || st.Serving != "" ||
		st.Message != "staging has not deployed this release" {
		t.Errorf("stage %+v, want staging Waiting, soak 30m, not deployed", st)
	}
	if d.Records != nil {
		t.Errorf("records %+v of a Serving that deploys nothing", d.Records)
	}

	// The promotion is refused, with the message the Serving and the Order would show.
	code, out := promote(t, ns, "podinfo-prod", "podinfo-prod-1")
	want := "preparation: Preparation podinfo-prod-1 has not passed the stages of Environment prod: staging has not deployed this release"
	if code != http.StatusUnprocessableEntity || len(out.Fields) != 1 || out.Fields[0].Field != "preparation" || out.Error != want {
		t.Errorf("promote: %d %+v, want 422 %q", code, out, want)
	}
	var sv v1.Serving
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "podinfo-prod"}, &sv))
	if sv.Spec.PreparationName != "" {
		t.Fatalf("a refused promotion changed the Serving: %q", sv.Spec.PreparationName)
	}

	// staging deploys the release, not healthy yet: the stage names its Order and Serving.
	stagingPrep := release(t, ns, "podinfo-staging-1", "podinfo-staging", source, "127.0.0.1:1/"+ns+"/podinfo-staging", "sha256:"+strings.Repeat("b", 64))
	staging := orderAndServing(t, ns, "podinfo-staging", "staging", stagingPrep.Name)
	ready(t, staging, v1.ReasonProgressing, "")
	get(t, servingPath(ns, "podinfo-prod"), func(d view.ServingDetail) error {
		if d.Pipeline == nil || len(d.Pipeline.Stages) != 1 {
			return fmt.Errorf("pipeline %+v", d.Pipeline)
		}
		st := d.Pipeline.Stages[0]
		if st.State != "Waiting" || st.Order != "podinfo-staging" || st.Serving != "podinfo-staging" ||
			st.Message != "staging has not deployed this release yet (Order podinfo-staging: Progressing)" {
			return fmt.Errorf("stage %+v, want staging Waiting on the Progressing podinfo-staging", st)
		}
		return nil
	})

	// A registry that is down makes a short message on the Serving page, not a failed page:
	// the records are listed from the Preparation's status, unverified.
	listRecord(t, stagingPrep, v1.DeploymentRecord{Environment: "staging", Clusters: 2, Time: metav1.NewTime(time.Now().Truncate(time.Second)), Digest: "sha256:" + strings.Repeat("c", 64)})
	d = get(t, servingPath(ns, "podinfo-staging"), func(d view.ServingDetail) error {
		if d.Records == nil || len(d.Records.Items) != 1 {
			return fmt.Errorf("records %+v, want the one the status lists", d.Records)
		}
		return nil
	})
	if r := d.Records; !strings.Contains(r.Error, "127.0.0.1:1/"+ns+"/podinfo-staging") || len(r.Error) > 300 || r.Items[0].Verified || r.Items[0].Clusters != 2 || r.Preparation != "podinfo-staging-1" {
		t.Errorf("records %+v, want the read's error and the status's record, unverified", r)
	}
	if d.Pipeline != nil {
		t.Errorf("staging requires nothing, yet its Serving shows a pipeline: %+v", d.Pipeline)
	}
}

func TestStagesPassOnSignedRecordsAndTheServingPageListsThem(t *testing.T) {
	ctx := context.Background()
	ns := "team-records"
	must(t, env.CreateNamespace(ctx, ns))
	reg := ocitest.Start(t)
	signer, err := (&record.Keys{Client: env.Client, Namespace: kokumiNS}).Ensure(ctx)
	must(t, err)
	environment(t, ns, "staging")
	environment(t, ns, "prod", v1.StageRequirement{Environment: "staging", Soak: soak(30 * time.Minute)})
	source := "sha256:" + strings.Repeat("2", 64)

	// staging runs the release, Deployed, with a signed record attached to its artifact.
	repo := reg.Addr + "/" + ns + "/podinfo-staging"
	digest := ocitest.PushBundle(t, repo, "v1", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	stagingPrep := release(t, ns, "podinfo-staging-1", "podinfo-staging", source, repo, digest)
	staging := orderAndServing(t, ns, "podinfo-staging", "staging", stagingPrep.Name)
	ready(t, staging, v1.ReasonDeployed, digest)
	at := time.Now().UTC().Truncate(time.Second)
	recDigest, err := (&record.Store{Client: &oci.Client{}}).Attach(ctx, repo, digest, signer, record.Predicate{
		Order: "podinfo-staging", Namespace: ns, Environment: "staging", TargetNamespace: "podinfo",
		Preparation: stagingPrep.Name, Clusters: []string{"edge-1", "edge-2"}, Time: at,
	})
	must(t, err)
	listRecord(t, stagingPrep, v1.DeploymentRecord{Environment: "staging", Clusters: 2, Time: metav1.NewTime(at), Digest: recDigest, KeyID: signer.KeyID()})

	d := get(t, servingPath(ns, "podinfo-staging"), func(d view.ServingDetail) error {
		if d.Records == nil || len(d.Records.Items) != 1 || !d.Records.Items[0].Verified {
			return fmt.Errorf("records %+v, want one verified", d.Records)
		}
		return nil
	})
	r := d.Records.Items[0]
	if r.Digest != recDigest || r.Environment != "staging" || r.Order != "podinfo-staging" || r.Clusters != 2 || r.KeyID != signer.KeyID() ||
		r.Problem != "" || r.Time == nil || !r.Time.Equal(at) || d.Records.Error != "" {
		t.Errorf("record %+v (error %q), want %s of staging on 2 clusters by key %s at %s", r, d.Records.Error, recDigest, signer.KeyID(), at)
	}
	artifact := repo + "@" + digest
	if d.Records.Artifact != artifact || d.Records.Verify != server.CosignVerifyCommand(artifact) || !strings.HasPrefix(d.Records.Verify, "cosign verify-attestation --key kokumi.pub ") {
		t.Errorf("artifact %q, verify %q", d.Records.Artifact, d.Records.Verify)
	}

	// prod's stage staging soaks: the record is the evidence, the Serving page links staging.
	orderAndServing(t, ns, "podinfo-prod", "prod", "")
	release(t, ns, "podinfo-prod-1", "podinfo-prod", source, reg.Addr+"/"+ns+"/podinfo-prod", "sha256:"+strings.Repeat("d", 64))
	d = get(t, servingPath(ns, "podinfo-prod"), func(d view.ServingDetail) error {
		if d.Pipeline == nil || len(d.Pipeline.Stages) != 1 || d.Pipeline.Stages[0].State != "Soaking" {
			return fmt.Errorf("pipeline %+v, want staging Soaking", d.Pipeline)
		}
		// The promotion below reads the Preparation's Ready condition from the same cache.
		if d.Promotion == nil || len(d.Promotion.Preparations) != 1 || d.Promotion.Preparations[0].Ready.Status != "True" {
			return fmt.Errorf("promotion %+v, want podinfo-prod-1 Ready", d.Promotion)
		}
		return nil
	})
	st := d.Pipeline.Stages[0]
	// The countdown of the page: what is left, in seconds, as the server counted it.
	if st.LeftSeconds <= 0 || st.LeftSeconds > 30*60 {
		t.Errorf("stage %+v: leftSeconds out of the 30m soak", st)
	}
	if st.Left == "" || st.Soak != "30m" || st.Serving != "podinfo-staging" || st.Record != recDigest || !strings.HasPrefix(st.Message, "staging soaking ") {
		t.Errorf("stage %+v", st)
	}
	if code, out := promote(t, ns, "podinfo-prod", "podinfo-prod-1"); code != http.StatusUnprocessableEntity || !strings.Contains(out.Error, "staging soaking ") {
		t.Errorf("promote while staging soaks: %d %+v, want 422 naming the soak", code, out)
	}

	// Without a soak, the record is enough: the promotion goes through.
	var prod v1.Environment
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "prod"}, &prod))
	prod.Spec.Requires[0].Soak = nil
	must(t, env.Client.Update(ctx, &prod))
	get(t, servingPath(ns, "podinfo-prod"), func(d view.ServingDetail) error {
		if d.Pipeline == nil || !d.Pipeline.Allowed || len(d.Pipeline.Stages) != 1 || d.Pipeline.Stages[0].State != "Passed" {
			return fmt.Errorf("pipeline %+v, want staging Passed", d.Pipeline)
		}
		return nil
	})
	if code, out := promote(t, ns, "podinfo-prod", "podinfo-prod-1"); code != http.StatusOK {
		t.Errorf("promote once staging passed: %d %+v", code, out)
	}
}

// A Preparation's change (a new deployment record, say) refreshes the page of its Serving.
func TestAPreparationChangeNamesItsServing(t *testing.T) {
	ns := "team-prep-events"
	must(t, env.CreateNamespace(context.Background(), ns))
	req, err := http.NewRequest(http.MethodGet, base+"/api/v1/events", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	must(t, err)
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	preparationOf(t, ns, "podinfo-edge-1", "podinfo-edge", true)
	nextEvent(t, r, `"kind":"Serving","namespace":"team-prep-events","name":"podinfo-edge"`)
}
