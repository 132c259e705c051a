package sourcesig_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/oci/ocitest"
	"github.com/kokumi-dev/kokumi/internal/sourcesig"
	"github.com/kokumi-dev/kokumi/internal/sourcesig/sigtest"
)

// BenchmarkVerifyARender measures what spec.verify adds to a render of a chart and two images
// (`make bench-verify`), against a registry on loopback: "first-ms" is the first verification
// of the three inputs (the signatures read and checked), and each iteration is the check of the
// unchanged, already verified inputs that every later render makes (one request per input for
// its signature tag, the rest from the cache), reported as "p50-ms" and "p95-ms".
func BenchmarkVerifyARender(b *testing.B) {
	reg := ocitest.Start(b)
	key := sigtest.NewKey(b)
	keys := trusted(b, key)
	type input struct{ repository, digest string }
	chart := ocitest.Repo(reg, "charts/app")
	inputs := []input{{chart, ocitest.PushChart(b, chart, "1.0.0", "app", "1.0.0", ocitest.Chart(b, "app", map[string]string{"templates/a.yaml": "a"}))}}
	for _, img := range []string{"app", "sidecar"} {
		repo := ocitest.Repo(reg, img)
		inputs = append(inputs, input{repo, ocitest.PushImage(b, repo+":1", 2)})
	}
	for _, in := range inputs {
		sigtest.Sign(b, "cosign", key, in.repository+"@"+in.digest)
	}
	c := &oci.Client{}
	ctx := context.Background()
	var v sourcesig.Verifier
	verifyAll := func() {
		for _, in := range inputs {
			r, err := v.Verify(ctx, c, "input", in.repository, in.digest, keys)
			if err != nil || !r.Verified() {
				b.Fatalf("verify %s@%s: %+v, %v", in.repository, in.digest, r, err)
			}
		}
	}
	start := time.Now()
	verifyAll()
	first := time.Since(start)
	fetches := v.Fetches()
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		verifyAll()
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	if v.Fetches() != fetches {
		b.Fatalf("unchanged inputs were read again: %d signature manifests, want %d", v.Fetches(), fetches)
	}
	slices.Sort(times)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(first), "first-ms")
	b.ReportMetric(ms(times[len(times)/2]), "p50-ms")
	b.ReportMetric(ms(times[(len(times)*95)/100]), "p95-ms")
}
