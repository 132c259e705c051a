package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Environment variables that put a package's controller behind a Faults (see FaultsFromEnv).
const (
	// EnvFaults is the fraction of the controller's API requests that fail, e.g. "0.1".
	EnvFaults = "KOKUMI_TEST_API_FAULTS"
	// EnvFaultsSeed is the seed of the faults' random choices; unset, one is drawn and logged.
	EnvFaultsSeed = "KOKUMI_TEST_API_FAULTS_SEED"
)

// FaultKind is one way an injected request fails.
type FaultKind int

// The kinds of fault a Faults injects.
const (
	// FaultConflict answers a write (PUT, PATCH, DELETE) with 409 Conflict, as when another
	// writer changed the object first. The request does not reach the API server.
	FaultConflict FaultKind = iota
	// FaultServerError answers with 500 Internal Server Error. The request does not reach the
	// API server.
	FaultServerError
	// FaultThrottle answers with 429 Too Many Requests and Retry-After: 1, as API Priority
	// and Fairness does; client-go waits and sends the request again by itself.
	FaultThrottle
	// FaultTimeout waits Faults.TimeoutDelay, then fails on the client's side as a timeout
	// does. A request that is not a watch is sent to the API server first and its answer
	// dropped: a write may have taken effect though the client saw it fail.
	FaultTimeout
	faultKinds
)

// String names the kind.
func (k FaultKind) String() string {
	switch k {
	case FaultConflict:
		return "conflict"
	case FaultServerError:
		return "server-error"
	case FaultThrottle:
		return "throttle"
	case FaultTimeout:
		return "timeout"
	}
	return "FaultKind(" + strconv.Itoa(int(k)) + ")"
}

// Faults fails a fraction of the requests of the API clients it wraps, each failure of one
// FaultKind, and counts what it injected. Its choices are random but replayable: the n-th
// request of a method to a path fails, and how, as a function of the seed alone, so a run with
// the same seed fails the same requests as far as the clients send them in the same order.
//
// It never touches a response's body: a watch whose request succeeds streams as usual, and a
// watch whose request fails is started again by client-go's reflector.
type Faults struct {
	// Rate is the fraction of requests that fail, from 0 to 1.
	Rate float64
	// Seed seeds the random choices.
	Seed uint64
	// TimeoutDelay is how long a FaultTimeout waits before it fails the request.
	TimeoutDelay time.Duration
	// Kinds are the kinds of fault to inject; empty means all of them. FaultConflict applies
	// to writes only: a read it would fail fails with another kind, or not at all.
	Kinds []FaultKind

	mu   sync.Mutex
	seen map[string]uint64

	requests atomic.Int64
	injected [faultKinds]atomic.Int64
}

// NewFaults fails rate of the requests, with choices seeded by seed and timeouts of 1.5 s.
func NewFaults(rate float64, seed uint64) *Faults {
	return &Faults{Rate: rate, Seed: seed, TimeoutDelay: 1500 * time.Millisecond}
}

// FaultsFromEnv reads EnvFaults and EnvFaultsSeed: nil when EnvFaults is unset or 0, an error
// naming the variable when either does not parse. It logs the rate and seed to standard error,
// so that a failing run can be replayed with the same seed.
func FaultsFromEnv() (*Faults, error) {
	v := os.Getenv(EnvFaults)
	if v == "" {
		return nil, nil
	}
	rate, err := strconv.ParseFloat(v, 64)
	if err != nil || rate < 0 || rate > 1 {
		return nil, fmt.Errorf("%s=%q: want a fraction from 0 to 1, such as 0.1", EnvFaults, v)
	}
	if rate == 0 {
		return nil, nil
	}
	seed := rand.Uint64()
	if s := os.Getenv(EnvFaultsSeed); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			return nil, fmt.Errorf("%s=%q: want an unsigned integer: %w", EnvFaultsSeed, s, err)
		}
	}
	fmt.Fprintf(os.Stderr, "API faults: failing %g of the controller's requests; replay with %s=%g %s=%d\n", rate, EnvFaults, rate, EnvFaultsSeed, seed)
	return NewFaults(rate, seed), nil
}

// Config returns a copy of cfg whose requests go through f.
func (f *Faults) Config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(f.RoundTripper)
	return c
}

// Patience scales a deadline to the fault rate: a client that fails rate of its requests
// needs more of them, and more time, to get somewhere. A nil Faults leaves d as it is.
func (f *Faults) Patience(d time.Duration) time.Duration {
	if f == nil {
		return d
	}
	return d + time.Duration(float64(d)*20*f.Rate)
}

// FaultCounts is what a Faults has done.
type FaultCounts struct {
	// Requests is how many requests it saw.
	Requests int64
	// Injected is how many failed, by kind.
	Injected [faultKinds]int64
}

// Total is how many requests failed.
func (c FaultCounts) Total() int64 {
	var n int64
	for _, v := range c.Injected {
		n += v
	}
	return n
}

// String reads "1234 requests, 123 failed: 30 conflict, 31 server-error, …".
func (c FaultCounts) String() string {
	parts := make([]string, len(c.Injected))
	for k, v := range c.Injected {
		parts[k] = fmt.Sprintf("%d %s", v, FaultKind(k))
	}
	return fmt.Sprintf("%d requests, %d failed: %s", c.Requests, c.Total(), strings.Join(parts, ", "))
}

// Counts returns what f has done so far.
func (f *Faults) Counts() FaultCounts {
	c := FaultCounts{Requests: f.requests.Load()}
	for k := range c.Injected {
		c.Injected[k] = f.injected[k].Load()
	}
	return c
}

// RoundTripper wraps next, failing some of its requests; it is a transport.WrapperFunc, for
// rest.Config.Wrap.
func (f *Faults) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return &faultyTransport{f: f, next: next}
}

type faultyTransport struct {
	f    *Faults
	next http.RoundTripper
}

func (t *faultyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	kind, ok := t.f.choose(req)
	if !ok {
		return t.next.RoundTrip(req)
	}
	t.f.injected[kind].Add(1)
	switch kind {
	case FaultConflict:
		closeBody(req)
		return statusResponse(req, http.StatusConflict, metav1.StatusReasonConflict,
			"Operation cannot be fulfilled on "+req.URL.Path+": injected conflict, the object has been modified", nil), nil
	case FaultThrottle:
		closeBody(req)
		return statusResponse(req, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			"injected throttling: too many requests, please try again later", http.Header{"Retry-After": {"1"}}), nil
	case FaultTimeout:
		return t.timeout(req)
	default:
		closeBody(req)
		return statusResponse(req, http.StatusInternalServerError, metav1.StatusReasonInternalError,
			"Internal error occurred: injected server error", nil), nil
	}
}

// timeout sends a request that is not a watch, drops its answer, waits and fails.
func (t *faultyTransport) timeout(req *http.Request) (*http.Response, error) {
	start := time.Now()
	if isWatch(req) {
		closeBody(req)
	} else if resp, err := t.next.RoundTrip(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	timer := time.NewTimer(max(0, t.f.TimeoutDelay-time.Since(start)))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return nil, timeoutError{req.Method + " " + req.URL.Path}
}

// choose decides whether req fails, and how, from the seed, the request's method and path
// and how many requests of that method to that path came before.
func (f *Faults) choose(req *http.Request) (FaultKind, bool) {
	f.requests.Add(1)
	if f.Rate <= 0 {
		return 0, false
	}
	key := req.Method + " " + req.URL.Path
	if isWatch(req) {
		key += "?watch"
	}
	f.mu.Lock()
	if f.seen == nil {
		f.seen = map[string]uint64{}
	}
	n := f.seen[key]
	f.seen[key] = n + 1
	f.mu.Unlock()
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	rng := rand.New(rand.NewPCG(f.Seed, h.Sum64()+n))
	if rng.Float64() >= f.Rate {
		return 0, false
	}
	wanted := f.Kinds
	if len(wanted) == 0 {
		wanted = []FaultKind{FaultConflict, FaultServerError, FaultThrottle, FaultTimeout}
	}
	kinds := make([]FaultKind, 0, len(wanted))
	for _, k := range wanted {
		if k != FaultConflict || isWrite(req) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return 0, false
	}
	return kinds[rng.IntN(len(kinds))], true
}

// isWrite reports whether req changes an object the API server has: a conflict is possible.
func isWrite(req *http.Request) bool {
	switch req.Method {
	case http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

func isWatch(req *http.Request) bool {
	w := req.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// statusResponse is the API server's answer of a failure: a Status object.
func statusResponse(req *http.Request, code int, reason metav1.StatusReason, message string, header http.Header) *http.Response {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: message,
	}
	if header.Get("Retry-After") != "" {
		status.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	}
	body, _ := json.Marshal(status) // a Status always marshals
	h := http.Header{"Content-Type": {"application/json"}}
	for k, v := range header {
		h[k] = v
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}

// timeoutError is a client-side timeout, as net/http reports one: client-go and
// k8s.io/apimachinery's net.IsTimeout see it as such.
type timeoutError struct{ request string }

func (e timeoutError) Error() string {
	return "injected timeout: " + e.request + ": net/http: timeout awaiting response headers"
}

// Timeout reports that the error is a timeout.
func (timeoutError) Timeout() bool { return true }

// Temporary reports that the error may not happen again.
func (timeoutError) Temporary() bool { return true }
