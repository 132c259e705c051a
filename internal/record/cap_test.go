package record_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/record"
	"github.com/kokumi-dev/kokumi/internal/record/recordtest"
)

// TestAnArtifactAtTheCapTakesANewRecord: a Serving that flaps adds a record at each Deployed;
// cosign reads at most 1,000. An artifact holding 1,000 (990 of prod, 10 of staging) takes the
// next: the older records of each Environment are dropped, its newest KeepPerEnvironment kept
// before the new one, and what the promotion gate reads (the newest verified record of each Environment) is the
// same, plus the new one.
func TestAnArtifactAtTheCapTakesANewRecord(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	repo := ocitest.Repo(reg, "kokumi/team-a/shop")
	digest := pushArtifact(t, repo, "v1")
	a := recordtest.NewSigner(t)
	at := func(env string, i int) record.Predicate {
		p := predicate("c1")
		p.Environment, p.Time = env, p.Time.Add(time.Duration(i)*time.Minute)
		return p
	}
	// The attestation image as 1,000 Attaches leave it, written at once.
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	var adds []mutate.Addendum
	for i := range 1000 {
		env := "prod"
		if i%100 == 0 {
			env = "staging"
		}
		envelope, err := record.Envelope(ctx, repo, digest, a, at(env, i))
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.Addendum{Layer: static.NewLayer(envelope, record.MediaTypeEnvelope), MediaType: record.MediaTypeEnvelope,
			Annotations: map[string]string{record.AnnotationSignature: "", record.AnnotationPredicateType: record.PredicateType}})
	}
	full, err := mutate.Append(img, adds...)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := record.AttestationTag(digest)
	ref, err := name.ParseReference(repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, full); err != nil {
		t.Fatal(err)
	}
	st := &record.Store{Client: &oci.Client{}}
	keys := trust(t, a)
	newest := func(rs []record.Record, env string) string {
		for i := len(rs) - 1; i >= 0; i-- {
			if rs[i].Verified && rs[i].Predicate.Environment == env {
				return rs[i].Digest
			}
		}
		return ""
	}
	before := records(t, st, repo, digest, keys)
	if len(before) != 1000 {
		t.Fatalf("the artifact holds %d records, want 1000", len(before))
	}

	// The 1,001st.
	added, err := st.Attach(ctx, repo, digest, a, at("prod", 2000))
	if err != nil {
		t.Fatalf("an artifact holding 1,000 records refused the next: %v", err)
	}
	after := records(t, st, repo, digest, keys)
	count := map[string]int{}
	for _, r := range after {
		if !r.Verified {
			t.Errorf("record %s does not verify after compaction: %s", r.Digest, r.Problem)
		}
		count[r.Predicate.Environment]++
	}
	if want := map[string]int{"prod": record.KeepPerEnvironment + 1, "staging": 10}; fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("the artifact holds %v records by Environment, want %v", count, want)
	}
	if got := newest(after, "prod"); got != added {
		t.Errorf("the newest record of prod is %s, want the one just attached, %s", got, added)
	}
	if got, want := newest(after, "staging"), newest(before, "staging"); got != want {
		t.Errorf("the newest record of staging is %s, was %s before compaction", got, want)
	}
	// The records kept are the newest, in their order.
	var prod []string
	for _, r := range before {
		if r.Predicate.Environment == "prod" {
			prod = append(prod, r.Digest)
		}
	}
	prod = append(prod[len(prod)-record.KeepPerEnvironment:], added)
	var keptProd []string
	for _, r := range after {
		if r.Predicate.Environment == "prod" {
			keptProd = append(keptProd, r.Digest)
		}
	}
	if fmt.Sprint(keptProd) != fmt.Sprint(prod) {
		t.Errorf("prod keeps %v, want its newest %d in order and the new one: %v", keptProd, record.KeepPerEnvironment, prod)
	}
}
