//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/dev/sandbox"
)

// perClusterCompareHalts rolls two releases out to the canary edge-1, judged by a per-cluster
// check against edge-2 and edge-3, which still run the release before: a global incident (every
// member's error rate up) lets the first on; the second, worse on edge-1 alone, halts, naming
// edge-1 and its rate, within interval × runs + 30 s.
func perClusterCompareHalts(t *testing.T) {
	var mu sync.Mutex
	rates := map[string]string{}
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, rest, _ := strings.Cut(r.URL.Query().Get("query"), `cluster="`)
		cluster, _, _ := strings.Cut(rest, `"`)
		mu.Lock()
		rate := rates[cluster]
		mu.Unlock()
		if rate == "" {
			rate = "0.01"
		}
		_, _ = fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"cluster":%q},"value":[%d,"%s"]}]}}`,
			cluster, time.Now().Unix(), rate)
	}))
	defer prom.Close()
	set := func(rate string, clusters ...string) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range clusters {
			rates[c] = rate
		}
	}
	check := map[string]any{"name": "error-rate", "perCluster": true, "count": 2, "interval": "2s", "failures": map[string]any{"count": 2, "of": 3},
		"compare": "baseline.size() == 0 ? wave.all(c, c.value < 0.05) : wave.all(c, c.value <= 1.5 * math.greatest(baseline.map(b, b.value)) + 0.001)",
		"http": map[string]any{"url": prom.URL + `/api/v1/query?query=sum(rate(http_requests_total{code=~"5..",cluster="${cluster}"}[5m]))`,
			"successCondition": `response.status == 200 && response.body.status == "success"`}}
	policy, err := json.Marshal(map[string]any{"spec": map[string]any{"rollout": map[string]any{"waves": []any{
		map[string]any{"name": "canary", "clusterSelector": map[string]any{"matchLabels": map[string]any{"ring": "canary"}}, "verify": []any{check}},
		map[string]any{"name": "rest"},
	}}}})
	must(t, err)
	cleanup := canaryPolicy(t, string(policy))
	release := func(message string) {
		kubectl(t, "patch", "-n", tenant, "product", sandbox.DemoProduct, "--type=merge",
			"-p", fmt.Sprintf(`{"spec":{"render":{"helm":{"values":{"ui":{"message":%q}}}}}}`, message))
	}
	before := waitServing(t, serving, "the Serving stands", func(*v1.Serving) error { return nil }).DeepCopy()

	// A global incident: all three members at 20%. The canary is no worse than the baseline:
	// the release reaches edge-2 and edge-3.
	set("0.2", "edge-1", "edge-2", "edge-3")
	release("A release during a global incident")
	passed := waitServing(t, serving, "the release reaches every member past the comparison", func(s *v1.Serving) error {
		if err := expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3); err != nil {
			return err
		}
		if s.Status.Revision == before.Status.Revision {
			return fmt.Errorf("still at the release before")
		}
		if r := s.Status.Rollout; r == nil || len(r.Verifications) != 1 || r.Verifications[0].Phase != v1.VerificationPassed || r.Verifications[0].Checked != 3 {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})
	good, goodPrep := passed.Status.Revision, passed.Status.Rollout.Preparation
	t.Logf("passed during the global incident: %s", passed.Status.Rollout.Verifications[0].Message)

	// The next release is worse on edge-1 alone: 30% against the baseline's 1%.
	set("0.01", "edge-2", "edge-3")
	set("0.3", "edge-1")
	release("A release worse on the canary")
	reached := map[string]string{}
	var healthySince time.Time
	s := waitServing(t, serving, "the comparison halts the roll-out", func(s *v1.Serving) error {
		secondWaveReached(t, good, reached)
		if r := s.Status.Rollout; healthySince.IsZero() && r != nil && r.Preparation != goodPrep && len(r.Waves) > 0 && r.Waves[0].Healthy == 1 {
			healthySince = time.Now()
		}
		if c := readyCondition(s); c == nil || c.Reason != v1.ReasonRolloutHalted {
			return fmt.Errorf("Ready %s", readyMessage(s))
		}
		return nil
	})
	v := s.Status.Rollout.Verifications[0]
	t.Logf("halted %s after the canary was healthy, after %d runs: %s", time.Since(healthySince).Round(100*time.Millisecond), v.Runs, v.Message)
	if bound := time.Duration(v.Runs)*2*time.Second + 30*time.Second; !healthySince.IsZero() && time.Since(healthySince) > bound {
		t.Errorf("halted past interval × runs + 30 s (%s)", bound)
	}
	if v.Phase != v1.VerificationFailed || v.AtFault != 1 || len(v.Clusters) != 3 || v.Clusters[0].Cluster != "edge-1" || v.Clusters[0].Value != "0.3" ||
		!strings.Contains(v.Message, "1 of 1 clusters of the wave at fault: edge-1 (0.3)") {
		t.Errorf("verification %+v", v)
	}
	if len(reached) != 0 {
		t.Errorf("the release worse on the canary reached the second wave: %v", reached)
	}

	cleanup()
	waitServing(t, serving, "without the policy the release reaches every member", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3)
	})
}
