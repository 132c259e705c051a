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

	v1 "github.com/kokumi-dev/kokumi/api/v1alpha1"
)

// MaxBody is the most of an answer's body an HTTP verification reads.
const MaxBody = 1 << 20

// celCostLimit bounds one evaluation of a successCondition.
const celCostLimit = 1_000_000

// maxPrograms bounds the compiled successConditions kept.
const maxPrograms = 256

// HTTPRunner sends the requests of http verifications and judges their answers.
type HTTPRunner struct {
	// Client sends the requests; nil uses a client of its own.
	Client *http.Client

	mu       sync.Mutex
	env      *cel.Env
	programs map[string]cel.Program
}

// Run sends the request and says whether successCondition holds of the answer.
func (h *HTTPRunner) Run(ctx context.Context, spec *v1.HTTPVerification) Outcome {
	prg, err := h.program(spec.SuccessCondition)
	if err != nil {
		return Outcome{Message: "successCondition cannot be used: " + err.Error() + "; fix the Environment's http.successCondition"}
	}
	timeout := DefaultHTTPTimeout
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		timeout = min(spec.Timeout.Duration, MaxHTTPTimeout)
	}
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
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Outcome{Message: fmt.Sprintf("%s %s: no answer within %s", method, spec.URL, timeout)}
		}
		return Outcome{Message: fmt.Sprintf("%s %s: %v", method, spec.URL, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return Outcome{Message: fmt.Sprintf("%s %s: read the answer: %v", method, spec.URL, err)}
	}
	var parsed any
	if json.Unmarshal(raw, &parsed) != nil {
		parsed = nil
	}
	response := map[string]any{"status": int64(resp.StatusCode), "body": parsed, "text": string(raw)}
	out, _, err := prg.ContextEval(ctx, map[string]any{"response": response})
	said := fmt.Sprintf("%s in %s: %s", resp.Status, time.Since(start).Round(time.Millisecond), firstLines(string(raw), 3))
	if err != nil {
		return Outcome{Message: "successCondition could not be evaluated (" + err.Error() + "); the answer: " + said}
	}
	ok, isBool := out.Value().(bool)
	if !isBool {
		return Outcome{Message: "successCondition does not give a bool; the answer: " + said}
	}
	if !ok {
		return Outcome{Message: "successCondition does not hold; the answer: " + said}
	}
	return Outcome{Passed: true, Message: "successCondition holds; the answer: " + said}
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
