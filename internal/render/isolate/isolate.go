// Package isolate renders a source in a child process of Kokumi's own binary, held to an
// address-space, a data and a CPU limit and killed at its timeout, so that nothing a chart does
// (a template that loops in a loop, a value passed through tpl that makes gigabytes, a loop that
// never ends) takes the controller's memory or holds one of its workers beyond the timeout.
//
// The parent writes each request (the source's layers and the render options) as a frame of
// JSON on the child's stdin and reads the rendered objects from its stdout, no more than the
// output budget allows; the child is the binary itself, started with ChildFlag as its only
// argument (MainIfChild runs it), so that the child is the same code as the controller, with no
// other file to install. A child renders one request after another (up to ChildRenders), each
// held to the limits anew, and is kept between renders (Process.Warm): starting Kokumi's binary
// costs some 40 ms of CPU, ten times what a small chart's render costs. A child that fails, goes
// over a limit, is killed at the timeout, or grew its memory is never given another render.
package isolate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kokumi-dev/kokumi/internal/oci"
	"github.com/kokumi-dev/kokumi/internal/render"
)

// ChildFlag is the only argument that makes Kokumi's binary a render child (MainIfChild). It is a flag, so
// that a binary that does not know it (a test binary without MainIfChild in its TestMain) fails at once
// rather than doing anything else.
const ChildFlag = "-kokumi-render-child"

// ChildRenders is the most renders one child makes before it exits and another takes its
// place, so that nothing one render leaves in a child (a fragmented heap) outlives a few
// seconds of renders.
const ChildRenders = 100

// addressHeadroom is added to the address space the child has mapped before a render (Go
// reserves address space it may never touch, the binary is mapped whole, each thread has its
// stack) and the render's memory, for its address-space limit: the render's threads and the
// runtime's own growth.
const addressHeadroom = 256 << 20

// OrdinaryRender is the wall time an ordinary render takes at most (a chart of a few hundred
// objects renders in well under a second): a render that runs longer beside another has its child
// moved to the lowest CPU priority (Process.Share), and the controller's render slots give the
// spare slot to a namespace that runs no render once every slot has been held longer.
const OrdinaryRender = 2 * time.Second

// childNice is the child's scheduling priority (nice): below the controller's, so that its own
// work (roll-outs, probes, records) comes first on a busy CPU.
const childNice = 10

// lowestNice is the lowest scheduling priority, of a render that ran past its share: on a busy
// core the kernel gives such a child about a seventh of a child's at childNice (CFS weights 15
// and 110).
const lowestNice = 19

// exitCPU is the exit code of a child whose render ran out of CPU time (SIGXCPU).
const exitCPU = 86

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
	// Memory is the most memory a render may use (the child's Go memory limit; its data and
	// address-space limits are set from it for each render). Zero means no limit.
	Memory int64
	// Timeout is the most wall time a render takes; the child is killed then, and its CPU
	// time for the render is held to it too (unless CPU is set). Zero means no timeout.
	Timeout time.Duration
	// CPU is the most CPU time a render takes, in whole seconds (at least one): Timeout when
	// zero. A render that runs out of it fails with a *TimeoutError of CPU.
	CPU time.Duration
	// Warm is how many children are kept waiting for a request between renders, so that a
	// render does not wait for its child's start (some 80 ms for Kokumi's binary, most of what a
	// small chart's render costs) nor pay its CPU time; as many as renders run at a time is
	// enough. Zero starts a child for each render, which exits after it. With a Namespace, Warm
	// that rendered nothing and Warm kept after renders (Namespace).
	Warm int
	// Share is how long a render runs at the children's priority: past it, while another render
	// runs, its child is moved to the lowest (nice 19), so that renders that run to their budgets
	// leave the CPU to others' ordinary renders, and exits after the render (no process may raise
	// its priority again). OrdinaryRender when zero.
	Share time.Duration
	// Namespace is the namespace whose render this is: a child that rendered for one namespace
	// renders that namespace's only, so that nothing one tenant's render leaves in a child (Helm's
	// engine keeps nothing, but a flaw might) reaches another's. Warm children that rendered
	// nothing wait at all times and take any namespace's first render, and Warm children are kept
	// after a render, those of the namespaces that rendered last: a render of a namespace that has
	// none kept costs a child's start, made ahead. Without a Namespace a child renders any
	// namespace's renders.
	Namespace string
}

// request is what the parent writes on the child's stdin, one frame per render.
type request struct {
	Layers  []oci.Layer    `json:"layers"`
	Options render.Options `json:"options"`
}

// response is what the child writes on its stdout for a request: whether the source was a
// chart, or the failure; and whether it exits after it (Retire). The objects follow it in the
// same frame, as JSON values one after the other (decoder), when there is no failure.
type response struct {
	Chart  bool            `json:"chart"`
	Error  string          `json:"error,omitempty"`
	Limit  *oci.LimitError `json:"limit,omitempty"`
	Retire bool            `json:"retire,omitempty"`
}

// Render renders layers with o in a child process, as render.Render does in this one. A child
// that goes over Memory fails with an *oci.LimitError of render.LimitMemory; one that runs past
// Timeout, or past its CPU time, with a *TimeoutError; a render failure with the child's error,
// an *oci.LimitError of the render's own budgets kept as one.
func (p Process) Render(ctx context.Context, layers []oci.Layer, o render.Options) (*render.Result, error) {
	p, err := p.resolved()
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(request{Layers: layers, Options: o})
	if err != nil {
		return nil, fmt.Errorf("encode the render request: %w", err)
	}
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	// The output is read no further than its budget allows, with room for the encoding.
	most := int64(64 << 20)
	if o.Limits.OutputBytes > 0 {
		most = o.Limits.OutputBytes*2 + 1<<20
	}
	c, kept, err := p.take()
	if err != nil {
		return nil, err
	}
	var res response
	var objs []*unstructured.Unstructured
	read := func(r io.Reader) error {
		dec := json.NewDecoder(r)
		if err := dec.Decode(&res); err != nil {
			return noEOF(err)
		}
		if res.Error != "" {
			return nil
		}
		var err error
		objs, err = newDecoder(dec, o.Limits).all()
		return err
	}
	tooMuch, readErr := p.exchange(ctx, c, in, most, read)
	if kept && errors.Is(readErr, errNotSent) && ctx.Err() == nil {
		// A kept child that died while it waited (killed from outside) took no part in this
		// render: a new one renders it.
		p.discard(c)
		if c, err = p.startLive(); err != nil {
			return nil, err
		}
		tooMuch, readErr = p.exchange(ctx, c, in, most, read)
	}
	var le *oci.LimitError
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && p.Timeout > 0:
		p.discard(c)
		return nil, &TimeoutError{After: p.Timeout}
	case ctx.Err() != nil:
		p.discard(c)
		return nil, fmt.Errorf("render: %w", ctx.Err())
	case tooMuch:
		p.discard(c)
		return nil, &oci.LimitError{Limit: render.LimitOutputBytes, Max: o.Limits.OutputBytes}
	case errors.As(readErr, &le):
		// The parent's budget of the objects is spent: the child's output is left unread.
		p.discard(c)
		return nil, fmt.Errorf("read the render's objects: %w", le)
	case readErr != nil && !errors.Is(readErr, io.EOF) && !errors.Is(readErr, io.ErrUnexpectedEOF) && !errors.Is(readErr, errNotSent):
		// The child answered what is no frame: it renders nothing more.
		p.discard(c)
		return nil, readErr
	case readErr != nil:
		// The child died before its answer: Wait says of what.
		_ = c.stdin.Close()
		waitErr := c.cmd.Wait()
		p.gone()
		if waitErr != nil {
			return nil, p.childFailed(waitErr, c.stderr.String())
		}
		return nil, fmt.Errorf("read the render's output: %w", readErr)
	}
	if res.Retire || c.demoted {
		p.discard(c)
	} else {
		p.put(c)
	}
	switch {
	case res.Limit != nil:
		return nil, fmt.Errorf("%s: %w", strings.TrimSuffix(res.Error, ": "+res.Limit.Error()), res.Limit)
	case res.Error != "":
		return nil, errors.New(res.Error)
	}
	return &render.Result{Chart: res.Chart, Objects: objs}, nil
}

// child is a render child, started, between renders or in one.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
	// demoted is set when the child was moved to the lowest priority (Process.Share).
	demoted bool
	// namespace is the namespace the child rendered for, of a Process with a Namespace.
	namespace string
}

// exchange is c.exchange, with c moved to the lowest priority once the render has run p's
// share (Share, or OrdinaryRender) while another render runs, of any Process: when it has run it
// and another starts, or when it reaches it beside another. A render alone keeps its priority: it
// takes the CPU from no render, and the controller's own work comes first anyway.
func (p Process) exchange(ctx context.Context, c *child, in []byte, most int64, read func(io.Reader) error) (bool, error) {
	share := p.Share
	if share <= 0 {
		share = OrdinaryRender
	}
	f := &inFlight{c: c, share: share, start: time.Now()}
	running.Lock()
	var past []*inFlight
	for o := range running.renders {
		if time.Since(o.start) >= o.share {
			past = append(past, o)
		}
	}
	running.renders[f] = struct{}{}
	running.Unlock()
	for _, o := range past {
		o.demote()
	}
	timer := time.AfterFunc(share, func() {
		running.Lock()
		beside := len(running.renders) > 1
		running.Unlock()
		if beside {
			f.demote()
		}
	})
	tooMuch, err := c.exchange(ctx, in, most, read)
	timer.Stop()
	running.Lock()
	delete(running.renders, f)
	running.Unlock()
	f.mu.Lock()
	f.done = true // before the child may exit, and its process ID be another's
	c.demoted = f.demoted
	f.mu.Unlock()
	return tooMuch, err
}

// running are the renders under way, of every Process.
var running = struct {
	sync.Mutex
	renders map[*inFlight]struct{}
}{renders: map[*inFlight]struct{}{}}

// inFlight is a render under way in child c, since start, of a Process whose share is share.
type inFlight struct {
	c     *child
	share time.Duration
	start time.Time
	// mu guards done (the render ended) and demoted (its child was moved to the lowest priority).
	mu            sync.Mutex
	done, demoted bool
}

// demote moves the render's child to the lowest priority, unless the render ended.
func (f *inFlight) demote() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done || f.demoted {
		return
	}
	renice(f.c.cmd.Process.Pid, lowestNice)
	f.demoted = true
}

// exchange writes the request in to the child and reads its answer with read, which is given
// the answer's frame, at most most bytes of it (tooMuch when it says more), killing the child
// when ctx ends first. What read leaves of the frame is read past.
func (c *child) exchange(ctx context.Context, in []byte, most int64, read func(io.Reader) error) (tooMuch bool, err error) {
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			_ = c.cmd.Process.Kill()
		case <-stop:
		}
	}()
	defer func() {
		close(stop)
		<-stopped
	}()
	if err := writeFrame(c.stdin, in); err != nil {
		// A child that died before reading it all says why on its own: its error is Wait's.
		return false, fmt.Errorf("%w: %w", errNotSent, err)
	}
	n, err := readFrameSize(c.stdout)
	if err != nil {
		return false, err
	}
	if n > most {
		_ = c.cmd.Process.Kill()
		return true, nil
	}
	frame := io.LimitReader(c.stdout, n)
	if err := read(frame); err != nil {
		return false, err
	}
	if _, err := io.Copy(io.Discard, frame); err != nil {
		return false, err
	}
	if frame.(*io.LimitedReader).N > 0 {
		return false, io.ErrUnexpectedEOF
	}
	return false, nil
}

// errNotSent is a request the child did not take: it had exited.
var errNotSent = errors.New("the render's process took no request")

// writeFrame writes b as one frame: its length in decimal, a newline, and b.
func writeFrame(w io.Writer, b []byte) error {
	if _, err := io.WriteString(w, strconv.Itoa(len(b))+"\n"); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// readFrameSize reads a frame's length (writeFrame).
func readFrameSize(r *bufio.Reader) (int64, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(string(line), "\n"), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("read the render's output: a frame of length %q", line)
	}
	return n, nil
}

// pool holds the children of each Process but its Namespace and Share (base), and how many it
// has started and not seen exit (live), how many of those are starting (starting). Of a Process
// without a Namespace, the children waiting for a request (fresh) render any render. Of one with a
// Namespace, those started ahead (fresh) have rendered nothing and take any namespace's render,
// and Warm of them wait at all times, so that a namespace's render does not wait for a start; a
// child kept after a render (used) renders its namespace's only, and Warm are kept, those of the
// namespaces that rendered last.
var pool = struct {
	sync.Mutex
	of map[Process]*children
}{of: map[Process]*children{}}

// children are a Process's children (pool).
type children struct {
	fresh []*child
	// used are the children kept after a render of a namespace, the one kept first first.
	used           []*child
	live, starting int
}

// perNamespace is the Namespace of the key in pool of the Processes with a Namespace.
const perNamespace = "\x00"

// base is the key of p's children in pool: p without its Share (the parent's, not the
// children's) and its Namespace, but for whether it has one (a child that rendered for any
// namespace is never one of those that render for one only).
func (p Process) base() Process {
	if p.Namespace != "" {
		p.Namespace = perNamespace
	}
	p.Share = 0
	return p
}

// children are p's children; pool is held.
func (p Process) children() *children {
	k := pool.of[p.base()]
	if k == nil {
		k = &children{}
		pool.of[p.base()] = k
	}
	return k
}

// take returns a child waiting for its request: one kept from an earlier render of p's
// Namespace, or one started ahead (kept), when there is one, else one started now; and starts
// others ahead (topUp).
func (p Process) take() (c *child, kept bool, err error) {
	pool.Lock()
	k := p.children()
	if p.Namespace != "" {
		c = k.takeUsed(p.Namespace)
	}
	if c == nil && len(k.fresh) > 0 {
		c = k.fresh[len(k.fresh)-1]
		k.fresh = k.fresh[:len(k.fresh)-1]
	}
	if c == nil {
		k.live++ // the one started now
	}
	p.topUp(k)
	pool.Unlock()
	if c != nil {
		return c, true, nil
	}
	if c, err = p.start(); err != nil {
		p.notStarted()
		return nil, false, err
	}
	return c, false, nil
}

// takeUsed takes the child kept last after a render of namespace, if any; pool is held.
func (k *children) takeUsed(namespace string) *child {
	for i := len(k.used) - 1; i >= 0; i-- {
		if c := k.used[i]; c.namespace == namespace {
			k.used = slices.Delete(k.used, i, i+1)
			return c
		}
	}
	return nil
}

// startLive starts a child for the render at hand, and counts it live.
func (p Process) startLive() (*child, error) {
	pool.Lock()
	p.children().live++
	pool.Unlock()
	c, err := p.start()
	if err != nil {
		p.notStarted()
		return nil, err
	}
	return c, nil
}

// notStarted counts a child that was counted live and did not start.
func (p Process) notStarted() {
	pool.Lock()
	p.children().live--
	pool.Unlock()
}

// topUp starts children ahead of need: of a Process with a Namespace, until Warm wait that
// rendered nothing; of one without, until Warm live; pool is held.
func (p Process) topUp(k *children) {
	n := p.Warm - k.live
	if p.Namespace != "" {
		n = p.Warm - len(k.fresh) - k.starting
	}
	for range max(n, 0) {
		k.live++
		k.starting++
		go p.refill()
	}
}

// put keeps c, which has answered a request of p's Namespace and waits for the next: for any
// later render (no Namespace), or for a later render of that namespace. When more than Warm are
// kept, the one kept first exits, one of another namespace first.
func (p Process) put(c *child) {
	if p.Warm <= 0 {
		p.discard(c)
		return
	}
	pool.Lock()
	k := p.children()
	var evicted *child
	if p.Namespace == "" {
		if k.fresh = append(k.fresh, c); len(k.fresh) > p.Warm {
			evicted, k.fresh = k.fresh[0], k.fresh[1:]
		}
	} else {
		c.namespace = p.Namespace
		if k.used = append(k.used, c); len(k.used) > p.Warm {
			evicted = k.evict(p.Namespace)
		}
	}
	pool.Unlock()
	if evicted != nil {
		p.discard(evicted)
	}
}

// evict takes out the child kept first of a namespace other than ns, else the one kept first;
// pool is held.
func (k *children) evict(ns string) *child {
	i := slices.IndexFunc(k.used, func(c *child) bool { return c.namespace != ns })
	i = max(i, 0)
	c := k.used[i]
	k.used = slices.Delete(k.used, i, i+1)
	return c
}

// discard lets c exit (its stdin closed) or kills it, and starts another ahead of need (topUp).
func (p Process) discard(c *child) {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	go func() { _ = c.cmd.Wait() }()
	p.gone()
}

// gone counts a child that exited, or will, and starts others ahead of need (topUp).
func (p Process) gone() {
	pool.Lock()
	k := p.children()
	k.live--
	p.topUp(k)
	pool.Unlock()
}

// refill starts a child for a later render of any namespace (a live and starting one, counted
// already).
func (p Process) refill() {
	c, err := p.start()
	pool.Lock()
	k := p.children()
	k.starting--
	if err != nil {
		k.live--
		pool.Unlock()
		return // the next render starts its own, and says what fails
	}
	if len(k.fresh) < p.Warm {
		k.fresh = append(k.fresh, c)
		pool.Unlock()
		return
	}
	pool.Unlock()
	p.discard(c)
}

// start starts a child of p.Executable. A child waiting for its request uses no CPU time, and
// exits when its stdin closes, as it does when the controller exits.
func (p Process) start() (*child, error) {
	c := &child{cmd: exec.Command(p.Executable, ChildFlag)}
	c.cmd.Env = childEnv(p)
	c.cmd.Stderr = &limitedWriter{w: &c.stderr, n: 4096}
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("start the render: %w", err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start the render: %w", err)
	}
	c.stdout = bufio.NewReader(stdout)
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the render (%s): %w", p.Executable, err)
	}
	return c, nil
}

// childFailed names why a child exited without an answer: its memory (the runtime's "out of
// memory", or a SIGKILL before its CPU time ran out: the kernel's OOM killer, which takes the
// child first), its CPU time (exitCPU on SIGXCPU), or else what it wrote on stderr.
func (p Process) childFailed(err error, stderr string) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		status, _ := exit.Sys().(syscall.WaitStatus)
		// The runtime's words when an allocation, or a thread's stack, finds no room in the limits.
		outOfMemory := strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory") ||
			strings.Contains(stderr, "pthread_create failed") || strings.Contains(stderr, "failed to create new OS thread")
		switch {
		case p.cpu() > 0 && status.Exited() && status.ExitStatus() == exitCPU:
			return &TimeoutError{After: p.cpu()}
		case p.Memory > 0 && (outOfMemory || (status.Signaled() && status.Signal() == syscall.SIGKILL)):
			return &oci.LimitError{Limit: render.LimitMemory, Max: p.Memory}
		}
	}
	return fmt.Errorf("the render's process failed (%w): %s", err, firstLine(stderr))
}

// childEnv is the child's environment: none of the controller's, but for what the Go runtime
// reads, with its memory limit, and the render's limits.
func childEnv(p Process) []string {
	// No collection while the child starts (the packages' init allocates some 10 MiB, all of it
	// kept): a quarter of its start's CPU time. runChild sets the collector going.
	env := []string{"GOTRACEBACK=none", "GOGC=off"}
	if p.Memory > 0 {
		env = append(env, "GOMEMLIMIT="+strconv.FormatInt(p.Memory, 10), "KOKUMI_RENDER_MEMORY="+strconv.FormatInt(p.Memory, 10))
	}
	if cpu := p.cpu(); cpu > 0 {
		env = append(env, "KOKUMI_RENDER_CPU_SECONDS="+strconv.Itoa(max(int(cpu.Seconds()), 1)))
	}
	if p.Warm <= 0 {
		env = append(env, "KOKUMI_RENDER_ONCE=1")
	}
	return env
}

// cpu is the most CPU time of a render: CPU, else Timeout.
func (p Process) cpu() time.Duration {
	if p.CPU > 0 {
		return p.CPU
	}
	return p.Timeout
}

// resolved is p with its Executable: Kokumi's own binary unless set.
func (p Process) resolved() (Process, error) {
	if p.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return p, fmt.Errorf("find Kokumi's binary to render in: %w", err)
		}
		p.Executable = exe
	}
	return p, nil
}

// Kept returns the process IDs of the children p keeps waiting for a request after one (Warm):
// of its Namespace when it has one, else of any; the one kept last first.
func (p Process) Kept() []int {
	p, _ = p.resolved()
	pool.Lock()
	defer pool.Unlock()
	k := p.children()
	kept := k.fresh
	if p.Namespace != "" {
		kept = nil
		for _, c := range k.used {
			if c.namespace == p.Namespace {
				kept = append(kept, c)
			}
		}
	}
	pids := make([]int, 0, len(kept))
	for i := len(kept) - 1; i >= 0; i-- {
		pids = append(pids, kept[i].cmd.Process.Pid)
	}
	return pids
}

// IsChild reports whether args (os.Args) start a render child.
func IsChild(args []string) bool { return len(args) == 2 && args[1] == ChildFlag }

// MainIfChild runs a render child and exits when this process is one (IsChild), and returns
// at once otherwise: call it first thing in main, and in TestMain of a test binary that runs
// the Order reconciler, whose renders start the test binary itself. The child reads one request
// after another on stdin, holds itself to the limits anew for each, renders, and writes the
// response on stdout; it exits when stdin closes, or after a response that says Retire.
func MainIfChild() {
	if IsChild(os.Args) {
		os.Exit(runChild(os.Stdin, os.Stdout))
	}
}

// limits are a child's limits, from its environment (childEnv).
type limits struct {
	memory     int64
	cpuSeconds uint64
	once       bool
	// data is the child's data segment before its first request.
	data uint64
}

func childLimits() limits {
	var l limits
	l.memory, _ = strconv.ParseInt(os.Getenv("KOKUMI_RENDER_MEMORY"), 10, 64)
	l.cpuSeconds, _ = strconv.ParseUint(os.Getenv("KOKUMI_RENDER_CPU_SECONDS"), 10, 64)
	l.once = os.Getenv("KOKUMI_RENDER_ONCE") != ""
	return l
}

func runChild(stdin io.Reader, stdout io.Writer) int {
	// The kernel's OOM killer takes the child before the controller, should a node or a
	// cgroup run out first.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	// And the controller's own work (roll-outs, probes, records) comes before any render's on
	// a busy CPU: every thread of this process (read before Restrict closes /proc).
	renice(os.Getpid(), childNice)
	// Nothing of the file system but what a render reads, no network.
	if err := Restrict(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lim := childLimits()
	if lim.cpuSeconds > 0 {
		// The CPU limit is the soft one, moved for each render (a hard one could not be raised
		// again): the kernel's SIGXCPU at it ends the child.
		xcpu := make(chan os.Signal, 1)
		signal.Notify(xcpu, syscall.SIGXCPU)
		go func() {
			for range xcpu {
				// A signal of a render that ended at its limit, arriving after the next one moved
				// the limit, is not the next one's.
				var r syscall.Rlimit
				if syscall.Getrlimit(syscall.RLIMIT_CPU, &r) == nil && cpuUsed() < r.Cur {
					continue
				}
				fmt.Fprintln(os.Stderr, "the render ran out of CPU time")
				os.Exit(exitCPU)
			}
		}()
	}
	debug.SetGCPercent(100) // off while the child started (childEnv)
	if lim.memory > 0 {
		debug.SetMemoryLimit(lim.memory)
	}
	in := bufio.NewReader(stdin)
	lim.data = data()
	for renders := 1; ; renders++ {
		n, err := readFrameSize(in)
		if errors.Is(err, io.EOF) {
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "read the render request:", err)
			return 1
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(in, body); err != nil {
			fmt.Fprintln(os.Stderr, "read the render request:", err)
			return 1
		}
		var req request
		if err := json.Unmarshal(body, &req); err != nil {
			fmt.Fprintln(os.Stderr, "decode the render request:", err)
			return 1
		}
		// The request is read: from here on the render alone grows, held to its limits.
		lim.hold()
		res, objs := renderRequest(req)
		// A child whose heap grew (a render that came near its limit leaves its heap mapped),
		// or that went over a budget, or has rendered enough, renders nothing more.
		res.Retire = lim.once || renders >= ChildRenders || res.Limit != nil ||
			(lim.memory > 0 && data() > lim.data+uint64(lim.memory)/2)
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		err = enc.Encode(res)
		for _, o := range objs {
			if err != nil {
				break
			}
			err = enc.Encode(o.Object)
		}
		if err == nil {
			err = writeFrame(stdout, b.Bytes())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "write the render's output:", err)
			return 1
		}
		if res.Retire {
			return 0
		}
	}
}

// hold sets the soft limits of this process for the render that follows: its memory (data and
// address space) above what is mapped now, and its CPU time above what it used so far. Soft
// limits only: the next render moves them again. A child's first render is held to Memory and
// 128 MiB of data in all, as a child that renders once; a later one to as much beyond what the
// renders before it left mapped (at most Memory / 2, or the child retires).
func (l limits) hold() {
	if l.memory > 0 {
		mapped, now := vm()
		grown := uint64(0)
		if now > l.data {
			grown = now - l.data
		}
		setSoft(syscall.RLIMIT_DATA, uint64(l.memory)+128<<20+grown)
		setSoft(syscall.RLIMIT_AS, uint64(l.memory)+mapped+addressHeadroom)
	}
	if l.cpuSeconds > 0 {
		setSoft(syscall.RLIMIT_CPU, cpuUsed()+l.cpuSeconds)
	}
}

// renice sets the scheduling priority of every thread of process pid to nice. On Linux a nice
// value is a thread's (setpriority of a process ID sets its main thread's alone), and a thread
// takes the nice value of the thread that starts it: the threads are set twice over, so that one
// started meanwhile by a thread not yet set is set too. A process may lower its own priority, and
// its children's, never raise it.
func renice(pid, nice int) {
	for range 2 {
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			_ = syscall.Setpriority(syscall.PRIO_PROCESS, pid, nice)
			return
		}
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice)
			}
		}
	}
}

// cpuUsed is the CPU time this process used, in whole seconds rounded up, as RLIMIT_CPU counts.
func cpuUsed() uint64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return uint64((time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) + time.Second - 1) / time.Second)
}

// setSoft sets the soft limit of resource to v, below its hard limit.
func setSoft(resource int, v uint64) {
	var r syscall.Rlimit
	if syscall.Getrlimit(resource, &r) != nil {
		return
	}
	r.Cur = min(v, r.Max)
	_ = syscall.Setrlimit(resource, &r)
}

// renderRequest renders req in this process, as the response and its objects.
func renderRequest(req request) (response, []*unstructured.Unstructured) {
	var res response
	out, err := render.Render(context.Background(), req.Layers, req.Options)
	if err == nil {
		res.Chart = out.Chart
		return res, out.Objects
	}
	res.Error = err.Error()
	var le *oci.LimitError
	if errors.As(err, &le) {
		res.Limit = le
	}
	return res, nil
}

// data is this process's data segment, as RLIMIT_DATA counts it (VmData), or 2 GiB when it
// cannot be read.
func data() uint64 {
	_, d := vm()
	return d
}

// vm is the address space this process has mapped (VmSize) and its data segment (VmData), from
// one read of /proc/self/status; 2 GiB each when it cannot be read.
func vm() (size, data uint64) {
	size, data = 2<<30, 2<<30
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return size, data
	}
	for _, l := range strings.Split(string(b), "\n") {
		field, v, ok := strings.Cut(l, ":")
		if !ok || (field != "VmSize" && field != "VmData") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			continue
		}
		if field == "VmSize" {
			size = kb << 10
		} else {
			data = kb << 10
		}
	}
	return size, data
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
