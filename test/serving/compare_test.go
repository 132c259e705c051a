package serving

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// fleetPrometheus answers /api/v1/query as Prometheus does, the error rate of the cluster its
// query names (cluster="…"): rates holds each cluster's; a cluster of blips answers 0.5 once,
// its next request.
type fleetPrometheus struct {
	mu    sync.Mutex
	rates map[string]string
	blips map[string]bool
	asked map[string]int
}

func newFleetPrometheus(t *testing.T) (*fleetPrometheus, string) {
	p := &fleetPrometheus{rates: map[string]string{}, blips: map[string]bool{}, asked: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		_, rest, ok := strings.Cut(q, `cluster="`)
		cluster, _, _ := strings.Cut(rest, `"`)
		if r.URL.Path != "/api/v1/query" || !ok || cluster == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprint(w, `{"status":"error","errorType":"bad_data","error":"no cluster in the query"}`)
			return
		}
		p.mu.Lock()
		rate := p.rates[cluster]
		if rate == "" {
			rate = "0.01"
		}
		if p.blips[cluster] {
			rate, p.blips[cluster] = "0.5", false
		}
		p.asked[cluster]++
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"cluster":%q},"value":[%d.781,"%s"]}]}}`,
			cluster, time.Now().Unix(), rate)
	}))
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *fleetPrometheus) set(rate string, clusters ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range clusters {
		p.rates[c] = rate
	}
}

func (p *fleetPrometheus) blip(cluster string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blips[cluster] = true
}

func (p *fleetPrometheus) blipped(cluster string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.blips[cluster]
}

// noWorseThanTheBaseline is the comparison docs/rollouts.md shows: each canary cluster's error
// rate at most 1.5 times the baseline's worst (and a floor); without a baseline (the first
// release), the canary's own rate below 5%.
const noWorseThanTheBaseline = `baseline.size() == 0 ? wave.all(c, c.value < 0.05) : wave.all(c, c.value <= 1.5 * math.greatest(baseline.map(b, b.value)) + 0.001)`

// A per-cluster check compares the canary with the clusters still on the release before: a
// global incident (both worse) and a one-run blip pass; one canary cluster worse halts the
// roll-out, naming it and its rate.
func TestRolloutAPerClusterCheckComparesTheCanaryWithTheBaseline(t *testing.T) {
	f := newFixture(t)
	prom, url := newFleetPrometheus(t)
	p := canaryThenRest(0, v1.RolloutHalt)
	p.Waves[0].Verify = []v1.Verification{{Name: "error-rate", Count: 2, Interval: &metav1.Duration{Duration: time.Second}, PerCluster: true,
		Failures: &v1.FailureWindow{Count: 2, Of: 3}, Compare: noWorseThanTheBaseline,
		HTTP: &v1.HTTPVerification{URL: url + `/api/v1/query?query=sum(rate(http_requests_total{code=~"5..",cluster="${cluster}",ring="${label:ring}"}[5m]))`,
			SuccessCondition: `response.status == 200 && response.body.status == "success"`}}}
	f.setRollout(p)
	var canaries, rest []string
	for i := 1; i <= 4; i++ {
		canaries = append(canaries, fmt.Sprintf("pc-canary%d-%s", i, f.ns))
		rest = append(rest, fmt.Sprintf("pc-rest%d-%s", i, f.ns))
		f.ringCluster(canaries[i-1], "canary", true)
		f.ringCluster(rest[i-1], "", true)
	}
	one := f.preparation("podinfo-edge-1", "podinfo", false)
	two := f.preparation("podinfo-edge-2", "podinfo", false)
	three := f.preparation("podinfo-edge-3", "podinfo", false)
	f.order("edge", one.Name)

	// The first release: no cluster runs one before it, so no baseline; a healthy canary passes.
	f.deployAll(one, canaries, rest)
	v := f.serving().Status.Rollout.Verifications
	if len(v) != 1 || v[0].Phase != v1.VerificationPassed || v[0].Checked != 4 || !strings.Contains(v[0].Message, "no baseline") {
		t.Fatalf("verifications %+v", v)
	}

	// A global incident: every cluster, canary and baseline, at 20%; and one run of one canary
	// cluster at 50%, a blip: neither halts, the rest gets two.
	prom.set("0.2", append(canaries, rest...)...)
	prom.blip(canaries[1])
	f.promote(two.Name)
	f.deployAll(two, canaries, rest)
	if !prom.blipped(canaries[1]) {
		t.Fatal("the blip was never asked")
	}
	f.eventually("the verification of two passed, the blip not counted", func() error {
		r := f.serving().Status.Rollout
		if r == nil || r.Preparation != two.Name || len(r.Verifications) != 1 {
			return fmt.Errorf("status.rollout %+v", r)
		}
		if v := r.Verifications[0]; v.Phase != v1.VerificationPassed || v.Failures != 0 || v.Checked != 8 || !strings.Contains(v.Message, "compare holds") {
			return fmt.Errorf("verification %+v", v)
		}
		return nil
	})

	// The records of two say what the check measured, cluster by cluster.
	f.eventually("the canary's record of two carries the per-cluster answers", func() error {
		for _, r := range f.attachedRecords(two) {
			for _, e := range r.Predicate.Verifications {
				if r.Verified && r.Predicate.Wave == "canary" && e.Name == "error-rate" && e.Checked == 8 && len(e.Clusters) == 8 &&
					!e.Clusters[0].Baseline && e.Clusters[7].Baseline && e.Clusters[7].Value == "0.2" {
					return nil
				}
			}
		}
		return fmt.Errorf("records %+v", f.attachedRecords(two))
	})

	// Three makes one canary cluster worse, 30% against the baseline's 20%·1.5: the roll-out
	// halts, naming it and its rate; the rest keeps two.
	prom.set("0.01", append(canaries, rest...)...)
	prom.set("0.3", canaries[2])
	f.promote(three.Name)
	f.targets(three.Spec.Artifact.Digest, canaries...)
	healthy := time.Now()
	f.healthy(three.Spec.Artifact.Digest, canaries...)
	s := f.ready(v1.ReasonRolloutHalted, "halted in wave canary: it failed on verification error-rate of wave canary")
	took := time.Since(healthy)
	got := s.Status.Rollout.Verifications[0]
	// Within interval × runs + 30 s of the canary being healthy.
	if bound := time.Duration(got.Runs)*time.Second + 30*time.Second; took > faults.Patience(bound) {
		t.Errorf("halted %s after the canary was healthy, past %s", took, faults.Patience(bound))
	}
	t.Logf("halted %s after the canary was healthy, after %d runs", took.Round(100*time.Millisecond), got.Runs)
	if got.Phase != v1.VerificationFailed || got.AtFault != 1 || got.Checked != 8 || len(got.Clusters) != 8 ||
		got.Clusters[0].Cluster != canaries[2] || !got.Clusters[0].AtFault || got.Clusters[0].Value != "0.3" ||
		!strings.Contains(got.Message, "1 of 4 clusters of the wave at fault: "+canaries[2]+" (0.3)") ||
		!strings.Contains(got.Message, "the baseline 4 clusters, value 0.01") {
		t.Fatalf("verification %+v", got)
	}
	for _, c := range got.Clusters[4:] {
		if !c.Baseline || !strings.HasPrefix(c.Cluster, "pc-rest") {
			t.Errorf("baseline %+v", got.Clusters)
		}
	}
	f.stillTargets(two.Spec.Artifact.Digest, rest...)
}
