// Package isolate renders a source in a child process of Kokumi's own binary, held to an
// address-space, a data and a CPU limit and killed at its timeout, so that nothing a chart does
// (a template that loops in a loop, a value passed through tpl that makes gigabytes, a loop that
// never ends) takes the controller's memory or holds one of its workers beyond the timeout.
//
// The parent writes the request (the source's layers and the render options) as JSON on the
// child's stdin and reads the rendered manifests from its stdout, no more than the output budget
// allows; the child is the binary itself, started with ChildFlag as its only argument
// (MainIfChild runs it), so that the child is the same code as the controller, with no other file to install.
package isolate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kokumi-dev/kokumi/internal/manifests"
	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// ChildFlag is the only argument that makes Kokumi's binary a render child (MainIfChild). It is a flag, so
// that a binary that does not know it (a test binary without MainIfChild in its TestMain) fails at once
// rather than doing anything else.
const ChildFlag = "-kokumi-render-child"

// addressHeadroom is added to the address space the child has mapped before it renders (Go
// reserves address space it may never touch, the binary is mapped whole, each thread has its
// stack) and the render's memory, for its address-space limit: the render's threads and the
// runtime's own growth.
const addressHeadroom = 256 << 20

// childNice is the child's scheduling priority (nice): below the controller's.
const childNice = 10

// TimeoutError is a render stopped at its timeout.
type TimeoutError struct {
	// After is the timeout.
	After time.Duration
}

// Error implements error.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("the render did not end within %s", e.After)
}

// Process renders in a child process.
type Process struct {
	// Executable is the binary the child runs: Kokumi's own (os.Executable) unless set.
	Executable string
	// Memory is the most memory the render may use (the child's Go memory limit; its data and
	// address-space limits are set from it). Zero means no limit.
	Memory int64
	// Timeout is the most wall time a render takes; the child is killed then, and its CPU
	// time is held to it too. Zero means no timeout.
	Timeout time.Duration
	// Warm is how many children are started ahead of need and wait for their request, so that
	// a render does not wait for its child's start (some 80 ms for Kokumi's binary, most of
	// what a small chart's render costs). Each child still renders once and exits. Zero
	// starts each child when its render begins.
	Warm int
}

// request is what the parent writes on the child's stdin.
type request struct {
	Layers  []oci.Layer    `json:"layers"`
	Options render.Options `json:"options"`
	Memory  int64          `json:"memory"`
}

// response is what the child writes on its stdout: the manifests, or the failure.
type response struct {
	Chart     bool            `json:"chart"`
	Manifests []byte          `json:"manifests,omitempty"`
	Error     string          `json:"error,omitempty"`
	Limit     *oci.LimitError `json:"limit,omitempty"`
}

// Render renders layers with o in a child process, as render.Render does in this one. A child
// that goes over Memory fails with an *oci.LimitError of render.LimitMemory; one that runs past
// Timeout, or past its CPU time, with a *TimeoutError; a render failure with the child's error,
// an *oci.LimitError of the render's own budgets kept as one.
func (p Process) Render(ctx context.Context, layers []oci.Layer, o render.Options) (*render.Result, error) {
	exe := p.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find Kokumi's binary to render in: %w", err)
		}
	}
	in, err := json.Marshal(request{Layers: layers, Options: o, Memory: p.Memory})
	if err != nil {
		return nil, fmt.Errorf("encode the render request: %w", err)
	}
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	c, err := p.take(exe)
	if err != nil {
		return nil, err
	}
	// The child is killed at the timeout, or when the caller gives up.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
			_ = c.cmd.Process.Kill()
		case <-stop:
		}
	}()
	go func() {
		// A child that dies before reading it all fails on its own: its error is Wait's.
		_, _ = c.stdin.Write(in)
		_ = c.stdin.Close()
	}()
	cmd, stdout, stderr := c.cmd, c.stdout, &c.stderr
	// The output is read no further than its budget allows, with room for the encoding.
	most := int64(64 << 20)
	if o.Limits.OutputBytes > 0 {
		most = o.Limits.OutputBytes*2 + 1<<20
	}
	out, readErr := io.ReadAll(io.LimitReader(stdout, most+1))
	if int64(len(out)) > most {
		_ = cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && p.Timeout > 0:
		return nil, &TimeoutError{After: p.Timeout}
	case ctx.Err() != nil:
		return nil, fmt.Errorf("render: %w", ctx.Err())
	case int64(len(out)) > most:
		return nil, &oci.LimitError{Limit: render.LimitOutputBytes, Max: o.Limits.OutputBytes}
	}
	if waitErr != nil {
		return nil, p.childFailed(waitErr, stderr.String())
	}
	if readErr != nil {
		return nil, fmt.Errorf("read the render's output: %w", readErr)
	}
	var res response
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("read the render's output: %w", err)
	}
	switch {
	case res.Limit != nil:
		return nil, fmt.Errorf("%s: %w", strings.TrimSuffix(res.Error, ": "+res.Limit.Error()), res.Limit)
	case res.Error != "":
		return nil, errors.New(res.Error)
	}
	objs, err := manifests.ParseLimited(res.Manifests, o.Limits.Objects)
	if err != nil {
		return nil, err
	}
	return &render.Result{Chart: res.Chart, Objects: objs}, nil
}

// waiting is a render child started, waiting for its request on stdin.
type waiting struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr bytes.Buffer
}

// warm holds, for each Process, the children started ahead of need (Process.Warm).
var warm = struct {
	sync.Mutex
	idle map[Process][]*waiting
}{idle: map[Process][]*waiting{}}

// take returns a child waiting for its request: one started ahead when there is one, else one
// started now; and, with Warm, starts another for the next render.
func (p Process) take(exe string) (*waiting, error) {
	p.Executable = exe
	var c *waiting
	warm.Lock()
	if idle := warm.idle[p]; len(idle) > 0 {
		c, warm.idle[p] = idle[len(idle)-1], idle[:len(idle)-1]
	}
	warm.Unlock()
	if p.Warm > 0 {
		go p.refill()
	}
	if c != nil {
		return c, nil
	}
	return p.start()
}

// refill starts a child for a later render, unless Warm of them wait already.
func (p Process) refill() {
	warm.Lock()
	room := len(warm.idle[p]) < p.Warm
	warm.Unlock()
	if !room {
		return
	}
	c, err := p.start()
	if err != nil {
		return // the next render starts its own, and says what fails
	}
	warm.Lock()
	defer warm.Unlock()
	if len(warm.idle[p]) >= p.Warm {
		_ = c.stdin.Close() // it reads no request and exits
		go func() { _ = c.cmd.Wait() }()
		return
	}
	warm.idle[p] = append(warm.idle[p], c)
}

// start starts a child of p.Executable. A child waiting for its request uses no CPU time, and
// exits when its stdin closes, as it does when the controller exits.
func (p Process) start() (*waiting, error) {
	c := &waiting{cmd: exec.Command(p.Executable, ChildFlag)}
	c.cmd.Env = childEnv(p)
	c.cmd.Stderr = &limitedWriter{w: &c.stderr, n: 4096}
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("start the render: %w", err)
	}
	if c.stdout, err = c.cmd.StdoutPipe(); err != nil {
		return nil, fmt.Errorf("start the render: %w", err)
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the render (%s): %w", p.Executable, err)
	}
	return c, nil
}

// childFailed names why a child exited without an answer: its memory (the runtime's "out of
// memory", or a SIGKILL before its CPU time ran out: the kernel's OOM killer, which takes the
// child first), its CPU time (SIGXCPU, or the SIGKILL that follows it), or else what it wrote
// on stderr.
func (p Process) childFailed(err error, stderr string) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		status, _ := exit.Sys().(syscall.WaitStatus)
		cpu := exit.UserTime() + exit.SystemTime()
		// The runtime's words when an allocation, or a thread's stack, finds no room in the limits.
		outOfMemory := strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory") ||
			strings.Contains(stderr, "pthread_create failed") || strings.Contains(stderr, "failed to create new OS thread")
		switch {
		case p.Timeout > 0 && status.Signaled() && (status.Signal() == syscall.SIGXCPU || (status.Signal() == syscall.SIGKILL && cpu >= p.Timeout-time.Second)):
			return &TimeoutError{After: p.Timeout}
		case p.Memory > 0 && (outOfMemory || (status.Signaled() && status.Signal() == syscall.SIGKILL)):
			return &oci.LimitError{Limit: render.LimitMemory, Max: p.Memory}
		}
	}
	return fmt.Errorf("the render's process failed (%w): %s", err, firstLine(stderr))
}

// childEnv is the child's environment: none of the controller's, but for what the Go runtime
// reads, with its memory limit.
func childEnv(p Process) []string {
	env := []string{"GOTRACEBACK=none"}
	if p.Memory > 0 {
		env = append(env, "GOMEMLIMIT="+strconv.FormatInt(p.Memory, 10))
	}
	if p.Timeout > 0 {
		env = append(env, "KOKUMI_RENDER_CPU_SECONDS="+strconv.Itoa(max(int(p.Timeout.Seconds()), 1)))
	}
	return env
}

// IsChild reports whether args (os.Args) start a render child.
func IsChild(args []string) bool { return len(args) == 2 && args[1] == ChildFlag }

// MainIfChild runs a render child and exits when this process is one (IsChild), and returns
// at once otherwise: call it first thing in main, and in TestMain of a test binary that runs
// the Order reconciler, whose renders start the test binary itself. The child holds itself to
// the limits first, reads the request on stdin, renders, and writes the response on stdout.
func MainIfChild() {
	if IsChild(os.Args) {
		os.Exit(child(os.Stdin, os.Stdout))
	}
}

func child(stdin io.Reader, stdout io.Writer) int {
	// The kernel's OOM killer takes the child before the controller, should a node or a
	// cgroup run out first.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	// And the controller's own work (roll-outs, probes, records) comes before any render's on
	// a busy CPU.
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, childNice)
	if s, err := strconv.Atoi(os.Getenv("KOKUMI_RENDER_CPU_SECONDS")); err == nil && s > 0 {
		lim := uint64(s)
		_ = syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: lim, Max: lim + 1})
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "read the render request:", err)
		return 1
	}
	var req request
	if err := json.Unmarshal(in, &req); err != nil {
		fmt.Fprintln(os.Stderr, "decode the render request:", err)
		return 1
	}
	if req.Memory > 0 {
		// The request is read: from here on the render alone grows.
		debug.SetMemoryLimit(req.Memory)
		data := uint64(req.Memory) + 128<<20
		_ = syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: data, Max: data})
		as := uint64(req.Memory) + mapped() + addressHeadroom
		_ = syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: as, Max: as})
	}
	var res response
	out, err := render.Render(context.Background(), req.Layers, req.Options)
	if err == nil {
		res.Chart = out.Chart
		res.Manifests, err = manifests.Marshal(out.Objects)
	}
	if err != nil {
		res.Error = err.Error()
		var le *oci.LimitError
		if errors.As(err, &le) {
			res.Limit = le
		}
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "write the render's output:", err)
		return 1
	}
	return 0
}

// mapped is the address space this process has mapped (VmSize), or 2 GiB when it cannot be
// read.
func mapped() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmSize:"); ok {
				if kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 2 << 30
}

// firstLine is the first non-empty line of s, for a message.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return "(nothing on stderr)"
}

// limitedWriter keeps the first n bytes written to it and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
