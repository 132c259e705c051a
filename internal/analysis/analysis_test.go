package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// prom is a Prometheus instant-vector answer of one sample, parsed as JSON.
func prom(value string) any {
	var body any
	if err := json.Unmarshal([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"`+value+`"]}]}}`), &body); err != nil {
		panic(err)
	}
	return body
}

func answers(baseline bool, prefix string, values ...string) []Answer {
	out := make([]Answer, len(values))
	for i, v := range values {
		out[i] = Answer{Cluster: fmt.Sprintf("%s%d", prefix, i+1), Baseline: baseline, Status: 200, Body: prom(v), Passed: true,
			Labels: map[string]string{"region": "eu"}}
	}
	return out
}

// noWorseThanBaseline is the documented comparison: the canary's error rate no worse than 1.5
// times the baseline's worst (and a floor, so that a baseline of 0 does not fail any error).
const noWorseThanBaseline = `wave.all(c, c.value <= 1.5 * math.greatest(baseline.map(b, b.value)) + 0.001)`

func TestJudgeComparesTheWaveWithTheBaseline(t *testing.T) {
	env, err := CompareEnv()
	if err != nil {
		t.Fatal(err)
	}
	noAnswer := Answer{Cluster: "w2", Error: "dial tcp: connection refused"}
	http500 := Answer{Cluster: "w3", Status: 500}
	for _, tc := range []struct {
		name           string
		wave, baseline []Answer
		expr           string
		passed         bool
		atFault        []string
		message        []string
	}{
		{name: "a healthy canary passes", wave: answers(false, "w", "0.01", "0.012", "0.009", "0.011"), baseline: answers(true, "b", "0.01", "0.011", "0.01", "0.012"),
			expr: noWorseThanBaseline, passed: true, message: []string{"compare holds", "the wave 4 clusters, values 0.009 to 0.012", "the baseline 4 clusters, values 0.01 to 0.012"}},
		{name: "one canary cluster worse halts and is named with its value", wave: answers(false, "w", "0.01", "0.2", "0.009", "0.011"), baseline: answers(true, "b", "0.01", "0.011", "0.01", "0.012"),
			expr: noWorseThanBaseline, atFault: []string{"w2"}, message: []string{"1 of 4 clusters of the wave at fault: w2 (0.2)"}},
		{name: "a global incident, wave and baseline worse together, passes", wave: answers(false, "w", "0.2", "0.21", "0.19", "0.2"), baseline: answers(true, "b", "0.2", "0.22", "0.2", "0.21"),
			expr: noWorseThanBaseline, passed: true},
		{name: "an aggregate that fails names the wave as a whole", wave: answers(false, "w", "0.3", "0.01"), baseline: answers(true, "b", "0.1"),
			expr: `wave.map(c, c.value).exists(v, v > 0.2) == false || wave.size() == 1`, message: []string{"compare does not hold of the wave as a whole"}},
		{name: "an answer that fails successCondition is at fault without compare", wave: []Answer{answers(false, "w", "0.01")[0], noAnswer, http500},
			atFault: []string{"w2", "w3"}, message: []string{"2 of 3 clusters of the wave at fault: w2 (no answer: dial tcp: connection refused), w3 (HTTP 500)"}},
		{name: "a baseline answer that fails successCondition is left out", wave: answers(false, "w", "0.01"), baseline: append(answers(true, "b", "0.01"), Answer{Cluster: "b9", Baseline: true, Status: 503}),
			expr: noWorseThanBaseline, passed: true, message: []string{"1 left out"}},
		{name: "a missing value fails the run, saying why", wave: []Answer{{Cluster: "w1", Status: 200, Passed: true}}, baseline: answers(true, "b", "0.01"),
			expr: noWorseThanBaseline, atFault: []string{"w1"}, message: []string{"w1 (HTTP 200)", "compare could not be evaluated (no such key: value)"}},
		{name: "an empty baseline is said", wave: answers(false, "w", "0.01"), expr: `baseline.size() == 0 || ` + noWorseThanBaseline, passed: true,
			message: []string{"no baseline"}},
		{name: "labels are seen", wave: answers(false, "w", "0.01"), expr: `wave.all(c, c.labels.region == "eu" && c.status == 200 && c.cluster.startsWith("w"))`, passed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prg, err := Compile(env, tc.expr)
			if tc.expr == "" {
				prg, err = nil, nil
			}
			if err != nil {
				t.Fatal(err)
			}
			v := Judge(context.Background(), prg, tc.wave, tc.baseline, 0)
			var faults []string
			for _, r := range v.Clusters {
				if r.AtFault {
					faults = append(faults, r.Cluster)
				}
			}
			if v.Passed != tc.passed || strings.Join(faults, ",") != strings.Join(tc.atFault, ",") || int(v.AtFault) != len(tc.atFault) ||
				int(v.Checked) != len(tc.wave)+len(tc.baseline) {
				t.Fatalf("verdict %+v, at fault %v", v, faults)
			}
			for _, m := range tc.message {
				if !strings.Contains(v.Message, m) {
					t.Errorf("message %q lacks %q", v.Message, m)
				}
			}
		})
	}
}

func TestJudgeBoundsItsResultsAndItsMessage(t *testing.T) {
	env, _ := CompareEnv()
	prg, err := Compile(env, `wave.all(c, c.value < 0.1)`)
	if err != nil {
		t.Fatal(err)
	}
	values := make([]string, 40)
	for i := range values {
		values[i] = "0.5"
	}
	v := Judge(context.Background(), prg, answers(false, "a-long-cluster-name-of-the-fleet-", values...), answers(true, "b", values...), 7)
	if v.Passed || v.AtFault != 40 || v.Checked != 80 || len(v.Clusters) != v1.MaxClusterResults || len(v.Message) > MaxMessage ||
		!strings.Contains(v.Message, "… and 32 more") {
		t.Fatalf("verdict %+v (%d bytes)", v, len(v.Message))
	}
}

func TestACompareThatCostsTooMuchFailsTheRun(t *testing.T) {
	env, _ := CompareEnv()
	prg, err := Compile(env, `wave.all(a, wave.all(b, wave.all(c, baseline.all(d, baseline.all(e, a.cluster + b.cluster + c.cluster != d.cluster + e.cluster)))))`)
	if err != nil {
		t.Fatal(err)
	}
	values := make([]string, 60)
	for i := range values {
		values[i] = "0.01"
	}
	start := time.Now()
	v := Judge(context.Background(), prg, answers(false, "w", values...), answers(true, "b", values...), 0)
	if v.Passed || !strings.Contains(v.Message, "compare could not be evaluated") || !strings.Contains(v.Message, "cost") {
		t.Fatalf("verdict %+v", v)
	}
	t.Logf("refused in %s", time.Since(start))
}

func TestCompileRefusesWhatIsNotABool(t *testing.T) {
	env, _ := CompareEnv()
	for expr, want := range map[string]string{
		`wave.size()`:         "gives int, not a bool",
		`wave.all(c, c. )`:    "does not compile",
		`nonesuch.size() > 0`: "undeclared reference",
	} {
		if _, err := Compile(env, expr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", expr, err, want)
		}
	}
}

func TestPrometheusValue(t *testing.T) {
	var scalar, matrix any
	_ = json.Unmarshal([]byte(`{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.25"]}}`), &scalar)
	_ = json.Unmarshal([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`), &matrix)
	for _, tc := range []struct {
		body any
		want float64
		ok   bool
	}{
		{prom("0.05"), 0.05, true}, {prom("NaN"), 0, false}, {prom("+Inf"), math.Inf(1), true}, {scalar, 0.25, true}, {matrix, 0, false}, {nil, 0, false},
		{map[string]any{"data": "x"}, 0, false},
	} {
		got, ok := PrometheusValue(tc.body)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%v: %v %v, want %v %v", tc.body, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPlaceholders(t *testing.T) {
	vars := Vars{Cluster: "edge-1", Labels: map[string]string{"region": "eu west", "kokumi.dev/ring": "canary"}, Environment: "prod", Order: "podinfo",
		Preparation: "podinfo-prod-3", Digest: "sha256:abc"}
	for _, tc := range []struct {
		in, want   string
		perCluster bool
		problem    string
	}{
		{in: `http://p/api/v1/query?query=rate(x{cluster="${cluster}",region="${label:region}"}[5m])`, perCluster: true,
			want: `http://p/api/v1/query?query=rate(x{cluster="edge-1",region="eu+west"}[5m])`},
		{in: "${environment}/${order}/${preparation}/${digest}/${label:kokumi.dev/ring}/${label:none}", perCluster: true, want: "prod/podinfo/podinfo-prod-3/sha256%3Aabc/canary/"},
		{in: "no placeholder", want: "no placeholder"},
		{in: "${digest}", want: "sha256%3Aabc"},
		{in: "${cluster}", problem: "${cluster} is a cluster's: set perCluster: true"},
		{in: "${label:region}", problem: "a cluster's"},
		{in: "${clusters}", perCluster: true, problem: "${clusters} is not a placeholder Kokumi knows: write one of ${cluster}"},
		{in: "${label:}", perCluster: true, problem: "does not name a label key"},
		{in: "${{cluster}}", perCluster: true, problem: "not a placeholder"},
		{in: "x ${cluster", perCluster: true, problem: `"${cluster" is not closed`},
	} {
		err := CheckPlaceholders(tc.in, tc.perCluster)
		switch {
		case tc.problem != "":
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("%s: %v, want %q", tc.in, err, tc.problem)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", tc.in, err)
		}
		if got := Expand(tc.in, vars, url.QueryEscape); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestSustainedCountsAFailureOnlyOnceItHolds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	every := func(runs string) []time.Time {
		at := make([]time.Time, len(runs))
		for i := range at {
			at[i] = t0.Add(time.Duration(i) * 30 * time.Second)
		}
		return at
	}
	for _, tc := range []struct {
		name string
		spec v1.Verification
		runs string // P passed, F failed, one run each 30 s
		// counts marks the runs whose failure counts: "." no, "x" yes.
		counts string
		recent string
	}{
		{name: "without a rule every failure counts", runs: "PFPF", counts: ".x.x"},
		{name: "2 of 3: a one-run blip does not count", spec: v1.Verification{Failures: &v1.FailureWindow{Count: 2, Of: 3}}, runs: "PPFPPP", counts: "......", recent: "PPP"},
		{name: "2 of 3: two failures apart count", spec: v1.Verification{Failures: &v1.FailureWindow{Count: 2, Of: 3}}, runs: "FPFPP", counts: "..x..", recent: "FPP"},
		{name: "2 of 3: failures three apart do not", spec: v1.Verification{Failures: &v1.FailureWindow{Count: 2, Of: 3}}, runs: "FPPFPPF", counts: ".......", recent: "PPF"},
		{name: "3 of 3: a sustained failure counts each run", spec: v1.Verification{Failures: &v1.FailureWindow{Count: 3, Of: 3}}, runs: "FFFF", counts: "..xx", recent: "FFF"},
		{name: "failFor 1m: counts from the run a minute after the first failure", spec: v1.Verification{FailFor: &metav1.Duration{Duration: time.Minute}},
			runs: "FFFF", counts: "..xx"},
		{name: "failFor 1m: a pass starts the clock again", spec: v1.Verification{FailFor: &metav1.Duration{Duration: time.Minute}},
			runs: "FFPFFF", counts: ".....x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res v1.VerificationResult
			got := ""
			for i, at := range every(tc.runs) {
				passed := tc.runs[i] == 'P'
				if Sustained(&tc.spec, &res, passed, at) {
					got += "x"
				} else {
					got += "."
				}
				if passed != (res.FailingSince == nil) {
					t.Fatalf("run %d: failingSince %v", i, res.FailingSince)
				}
			}
			if got != tc.counts || res.Recent != tc.recent {
				t.Fatalf("counts %s, want %s; recent %q, want %q", got, tc.counts, res.Recent, tc.recent)
			}
		})
	}
}
