package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a child process in a process group of its own, killed when the benchmark dies.
type process struct {
	name, logPath string
	cmd           *exec.Cmd
	done          chan struct{}
	err           error
}

// startProcess starts path with args and env added to the benchmark's environment, its output
// appended to logPath.
func startProcess(name, logPath, path string, args, env []string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the log of %s: %w", name, err)
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// alive says whether the process still runs, and if not how it ended.
func (p *process) alive() error {
	select {
	case <-p.done:
		how := p.err
		if how == nil {
			how = errors.New("exit status 0")
		}
		return fmt.Errorf("%s exited: %w; the end of its log: %s", p.name, how, tail(p.logPath, 5))
	default:
		return nil
	}
}

// tail returns the last n lines of the file at path, on one line.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// stopGrace is how long stop waits after SIGTERM before it kills.
const stopGrace = 10 * time.Second

// stop sends SIGTERM to the process group, waits up to stopGrace, then kills it.
func (p *process) stop() {
	grace := stopGrace
	if p.alive() != nil {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// Memory is a process's resident memory, from /proc/<pid>/status.
type Memory struct {
	// RSS is VmRSS, the resident set now; HWM is VmHWM, its peak so far. Both in bytes.
	RSS, HWM int64
}

// cpu reads the CPU time the process has used so far, in user and system mode.
func (p *process) cpu() (time.Duration, error) {
	d, err := cpuOf(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of %s: %w", p.name, err)
	}
	return d, nil
}

// cpuOf reads the CPU time the process pid has used so far, in user and system mode.
func cpuOf(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields are counted after it.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	fields := strings.Fields(rest)
	// utime and stime are the 14th and 15th fields of the line, the 12th and 13th after ")".
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat has %d fields", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	// Linux counts in USER_HZ, 100 a second on every architecture Go supports.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// pidWith finds the process whose command line holds every one of args, or 0.
func pidWith(args ...string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		line := strings.ReplaceAll(string(cmdline), "\x00", " ")
		found := true
		for _, a := range args {
			if !strings.Contains(line, a) {
				found = false
				break
			}
		}
		if found {
			return pid
		}
	}
	return 0
}

// memory reads the process's VmRSS and VmHWM.
func (p *process) memory() (Memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return Memory{}, fmt.Errorf("read the memory of %s: %w", p.name, err)
	}
	defer func() { _ = f.Close() }()
	var m Memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		fields := strings.Fields(val) // "123456 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return Memory{}, fmt.Errorf("%s of %s: unexpected %q", key, p.name, val)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("%s of %s: %w", key, p.name, err)
		}
		if key == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.HWM = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return Memory{}, fmt.Errorf("read the memory of %s: %w", p.name, err)
	}
	return m, nil
}

// selfCPU is the CPU time this process has used so far (0 when it cannot be read).
func selfCPU() time.Duration {
	d, _ := cpuOf(os.Getpid())
	return d
}
