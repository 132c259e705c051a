package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/analysis"
	"github.com/kokumi-dev/kokumi/internal/egress"
)

// MaxBody is the most of an answer's body an HTTP verification reads.
const MaxBody = 1 << 20

// maxPrograms bounds the compiled successConditions kept.
const maxPrograms = 256

// HTTPRunner sends the requests of http verifications and judges their answers.
type HTTPRunner struct {
	// Client sends the requests; nil is the default egress policy's (internal/egress: no
	// redirect, no loopback, link-local, multicast or metadata address). The controller's comes
	// from its configuration (config.Config.Egress).
	Client *http.Client
	// Workers is how many checks run at a time (Start, Read), of which one namespace's at most
	// a quarter (at least one); zero or less is DefaultHTTPWorkers.
	Workers int
	// ClusterRequests is how many requests one run of a per-cluster check sends at most (the
	// controller's --verify-cluster-requests); zero or less is DefaultClusterRequests.
	ClusterRequests int
	// Done is told of each run that ends, with its Serving's namespace and name, so that the
	// Serving reconciles then; nil tells none (the Serving looks again after PollHTTP). It must
	// not block.
	Done func(namespace, name string)

	mu         sync.Mutex
	env        *cel.Env
	compareEnv *cel.Env
	programs   map[string]cel.Program
	client     *http.Client
	// wake is when the pool dispatches again for a spread request due then; zero when no
	// timer is set.
	wake time.Time
	// The pool (pool.go): every run by its key, those waiting for a slot in order, and how
	// many run, in all and by namespace.
	runs         map[runKey]*httpRun
	queue        []*httpRun
	running      int
	perNamespace map[string]int
}

// Run sends the request and says whether successCondition holds of the answer. The message,
// which the Serving's tenants read, holds the status code and the verdict, and the answer's
// first lines only when spec.showResponse is true; they always go to the log of ctx, with the
// Location of a redirect.
func (h *HTTPRunner) Run(ctx context.Context, spec *v1.HTTPVerification) Outcome {
	o, _ := h.ask(ctx, spec, MaxBody)
	return o
}

// ask sends spec's request, reading at most limit bytes of the answer, and judges the answer
// with successCondition: the Outcome as Run says it, and the answer as a per-cluster check's
// compare sees it (its Status 0 and Error set when there is none).
func (h *HTTPRunner) ask(ctx context.Context, spec *v1.HTTPVerification, limit int64) (Outcome, analysis.Answer) {
	prg, err := h.program(spec.SuccessCondition)
	if err != nil {
		msg := "successCondition cannot be used: " + err.Error() + "; fix the Environment's http.successCondition"
		return Outcome{Message: msg}, analysis.Answer{Error: msg}
	}
	timeout := httpTimeout(spec)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	method := string(spec.Method)
	if method == "" {
		method = http.MethodGet
	}
	none := func(format string, args ...any) (Outcome, analysis.Answer) {
		msg := fmt.Sprintf(format, args...)
		return Outcome{Message: msg}, analysis.Answer{Error: msg}
	}
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(spec.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, spec.URL, body)
	if err != nil {
		return none("the url cannot be requested: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	start := time.Now()
	resp, err := h.httpClient().Do(req)
	if err != nil {
		if r := egress.Refused(err); r != nil {
			return none("%s %s: refused: %v", method, spec.URL, r)
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return none("%s %s: no answer within %s", method, spec.URL, timeout)
		}
		return none("%s %s: %v", method, spec.URL, err)
	}
	defer resp.Body.Close()
	// The status line's reason phrase is the server's to write: only the code is said.
	status := fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	log := logf.FromContext(ctx).WithValues("url", spec.URL, "status", resp.StatusCode)
	answer := analysis.Answer{Status: resp.StatusCode}
	if egress.IsRedirect(resp) {
		to := resp.Header.Get("Location")
		log.Info("an HTTP verification's answer is a redirect, not followed", "location", to)
		msg := fmt.Sprintf("%s %s answered %s, a redirect, which Kokumi does not follow (the controller's --verify-redirects): the run fails", method, spec.URL, status)
		if spec.ShowResponse {
			msg += "; Location: " + to
		}
		return Outcome{Message: msg}, answer
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		answer.Status = 0
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			answer.Error = fmt.Sprintf("%s %s answered %s, but not all of it within %s", method, spec.URL, status, timeout)
		} else {
			answer.Error = fmt.Sprintf("%s %s: read the answer: %v", method, spec.URL, err)
		}
		return Outcome{Message: answer.Error}, answer
	}
	var parsed any
	if json.Unmarshal(raw, &parsed) != nil {
		parsed = nil
	}
	answer.Body = parsed
	excerpt := firstLines(string(raw), 3)
	response := map[string]any{"status": int64(resp.StatusCode), "body": parsed, "text": string(raw)}
	out, _, err := prg.ContextEval(ctx, map[string]any{"response": response})
	said := fmt.Sprintf("%s in %s", status, time.Since(start).Round(time.Millisecond))
	if spec.ShowResponse {
		said += ": " + excerpt
	}
	var o Outcome
	var ok, isBool bool
	if err == nil {
		ok, isBool = out.Value().(bool)
	}
	switch {
	case err != nil:
		o = Outcome{Message: "successCondition could not be evaluated (" + err.Error() + "); the answer: " + said}
	case !isBool:
		o = Outcome{Message: "successCondition does not give a bool; the answer: " + said}
	case !ok:
		o = Outcome{Message: "successCondition does not hold; the answer: " + said}
	default:
		o = Outcome{Passed: true, Message: "successCondition holds; the answer: " + said}
	}
	answer.Passed = o.Passed
	log.Info("an HTTP verification answered", "passed", o.Passed, "answer", excerpt)
	return o, answer
}

// httpClient is Client, or the default policy's.
func (h *HTTPRunner) httpClient() *http.Client {
	if h.Client != nil {
		return h.Client
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client == nil {
		h.client = egress.Policy{}.Client()
	}
	return h.client
}

// httpTimeout is how long one request of spec may take.
func httpTimeout(spec *v1.HTTPVerification) time.Duration {
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		return min(spec.Timeout.Duration, MaxHTTPTimeout)
	}
	return DefaultHTTPTimeout
}

// program compiles a successCondition once.
func (h *HTTPRunner) program(expr string) (cel.Program, error) {
	return h.cached("successCondition\x00"+expr, func() (cel.Program, error) {
		if h.env == nil {
			env, err := Env()
			if err != nil {
				return nil, err
			}
			h.env = env
		}
		return analysis.Compile(h.env, expr)
	})
}

// compareProgram compiles a compare once; nil for none.
func (h *HTTPRunner) compareProgram(expr string) (cel.Program, error) {
	if expr == "" {
		return nil, nil
	}
	return h.cached("compare\x00"+expr, func() (cel.Program, error) {
		if h.compareEnv == nil {
			env, err := analysis.CompareEnv()
			if err != nil {
				return nil, err
			}
			h.compareEnv = env
		}
		return analysis.Compile(h.compareEnv, expr)
	})
}

// cached returns the program of key, compiling it once (the cache cleared when full).
func (h *HTTPRunner) cached(key string, compile func() (cel.Program, error)) (cel.Program, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p, ok := h.programs[key]; ok {
		return p, nil
	}
	p, err := compile()
	if err != nil {
		return nil, err
	}
	if h.programs == nil || len(h.programs) >= maxPrograms {
		h.programs = map[string]cel.Program{}
	}
	h.programs[key] = p
	return p, nil
}

// Env is the CEL environment of a successCondition: the variable response, a map of status
// (int), body (the JSON answer, or null) and text (the answer as a string).
func Env() (*cel.Env, error) {
	env, err := cel.NewEnv(cel.Variable("response", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	return env, nil
}

// checked remembers what Check and CheckCompare said of each expression (bounded: cleared
// when full), so that a reconcile does not compile the Environment's expressions again.
var checked = struct {
	sync.Mutex
	m map[string]error
}{m: map[string]error{}}

// Check compiles a successCondition and says what is wrong with it, for a message that names
// the field; nil when it compiles to a bool.
func Check(expr string) error {
	return check("successCondition\x00"+expr, expr, Env)
}

// CheckCompare compiles a compare and says what is wrong with it; nil when it compiles to a
// bool.
func CheckCompare(expr string) error {
	return check("compare\x00"+expr, expr, analysis.CompareEnv)
}

func check(key, expr string, newEnv func() (*cel.Env, error)) error {
	checked.Lock()
	defer checked.Unlock()
	if err, ok := checked.m[key]; ok {
		return err
	}
	env, err := newEnv()
	if err != nil {
		return err
	}
	_, err = analysis.Compile(env, expr)
	if len(checked.m) >= maxPrograms {
		checked.m = map[string]error{}
	}
	checked.m[key] = err
	return err
}

// PerCluster says whether a verification of the Environment runs once per cluster.
func PerCluster(env *v1.Environment) bool {
	per := func(vs []v1.Verification) bool {
		return slices.ContainsFunc(vs, func(v v1.Verification) bool { return v.PerCluster })
	}
	if per(env.Spec.Verify) {
		return true
	}
	if env.Spec.Rollout != nil {
		for _, w := range env.Spec.Rollout.Waves {
			if per(w.Verify) {
				return true
			}
		}
	}
	return false
}

// Problem says what is wrong with the Environment's verifications, naming the field and the
// fix; empty when nothing is. The Environment's Ready condition says it (reason
// InvalidVerification), and a roll-out that reaches such a verification fails it with the same
// words.
func Problem(env *v1.Environment) string {
	check := func(field string, vs []v1.Verification) string {
		for i, v := range vs {
			if v.HTTP == nil {
				continue
			}
			if err := Check(v.HTTP.SuccessCondition); err != nil {
				return fmt.Sprintf("%s[%d].http.successCondition (%s): %v; write a CEL expression over response.status, response.body and response.text that gives a bool",
					field, i, v.Name, err)
			}
			if err := analysis.CheckPlaceholders(v.HTTP.URL, v.PerCluster); err != nil {
				return fmt.Sprintf("%s[%d].http.url (%s): %v", field, i, v.Name, err)
			}
			if err := analysis.CheckPlaceholders(v.HTTP.Body, v.PerCluster); err != nil {
				return fmt.Sprintf("%s[%d].http.body (%s): %v", field, i, v.Name, err)
			}
			if v.Compare == "" {
				continue
			}
			if err := CheckCompare(v.Compare); err != nil {
				return fmt.Sprintf("%s[%d].compare (%s): %v; write a CEL expression over the lists wave and baseline (each {cluster, labels, status, body, value}) that gives a bool",
					field, i, v.Name, err)
			}
		}
		return ""
	}
	if p := check("spec.verify", env.Spec.Verify); p != "" {
		return p
	}
	if env.Spec.Rollout != nil {
		for w, wave := range env.Spec.Rollout.Waves {
			if p := check(fmt.Sprintf("spec.rollout.waves[%d].verify", w), wave.Verify); p != "" {
				return p
			}
		}
	}
	return ""
}
