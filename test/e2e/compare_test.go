//go:build e2e

package e2e

import (
	"context"
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

// The per-cluster comparison's fleet: the edge Environment selects its eight members for the
// scenario, four of them in the canary wave and four in the baseline.
var (
	wideCanary   = []string{"edge-1", "wide-1", "wide-2", "wide-3"}
	wideBaseline = []string{"edge-2", "edge-3", "wide-4", "wide-5"}
)

// perClusterCompareHalts rolls two releases out to a canary of four members, judged by a
// per-cluster check against the four members that still run the release before: a global
// incident (every member's error rate up) lets the first on; the second, worse on edge-1
// alone, halts, naming edge-1 and its rate, within interval × runs + 30 s.
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
	cleanup := widePolicy(t, string(policy))
	release := func(message string) {
		kubectl(t, "patch", "-n", tenant, "product", sandbox.DemoProduct, "--type=merge",
			"-p", fmt.Sprintf(`{"spec":{"render":{"helm":{"values":{"ui":{"message":%q}}}}}}`, message))
	}
	joined := time.Now()
	before := waitServing(t, serving, "the wide members join at the release that runs", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 8, 8)
	}).DeepCopy()
	t.Logf("the Environment's eight members Deployed %s after it selected them", time.Since(joined).Round(100*time.Millisecond))

	// A global incident: all eight members at 20%. The canary is no worse than the baseline:
	// the release reaches the baseline's four.
	set("0.2", wideCanary...)
	set("0.2", wideBaseline...)
	release("A release during a global incident")
	passed := waitServing(t, serving, "the release reaches every member past the comparison", func(s *v1.Serving) error {
		if err := expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 8, 8); err != nil {
			return err
		}
		if s.Status.Revision == before.Status.Revision {
			return fmt.Errorf("still at the release before")
		}
		if r := s.Status.Rollout; r == nil || len(r.Verifications) != 1 || r.Verifications[0].Phase != v1.VerificationPassed || r.Verifications[0].Checked != 8 {
			return fmt.Errorf("status.rollout %+v", r)
		}
		return nil
	})
	good, goodPrep := passed.Status.Revision, passed.Status.Rollout.Preparation
	t.Logf("passed during the global incident: %s", passed.Status.Rollout.Verifications[0].Message)

	// The next release is worse on edge-1 alone: 30% against 1% on the other three canary
	// members and on the baseline.
	set("0.01", wideCanary...)
	set("0.01", wideBaseline...)
	set("0.3", "edge-1")
	release("A release worse on the canary")
	released := time.Now()
	reached := map[string]string{}
	var healthySince time.Time
	s := waitServing(t, serving, "the comparison halts the roll-out", func(s *v1.Serving) error {
		secondWaveReached(t, good, reached, wideBaseline...)
		if r := s.Status.Rollout; healthySince.IsZero() && r != nil && r.Preparation != goodPrep && len(r.Waves) > 0 && r.Waves[0].Healthy == int32(len(wideCanary)) {
			healthySince = time.Now()
		}
		if c := readyCondition(s); c == nil || c.Reason != v1.ReasonRolloutHalted {
			return fmt.Errorf("Ready %s", readyMessage(s))
		}
		return nil
	})
	halted := time.Now()
	v := s.Status.Rollout.Verifications[0]
	if healthySince.IsZero() { // the canary's health went unseen: count from the release, stricter
		healthySince = released
	}
	took := halted.Sub(healthySince)
	t.Logf("halted %s after the canary was healthy (%s after the release), after %d runs: %s", took.Round(100*time.Millisecond), halted.Sub(released).Round(100*time.Millisecond), v.Runs, v.Message)
	if bound := time.Duration(v.Runs)*2*time.Second + 30*time.Second; took > bound {
		t.Errorf("halted %s after the canary was healthy, past interval × runs + 30 s (%s)", took.Round(100*time.Millisecond), bound)
	}
	if v.Phase != v1.VerificationFailed || v.AtFault != 1 || len(v.Clusters) != 8 || v.Clusters[0].Cluster != "edge-1" || v.Clusters[0].Value != "0.3" ||
		!strings.Contains(v.Message, "1 of 4 clusters of the wave at fault: edge-1 (0.3)") {
		t.Errorf("verification %+v", v)
	}
	if len(reached) != 0 {
		t.Errorf("the release worse on the canary reached the second wave: %v", reached)
	}

	cleanup()
	waitServing(t, serving, "without the policy the release reaches the edge members", func(s *v1.Serving) error {
		return expectReady(s, metav1.ConditionTrue, v1.ReasonDeployed, 3, 3)
	})
	eventually(t, settle, "the wide members' Applications are deleted", func(context.Context) error {
		if apps := applications(t); len(apps) != 3 {
			return fmt.Errorf("%d Applications, want 3: %v", len(apps), apps)
		}
		return nil
	})
}

// widePolicy registers wideMembers, labels the eight members of wideCanary and wideBaseline
// wideLabel=wide and those of wideCanary ring=canary, and has the edge Environment select them
// with the rollout policy (a merge patch of its spec.rollout). The cleanup it returns, which the
// test's end runs too, has the Environment select its own members again without a policy, then
// removes the labels.
func widePolicy(t *testing.T, policy string) (cleanup func()) {
	ctx := context.Background()
	for _, name := range wideMembers {
		must(t, fleet.RegisterCluster(ctx, fleet.Member(name), map[string]string{wideLabel: "wide"}))
	}
	labelClusters(t, wideLabel+"=wide", sandbox.DefaultMembers...)
	labelClusters(t, "ring=canary", wideCanary...)
	var rollout map[string]any
	must(t, json.Unmarshal([]byte(policy), &rollout))
	rollout["spec"].(map[string]any)["clusterSelector"] = map[string]any{"matchLabels": map[string]any{sandbox.EnvironmentLabel: nil, wideLabel: "wide"}}
	patch, err := json.Marshal(rollout)
	must(t, err)
	kubectl(t, "patch", "-n", tenant, "environment", sandbox.DemoEnvironment, "--type=merge", "-p", string(patch))
	cleaned := false
	cleanup = func() {
		if cleaned {
			return
		}
		cleaned = true
		kubectl(t, "patch", "-n", tenant, "environment", sandbox.DemoEnvironment, "--type=json", "-p",
			fmt.Sprintf(`[{"op":"replace","path":"/spec/clusterSelector","value":{"matchLabels":{%q:%q}}},{"op":"remove","path":"/spec/rollout"}]`,
				sandbox.EnvironmentLabel, sandbox.DemoEnvironment))
		labelClusters(t, "ring-", wideCanary...)
		labelClusters(t, wideLabel+"-", sandbox.DefaultMembers...)
	}
	t.Cleanup(cleanup)
	return cleanup
}

// labelClusters applies label (KEY=VALUE, or KEY- to remove it) to the Clusters named, with
// kubectl.
func labelClusters(t *testing.T, label string, names ...string) {
	kubectl(t, append(append([]string{"label", "cluster"}, names...), label, "--overwrite")...)
}
