package crash

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// controllerProcess is `kokumi controller` run as a child process, started again after each
// SIGKILL. Every incarnation appends to one log file.
type controllerProcess struct {
	args    []string
	logPath string

	cmd  *exec.Cmd
	done chan struct{}
	// err and ended say how and when the incarnation ended, once done is closed.
	err   error
	ended time.Time
	// started is when the current incarnation started; incarnation counts them from 1.
	started     time.Time
	incarnation int
}

func newControllerProcess(logPath string, args ...string) *controllerProcess {
	return &controllerProcess{args: args, logPath: logPath}
}

// start starts a new incarnation.
func (p *controllerProcess) start() error {
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("open the controller's log: %w", err)
	}
	p.incarnation++
	_, _ = fmt.Fprintf(log, "=== incarnation %d, %s\n", p.incarnation, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(kokumiBin, append([]string{"controller"}, p.args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+controllerKubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start kokumi controller: %w", err)
	}
	p.cmd, p.done, p.started = cmd, make(chan struct{}), time.Now()
	go func(done chan struct{}) {
		p.err = cmd.Wait()
		p.ended = time.Now()
		_ = log.Close()
		close(done)
	}(p.done)
	return nil
}

// kill sends SIGKILL to the running incarnation and waits for it to end. An incarnation that
// ended by itself before is an error: the controller must not exit while it runs.
func (p *controllerProcess) kill() error {
	if err := p.alive(); err != nil {
		return err
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill incarnation %d: %w", p.incarnation, err)
	}
	<-p.done
	return nil
}

// alive says whether the current incarnation still runs, and if not how it ended.
func (p *controllerProcess) alive() error {
	select {
	case <-p.done:
		how := p.err
		if how == nil {
			how = errors.New("exit status 0")
		}
		return fmt.Errorf("incarnation %d of the controller exited by itself after %s: %w", p.incarnation, p.ended.Sub(p.started).Round(time.Millisecond), how)
	default:
		return nil
	}
}

// dumpStacks makes the running incarnation print its goroutines' stacks to its log and exit
// (SIGQUIT), and waits for it a while.
func (p *controllerProcess) dumpStacks() {
	if p.alive() != nil || p.cmd.Process.Signal(syscall.SIGQUIT) != nil {
		return
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// stop kills the running incarnation, if any.
func (p *controllerProcess) stop() {
	if p.cmd != nil && p.alive() == nil {
		_ = p.kill()
	}
}

// tail returns the last n lines of the log.
func (p *controllerProcess) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
