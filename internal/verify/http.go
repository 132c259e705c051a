package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
	"github.com/kokumi-dev/kokumi/internal/egress"
)

// MaxBody is the most of an answer's body an HTTP verification reads.
const MaxBody = 1 << 20

// celCostLimit bounds one evaluation of a successCondition.
const celCostLimit = 1_000_000

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
	// Done is told of each run that ends, with its Serving's namespace and name, so that the
	// Serving reconciles then; nil tells none (the Serving looks again after PollHTTP). It must
	// not block.
	Done func(namespace, name string)

	mu       sync.Mutex
	env      *cel.Env
	programs map[string]cel.Program
	client   *http.Client
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
	prg, err := h.program(spec.SuccessCondition)
	if err != nil {
		return Outcome{Message: "successCondition cannot be used: " + err.Error() + "; fix the Environment's http.successCondition"}
	}
	timeout := httpTimeout(spec)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	method := string(spec.Method)
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(spec.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, spec.URL, body)
	if err != nil {
		return Outcome{Message: "the url cannot be requested: " + err.Error()}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	start := time.Now()
	resp, err := h.httpClient().Do(req)
	if err != nil {
		if r := egress.Refused(err); r != nil {
			return Outcome{Message: fmt.Sprintf("%s %s: refused: %v", method, spec.URL, r)}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Outcome{Message: fmt.Sprintf("%s %s: no answer within %s", method, spec.URL, timeout)}
		}
		return Outcome{Message: fmt.Sprintf("%s %s: %v", method, spec.URL, err)}
	}
	defer resp.Body.Close()
	// The status line's reason phrase is the server's to write: only the code is said.
	status := fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	log := logf.FromContext(ctx).WithValues("url", spec.URL, "status", resp.StatusCode)
	if egress.IsRedirect(resp) {
		to := resp.Header.Get("Location")
		log.Info("an HTTP verification's answer is a redirect, not followed", "location", to)
		msg := fmt.Sprintf("%s %s answered %s, a redirect, which Kokumi does not follow (the controller's --verify-redirects): the run fails", method, spec.URL, status)
		if spec.ShowResponse {
			msg += "; Location: " + to
		}
		return Outcome{Message: msg}
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Outcome{Message: fmt.Sprintf("%s %s answered %s, but not all of it within %s", method, spec.URL, status, timeout)}
		}
		return Outcome{Message: fmt.Sprintf("%s %s: read the answer: %v", method, spec.URL, err)}
	}
	var parsed any
	if json.Unmarshal(raw, &parsed) != nil {
		parsed = nil
	}
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
	log.Info("an HTTP verification answered", "passed", o.Passed, "answer", excerpt)
	return o
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
	h.mu.Lock()
	defer h.mu.Unlock()
	if p, ok := h.programs[expr]; ok {
		return p, nil
	}
	if h.env == nil {
		env, err := Env()
		if err != nil {
			return nil, err
		}
		h.env = env
	}
	p, err := compile(h.env, expr)
	if err != nil {
		return nil, err
	}
	if h.programs == nil || len(h.programs) >= maxPrograms {
		h.programs = map[string]cel.Program{}
	}
	h.programs[expr] = p
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

// checked remembers what Check said of each expression (bounded: cleared when full), so
// that a reconcile does not compile the Environment's expressions again.
var checked = struct {
	sync.Mutex
	m map[string]error
}{m: map[string]error{}}

// Check compiles a successCondition and says what is wrong with it, for a message that names
// the field; nil when it compiles to a bool.
func Check(expr string) error {
	checked.Lock()
	defer checked.Unlock()
	if err, ok := checked.m[expr]; ok {
		return err
	}
	env, err := Env()
	if err != nil {
		return err
	}
	_, err = compile(env, expr)
	if len(checked.m) >= maxPrograms {
		checked.m = map[string]error{}
	}
	checked.m[expr] = err
	return err
}

func compile(env *cel.Env, expr string) (cel.Program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("it does not compile: %w", iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("it gives %s, not a bool", t)
	}
	p, err := env.Program(ast, cel.CostLimit(celCostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("it cannot run: %w", err)
	}
	return p, nil
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
