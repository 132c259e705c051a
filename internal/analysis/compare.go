package analysis

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/text"
)

// CostLimit bounds one evaluation of a verification's CEL expression (successCondition,
// compare): an expression past it fails the run, and no tenant's expression holds a worker
// longer. A compare is evaluated at most once more per cluster of the wave, to name those at
// fault.
const CostLimit = 1_000_000

// MaxMessage is the most a run's message holds.
const MaxMessage = 512

// namedAtFault is how many clusters at fault a message names, with their values.
const namedAtFault = 8

// Answer is one cluster's answer to a run of a per-cluster check.
type Answer struct {
	// Cluster asked, and its labels.
	Cluster string
	Labels  map[string]string
	// Baseline is true for a cluster still on the release before.
	Baseline bool
	// Status is the answer's HTTP status; 0 when there is none (Error says why).
	Status int
	// Body is the answer parsed as JSON, or nil.
	Body any
	// Error says why there is no answer.
	Error string
	// Passed is true when successCondition held of the answer.
	Passed bool
}

// Value is what the answer measured: the first sample of a Prometheus answer (PrometheusValue).
func (a Answer) Value() (float64, bool) { return PrometheusValue(a.Body) }

// said is what the answer measured, short, for a result: its value, else its status, else why
// there is none.
func (a Answer) said() string {
	if v, ok := a.Value(); ok {
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	if a.Status != 0 {
		return "HTTP " + strconv.Itoa(a.Status)
	}
	return text.Truncate("no answer: "+a.Error, 64)
}

// celValue is the answer as compare sees it: cluster, labels, status, body and, when the
// answer measured one, value.
func (a Answer) celValue() map[string]any {
	labels := a.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	m := map[string]any{"cluster": a.Cluster, "labels": labels, "status": int64(a.Status), "body": a.Body}
	if v, ok := a.Value(); ok {
		m["value"] = v
	}
	return m
}

// PrometheusValue is the first sample of a Prometheus query's answer (data.result of an
// instant vector's first series, or of a scalar: [time, "value"]), as a double; false when
// the body holds none.
func PrometheusValue(body any) (float64, bool) {
	data, _ := asMap(body)["data"].(map[string]any)
	var sample []any
	switch r := data["result"].(type) {
	case []any:
		if len(r) == 2 {
			if _, isSeries := r[0].(map[string]any); !isSeries {
				sample = r // a scalar or a string: [time, "value"]
				break
			}
		}
		if len(r) > 0 {
			sample, _ = asMap(r[0])["value"].([]any)
		}
	}
	if len(sample) != 2 {
		return 0, false
	}
	s, ok := sample[1].(string)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// CompareEnv is the CEL environment of a compare: the lists wave and baseline, each element a
// map of cluster (string), labels (map of strings), status (int), body (the JSON answer, or
// null) and value (a double, present when the answer measured one); with the math extension
// (math.greatest, math.least).
func CompareEnv() (*cel.Env, error) {
	answers := cel.ListType(cel.MapType(cel.StringType, cel.DynType))
	env, err := cel.NewEnv(cel.Variable("wave", answers), cel.Variable("baseline", answers), ext.Math())
	if err != nil {
		return nil, fmt.Errorf("CEL environment of compare: %w", err)
	}
	return env, nil
}

// Compile compiles expr in env to a program that gives a bool, each evaluation bounded by
// CostLimit.
func Compile(env *cel.Env, expr string) (cel.Program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("it does not compile: %w", iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("it gives %s, not a bool", t)
	}
	p, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("it cannot run: %w", err)
	}
	return p, nil
}

// Verdict is what one run of a per-cluster check says.
type Verdict struct {
	Passed bool
	// Message names the clusters at fault with their values, and the range of the others'.
	Message string
	// Clusters are the answers, those at fault first, at most v1.MaxClusterResults.
	Clusters []v1.ClusterResult
	// Checked counts the clusters asked; AtFault those of the wave at fault.
	Checked, AtFault int32
}

// Judge says what a run of a per-cluster check says of the answers of the wave and of the
// baseline: a cluster of the wave whose answer failed successCondition is at fault; a cluster
// of the baseline whose answer did is left out of the baseline. Then compare (nil: none),
// over the rest, must hold: when it does not, each cluster of the wave it does not hold of
// alone (wave = [that cluster]) is at fault, or the wave as a whole when there is none. The
// run passes when no cluster is at fault and compare holds. skipped counts the clusters the
// run did not ask (past --verify-cluster-requests).
func Judge(ctx context.Context, compare cel.Program, wave, baseline []Answer, skipped int) Verdict {
	faults := map[string]bool{}
	var good, base []Answer
	for _, a := range wave {
		if a.Passed {
			good = append(good, a)
		} else {
			faults[a.Cluster] = true
		}
	}
	leftOut := 0
	for _, a := range baseline {
		if a.Passed {
			base = append(base, a)
		} else {
			leftOut++
		}
	}
	whole, problem := "", ""
	if compare != nil && len(good) > 0 {
		if held, err := holds(ctx, compare, good, base); err != nil || !held {
			for _, a := range good {
				if ok, err := holds(ctx, compare, []Answer{a}, base); err != nil || !ok {
					faults[a.Cluster] = true
				}
			}
			switch {
			case err != nil:
				problem = "compare could not be evaluated (" + err.Error() + ")"
			case len(faults) == 0:
				whole = "compare does not hold of the wave as a whole"
			}
		}
	}
	v := Verdict{Passed: len(faults) == 0 && whole == "" && problem == "", Checked: int32(len(wave) + len(baseline)), AtFault: int32(len(faults))}
	v.Clusters = results(wave, baseline, faults)
	v.Message = text.Truncate(message(v, wave, baseline, faults, compare != nil, text.JoinNonEmpty(whole, problem), leftOut, skipped), MaxMessage)
	return v
}

// holds evaluates compare over wave and baseline.
func holds(ctx context.Context, compare cel.Program, wave, baseline []Answer) (bool, error) {
	vars := map[string]any{"wave": celList(wave), "baseline": celList(baseline)}
	out, _, err := compare.ContextEval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("it gives %v, not a bool", out.Type())
	}
	return b, nil
}

func celList(as []Answer) []any {
	out := make([]any, len(as))
	for i, a := range as {
		out[i] = a.celValue()
	}
	return out
}

// results lists the answers for the status: the wave's at fault, the wave's others, then the
// baseline's, each by name, at most v1.MaxClusterResults.
func results(wave, baseline []Answer, faults map[string]bool) []v1.ClusterResult {
	all := make([]Answer, 0, len(wave)+len(baseline))
	all = append(append(all, wave...), baseline...)
	rank := func(a Answer) int {
		switch {
		case !a.Baseline && faults[a.Cluster]:
			return 0
		case !a.Baseline:
			return 1
		}
		return 2
	}
	sort.SliceStable(all, func(i, j int) bool {
		if ri, rj := rank(all[i]), rank(all[j]); ri != rj {
			return ri < rj
		}
		return all[i].Cluster < all[j].Cluster
	})
	out := make([]v1.ClusterResult, 0, min(len(all), v1.MaxClusterResults))
	for _, a := range all[:min(len(all), v1.MaxClusterResults)] {
		out = append(out, v1.ClusterResult{Cluster: a.Cluster, Baseline: a.Baseline, AtFault: !a.Baseline && faults[a.Cluster], Value: a.said()})
	}
	return out
}

// message says what the run found: the clusters at fault with their values, then the range of
// the values of the wave and of the baseline.
func message(v Verdict, wave, baseline []Answer, faults map[string]bool, compared bool, whole string, leftOut, skipped int) string {
	var parts []string
	if len(faults) > 0 {
		var named []string
		for _, r := range v.Clusters {
			if r.AtFault && len(named) < namedAtFault {
				named = append(named, r.Cluster+" ("+r.Value+")")
			}
		}
		s := fmt.Sprintf("%d of %d clusters of the wave at fault: %s", len(faults), len(wave), strings.Join(named, ", "))
		if n := len(faults) - len(named); n > 0 {
			s += fmt.Sprintf(" … and %d more", n)
		}
		parts = append(parts, s)
	}
	if whole != "" {
		parts = append(parts, whole)
	}
	if len(parts) == 0 && len(faults) == 0 {
		verdict := "successCondition holds of every cluster of the wave"
		if compared {
			verdict = "compare holds"
		}
		parts = append(parts, verdict)
	}
	parts = append(parts, "the wave "+spread(wave))
	if compared {
		base := "the baseline " + spread(baseline)
		if len(baseline) == 0 {
			base = "no baseline: no cluster of the Environment runs the release before"
		}
		if leftOut > 0 {
			base += fmt.Sprintf(" (%d left out: successCondition did not hold of their answers)", leftOut)
		}
		parts = append(parts, base)
	}
	if skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d more clusters not asked (--verify-cluster-requests)", skipped))
	}
	return strings.Join(parts, "; ")
}

// spread says how many clusters answered and the range of what they measured.
func spread(as []Answer) string {
	lo, hi, n := math.Inf(1), math.Inf(-1), 0
	for _, a := range as {
		if v, ok := a.Value(); ok {
			lo, hi, n = min(lo, v), max(hi, v), n+1
		}
	}
	s := fmt.Sprintf("%d clusters", len(as))
	if len(as) == 1 {
		s = "1 cluster"
	}
	switch {
	case n == 0:
		return s
	case lo == hi:
		return fmt.Sprintf("%s, value %s", s, strconv.FormatFloat(lo, 'g', 4, 64))
	}
	return fmt.Sprintf("%s, values %s to %s", s, strconv.FormatFloat(lo, 'g', 4, 64), strconv.FormatFloat(hi, 'g', 4, 64))
}
