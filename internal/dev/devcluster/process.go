package devcluster

import (
	"bytes"
	"context"
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

// Proc is one process of the cluster, as recorded in state.json.
type Proc struct {
	Name string   `json:"name"`
	PID  int      `json:"pid"`
	Args []string `json:"args"`
	// Env is what the process got besides this program's environment.
	Env []string `json:"env,omitempty"`
	Log string   `json:"log"`

	done chan struct{} // closed when a process this program started has been reaped
	err  error
}

// start runs bin with args in its own process group (a Ctrl-C in the terminal
// reaches only devcluster, which then stops everything in order), its output
// appended to logs/<name>.log.
func start(dir, name, bin string, args, env []string) (*Proc, error) {
	logPath := filepath.Join(dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== %s %s %s\n", time.Now().UTC().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, PID: cmd.Process.Pid, Args: append([]string{bin}, args...), Env: env, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has gone (and for a child, why).
func (p *Proc) Exited() (bool, error) {
	if p.done != nil {
		select {
		case <-p.done:
			return true, p.err
		default:
			return false, nil
		}
	}
	return !alive(p.PID, p.Args[0]), nil
}

// Stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs it.
func (p *Proc) Stop(grace time.Duration) {
	if gone, _ := p.Exited(); gone {
		killGroup(p.PID, syscall.SIGKILL) // leftovers of the group, if any
		return
	}
	killGroup(p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if gone, _ := p.Exited(); gone {
			killGroup(p.PID, syscall.SIGKILL)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	killGroup(p.PID, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		if gone, _ := p.Exited(); gone {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill SIGKILLs the process (not its group) and waits until it is gone.
func (p *Proc) Kill() {
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	for i := 0; i < 250; i++ {
		if gone, _ := p.Exited(); gone {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Tail is the end of the process's log, for error messages.
func (p *Proc) Tail(n int) string { return tail(p.Log, n) }

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func killGroup(pid int, sig syscall.Signal) {
	if pid <= 1 {
		return
	}
	_ = syscall.Kill(-pid, sig)
}

// alive is true when pid runs and is still the program recorded for it (a
// reused pid is not ours). Zombies count as gone.
func alive(pid int, exe string) bool {
	if pid <= 1 {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc (macOS): trust the signal
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	first, _, _ := bytes.Cut(cmdline, []byte{0})
	return string(first) == exe
}

// waitFor polls check every interval until it succeeds, the timeout passes, or
// one of the watched processes exits.
func waitFor(ctx context.Context, what string, timeout time.Duration, watch []*Proc, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted while waiting for %s: %w", what, err)
		}
		if last = check(); last == nil {
			return nil
		}
		for _, p := range watch {
			if gone, err := p.Exited(); gone {
				return fmt.Errorf("%s exited while waiting for %s (%v); the end of %s:\n%s", p.Name, what, err, p.Log, p.Tail(15))
			}
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("%s not ready after %s: %v", what, timeout, last)
			for _, p := range watch {
				msg += fmt.Sprintf("\nthe end of %s:\n%s", p.Log, p.Tail(10))
			}
			return errors.New(msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
