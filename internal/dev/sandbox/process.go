package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is a child process the fleet started, in a process group of its own, so that
// stopping it stops whatever it started too. It is killed when the fleet's process dies.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// processSpec says how to start one process.
type processSpec struct {
	// name names the process in messages and its log file.
	name string
	// path is the executable.
	path string
	// args are its arguments.
	args []string
	// env is added to the fleet's own environment.
	env []string
	// dir is its working directory (default: the log directory).
	dir string
}

// startProcess starts spec with its output appended to logDir/<name>.log.
func startProcess(logDir string, spec processSpec) (*process, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create log directory %s: %w", logDir, err)
	}
	logPath := filepath.Join(logDir, spec.name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", spec.name, err)
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "\n==== %s: %s %q\n", time.Now().Format(time.RFC3339), spec.path, spec.args)

	cmd := exec.Command(spec.path, spec.args...)
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Dir = spec.dir
	if cmd.Dir == "" {
		cmd.Dir = logDir
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A process group of its own: Ctrl-C in the terminal reaches only the fleet, which stops its
	// processes in order; Pdeathsig kills the process if the fleet dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", spec.name, spec.path, err)
	}
	p := &process{name: spec.name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then kills the group.
func (p *process) stop(grace time.Duration) error {
	if done, _ := p.exited(); done {
		return nil
	}
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill %s: %w", p.name, err)
		}
		<-p.done
	}
	// Whatever it started in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// failure describes an ended process, with where its log is.
func (p *process) failure() error {
	return fmt.Errorf("%s exited (%w); its log is %s", p.name, p.err, p.log)
}
