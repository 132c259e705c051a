package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/cli"
	"github.com/kokumi-dev/kokumi/internal/dora"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/provenance"
	krecord "github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
)

// doraAt is a time of the fixture: "2026-01-02T10:00", UTC.
func doraAt(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse("2006-01-02T15:04", s)
	must(t, err)
	return v.UTC()
}

// A fixture history of signed evidence in a registry on loopback, for the Order web of prod,
// one record of it signed by a key Kokumi does not trust. Over January 2026 (--since 2026-01-01
// --until 2026-01-31, 30 days), by hand:
//
//	web-1  render 01-02 08:00; records 01-02 10:00 (deployment 1, lead 2h) and 01-02 11:00 (more
//	       clusters: no new deployment).
//	web-2  render 01-05 00:00; halted 01-05 06:00: failure 1, an outage opens.
//	web-3  render 01-06 00:00; record 01-06 12:00: deployment 2, lead 12h, ends the outage: 30h.
//	       Revoked 01-06 13:00: failure 2, an outage opens.
//	web-4  render 01-08 00:00; record 01-08 04:00: deployment 3, lead 4h, ends the outage:
//	       01-08 04:00 − 01-06 13:00 = 39h. A second record, 01-09 00:00, signed by another key:
//	       skipped (it would have been no deployment either).
//	web-5  render 01-10 00:00; aborted 01-10 02:00: failure 3, an outage that stays open.
//
// Deployments 3 (0.10 a day); lead times 2h, 4h, 12h: median 4h; failures halted 1, revoked 1,
// aborted 1 = 3; roll-outs 3 + 2 (halted, aborted) = 5; change failure rate 3/5 = 60%; restores
// 30h and 39h: median 34h30m; unrestored 1; skipped 1.
func TestDoraGivesTheHandComputedMeasuresFromVerifiedRecordsOnly(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "dora")
	keysNS := namespace(t, "dora-kokumi")
	order(t, ns, "web", "prod", v1.PromotionManual)
	reg := ocitest.Start(t)
	repository := ocitest.Repo(reg, "team/"+ns+"/web")
	signer, stranger := recordtest.NewSigner(t), recordtest.NewSigner(t)
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: keysNS, Name: krecord.ConfigMapName},
		Data: map[string]string{krecord.CurrentKeyEntry: string(signer.PublicKeyPEM()), signer.KeyID() + ".pub": string(signer.PublicKeyPEM())}}))
	store := &krecord.Store{Client: &oci.Client{}}

	type fixture struct {
		name, render string
		records      []string
		stranger     string
		failure      string // outcome
		failedAt     string
		revokedAt    string
	}
	fixtures := []fixture{
		{name: "web-1", render: "2026-01-02T08:00", records: []string{"2026-01-02T10:00", "2026-01-02T11:00"}},
		{name: "web-2", render: "2026-01-05T00:00", failure: krecord.OutcomeHalted, failedAt: "2026-01-05T06:00"},
		{name: "web-3", render: "2026-01-06T00:00", records: []string{"2026-01-06T12:00"}, revokedAt: "2026-01-06T13:00"},
		{name: "web-4", render: "2026-01-08T00:00", records: []string{"2026-01-08T04:00"}, stranger: "2026-01-09T00:00"},
		{name: "web-5", render: "2026-01-10T00:00", failure: krecord.OutcomeAborted, failedAt: "2026-01-10T02:00"},
	}
	for _, f := range fixtures {
		d := pushPreparation(t, repository, strings.ReplaceAll(configMap, "blue", f.name))
		preparation(t, ns, f.name, prepSpec{order: "web", repository: repository, digest: d, ready: metav1.ConditionTrue})
		_, err := provenance.Attach(ctx, store, signer, repository, d, provenance.Render{Namespace: ns, Order: "web", Product: "podinfo",
			SourceURL: "oci://ghcr.io/stefanprodan/charts/podinfo", SourceDigest: digest("5"), StartedOn: doraAt(t, f.render)})
		must(t, err)
		pred := krecord.Predicate{Order: "web", Namespace: ns, Environment: "prod", TargetNamespace: "podinfo", Preparation: f.name, Clusters: []string{"prod-1"}}
		for _, at := range f.records {
			pred.Time = doraAt(t, at)
			_, err := store.Attach(ctx, repository, d, signer, pred)
			must(t, err)
		}
		if f.stranger != "" {
			pred.Time = doraAt(t, f.stranger)
			_, err := store.Attach(ctx, repository, d, stranger, pred)
			must(t, err)
		}
		if f.failure != "" {
			_, _, err := store.Fail(ctx, repository, d, signer, krecord.FailurePredicate{Order: "web", Namespace: ns, Environment: "prod",
				Preparation: f.name, Attempt: 1, Outcome: f.failure, Time: doraAt(t, f.failedAt)})
			must(t, err)
		}
		if f.revokedAt != "" {
			_, _, err := store.Revoke(ctx, repository, d, signer, krecord.RevocationPredicate{Order: "web", Namespace: ns, Environment: "prod",
				Preparation: f.name, Revokes: digest("e"), Time: doraAt(t, f.revokedAt), Check: krecord.RevokingCheck{Name: "error-rate", Kind: "http"}})
			must(t, err)
		}
	}
	window := []string{"--since", "2026-01-01", "--until", "2026-01-31", "--kokumi-namespace", keysNS}

	r := kubectlKokumi(t, append([]string{"dora", "web", "-n", ns, "-o", "json"}, window...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var got cli.DoraReport
	must(t, json.Unmarshal([]byte(r.stdout), &got))
	if got.SkippedCount != 1 || len(got.Skipped) != 1 || got.Skipped[0].Preparation != "web-4" ||
		got.Skipped[0].Problem != "signature does not match any listed key" {
		t.Errorf("skipped %d: %+v; want the one record of web-4 signed by another key", got.SkippedCount, got.Skipped)
	}
	if len(got.Measures) != 1 {
		t.Fatalf("measures = %+v; want web in prod alone", got.Measures)
	}
	m := got.Measures[0]
	h := time.Hour
	checks := []struct {
		what      string
		got, want any
	}{
		{"key", m.Key, dora.Key{Namespace: ns, Order: "web", Environment: "prod"}},
		{"deployments", m.Deployments, 3},
		{"per day", m.PerDay, 0.1},
		{"lead time", m.LeadTime, dora.Summary{Count: 3, Median: 4 * h, Mean: 6 * h, Max: 12 * h}},
		{"failures", m.Failures, map[dora.Kind]int{dora.Halted: 1, dora.Revoked: 1, dora.Aborted: 1}},
		{"roll-outs", m.Rollouts, 5},
		{"change failure rate", m.ChangeFailureRate, 0.6},
		{"time to restore", m.TimeToRestore, dora.Summary{Count: 2, Median: 34*h + 30*time.Minute, Mean: 34*h + 30*time.Minute, Max: 39 * h}},
		{"unrestored", m.Unrestored, 1},
	}
	for _, c := range checks {
		if !equalJSON(t, c.got, c.want) {
			t.Errorf("%s = %+v, want %+v", c.what, c.got, c.want)
		}
	}

	// The table says the same, and how many were skipped and why.
	r = kubectlKokumi(t, append([]string{"dora", "-n", ns}, window...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"Delivery from 2026-01-01 00:00:00 UTC to 2026-01-31 00:00:00 UTC, from verified evidence of 5 Preparations.\n",
		"NAMESPACE   ORDER   ENVIRONMENT   DEPLOYMENTS   PER DAY   LEAD TIME (MEDIAN)   CHANGE FAILURE RATE   FAILURES                         TIME TO RESTORE (MEDIAN)   UNRESTORED\n",
		"dora        web     prod          3             0.10      4h (3)               60% (3 of 5)          halted 1, aborted 1, revoked 1   1d10h (2)                  1\n",
		"Skipped 1 that did not verify (not counted):\n  web-4 ",
		": signature does not match any listed key\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the table does not say %q:\n%s", want, r.stdout)
		}
	}

	// Another Environment has nothing; a window before the history neither.
	r = kubectlKokumi(t, append([]string{"dora", "web", "-n", ns, "--environment", "staging"}, window...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "No deployment or failure in that window") {
		t.Errorf("staging: exit %d %q", r.code, r.stdout)
	}
	// Bad input says what to write.
	r = kubectlKokumi(t, "dora", "web", "-n", ns, "--since", "a month", "--kokumi-namespace", keysNS)
	if r.code != 1 || r.stderr != "error: --since \"a month\" is neither a duration back (30d, 2w, 12h) nor a date (2026-01-01)\n" {
		t.Errorf("--since a month: exit %d %q", r.code, r.stderr)
	}
	r = kubectlKokumi(t, "dora", "web", "-n", ns, "--kokumi-namespace", ns)
	if r.code != 1 || !strings.Contains(r.stderr, "lists no key: Kokumi has signed nothing yet, or runs in another namespace (see --kokumi-namespace)") {
		t.Errorf("no keys: exit %d %q", r.code, r.stderr)
	}
}

// equalJSON compares two values as JSON.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	must(t, err)
	jb, err := json.Marshal(b)
	must(t, err)
	return string(ja) == string(jb)
}
