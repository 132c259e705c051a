package verify

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// A per-cluster check asks each cluster of the wave and of the baseline, its url with the
// cluster's placeholders, at most ClusterRequests a run, and names the cluster at fault.
func TestAPerClusterCheckAsksEachClusterWithinItsBound(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]string{} // cluster → region asked
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.URL.Query().Get("cluster")
		mu.Lock()
		asked[c] = r.URL.Query().Get("region")
		mu.Unlock()
		rate := "0.01"
		if c == "w2" {
			rate = "0.3"
		}
		_, _ = fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"%s"]}]}}`, rate)
	}))
	t.Cleanup(srv.Close)
	r := &Runner{HTTP: &HTTPRunner{Client: loopback.Client(), ClusterRequests: 8}}
	st := newStepper(t, r)
	st.facts.Labels = map[string]map[string]string{}
	for i := 1; i <= 6; i++ {
		for _, p := range []string{"w", "b"} {
			name := fmt.Sprintf("%s%d", p, i)
			st.facts.Labels[name] = map[string]string{"region": "eu-" + name}
			if p == "w" {
				st.facts.Clusters = append(st.facts.Clusters, name)
			} else {
				st.facts.Baseline = append(st.facts.Baseline, name)
			}
		}
	}
	spec := []v1.Verification{{Name: "errors", PerCluster: true, Interval: &metav1.Duration{Duration: 200 * time.Millisecond},
		Compare: `wave.all(c, c.value <= 1.5 * math.greatest(baseline.map(b, b.value)))`,
		HTTP:    &v1.HTTPVerification{URL: srv.URL + "/api/v1/query?cluster=${cluster}&region=${label:region}", SuccessCondition: "response.status == 200"}}}
	res, _ := st.step(spec, "canary", nil)
	v := res[0]
	if v.Phase != v1.VerificationFailed || v.Checked != 8 || v.AtFault != 1 || len(v.Clusters) != 8 || v.Clusters[0].Cluster != "w2" ||
		!v.Clusters[0].AtFault || v.Clusters[0].Value != "0.3" || !strings.Contains(v.Message, "1 of 4 clusters of the wave at fault: w2 (0.3)") ||
		!strings.Contains(v.Message, "4 more clusters not asked (--verify-cluster-requests)") {
		t.Fatalf("result %+v", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 8 || asked["w2"] != "eu-w2" || asked["b1"] != "eu-b1" {
		t.Errorf("asked %v", asked)
	}
}

// The placeholders a verification cannot have are refused with the field.
func TestProblemRefusesUnknownPlaceholdersAndABadCompare(t *testing.T) {
	env := &v1.Environment{Spec: v1.EnvironmentSpec{Verify: []v1.Verification{{Name: "ok", HTTP: &v1.HTTPVerification{URL: "http://p/?q=${digest}", SuccessCondition: "true"}}}}}
	if p := Problem(env); p != "" {
		t.Fatalf("problem %q", p)
	}
	env.Spec.Verify = append(env.Spec.Verify, v1.Verification{Name: "per", PerCluster: true, HTTP: &v1.HTTPVerification{URL: "http://p/?q=${cluster_name}", SuccessCondition: "true"}})
	if p := Problem(env); !strings.Contains(p, "spec.verify[1].http.url (per): ${cluster_name} is not a placeholder Kokumi knows") {
		t.Errorf("problem %q", p)
	}
	env.Spec.Verify[1].HTTP.URL = "http://p/?q=${cluster}"
	env.Spec.Verify[1].Compare = "wave.size()"
	if p := Problem(env); !strings.Contains(p, "spec.verify[1].compare (per): it gives int, not a bool") {
		t.Errorf("problem %q", p)
	}
}

// Twenty healthy runs, each cluster's error rate within ±30% of 1%, wave and baseline alike:
// the documented comparison fails none of them.
func TestTwentyHealthyRunsOfAPerClusterCheckNeverFail(t *testing.T) {
	var mu sync.Mutex
	noise := rand.New(rand.NewPCG(41, 41))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		rate := 0.01 * (0.7 + 0.6*noise.Float64())
		mu.Unlock()
		_, _ = fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"%.5f"]}]}}`, rate)
	}))
	t.Cleanup(srv.Close)
	r := &Runner{HTTP: &HTTPRunner{Client: loopback.Client()}}
	st := newStepper(t, r)
	st.facts.Clusters = []string{"w1", "w2", "w3", "w4"}
	st.facts.Baseline = []string{"b1", "b2", "b3", "b4"}
	spec := []v1.Verification{{Name: "errors", PerCluster: true, Count: 20, Interval: &metav1.Duration{Duration: 20 * time.Millisecond},
		Compare: `baseline.size() == 0 ? wave.all(c, c.value < 0.05) : wave.all(c, c.value <= 1.5 * math.greatest(baseline.map(b, b.value)) + 0.001)`,
		HTTP:    &v1.HTTPVerification{URL: srv.URL + "/api/v1/query?query=x{cluster=\"${cluster}\"}", SuccessCondition: "response.status == 200"}}}
	var res []v1.VerificationResult
	for res == nil || res[0].Phase == v1.VerificationRunning {
		var recheck time.Duration
		res, recheck = st.step(spec, "canary", res)
		time.Sleep(recheck)
	}
	if v := res[0]; v.Phase != v1.VerificationPassed || v.Passes != 20 || v.Failures != 0 || v.Runs != 20 || v.Checked != 8 {
		t.Fatalf("result %+v", v)
	}
}
