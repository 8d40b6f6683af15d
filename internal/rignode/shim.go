package rignode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// A shim supervises one run of one container, as containerd's shim does: it
// starts the process, writes its output to the log file (timestamped lines,
// rotated by size), waits for it and writes how it ended to a file. It runs
// in a session of its own, so it is not rignode's in any way that ends with
// rignode: a rignode that stalls never stalls a process (nothing it does not
// read can fill up), and one that restarts finds its processes still running
// and adopts them (see adopt.go).
//
// rignode starts it as `<rignode> shim <spec file>`; the files it writes sit
// beside the spec in the container's directory:
//
//	<n>.spec     what to run (shimSpec), written by rignode
//	<n>.log      stdout and stderr, "<RFC3339Nano> <line>" per line; <n>.log.1… when rotated
//	<n>.state    the shim's and the process's pid and identity, once it runs (shimState)
//	<n>.exit     how it ended (shimExit); written once, last
//	<n>.shim.log the shim's own errors

// shimSpec is what the shim runs.
type shimSpec struct {
	Argv        []string `json:"argv"`
	Env         []string `json:"env"`
	Dir         string   `json:"dir"`
	Log         string   `json:"log"`
	LogMaxSize  int64    `json:"logMaxSize,omitempty"`
	LogMaxFiles int      `json:"logMaxFiles,omitempty"`
	TermFile    string   `json:"termFile"`
	State       string   `json:"state"`
	Exit        string   `json:"exit"`
}

// shimState names the shim and its process once the process runs. An
// identity (procIdentity) tells a live process from another that reuses its pid.
type shimState struct {
	ShimPID   int       `json:"shimPid"`
	ShimID    string    `json:"shimId"`
	PID       int       `json:"pid"`
	ID        string    `json:"id"`
	StartedAt time.Time `json:"startedAt"`
}

// shimExit is how a run ended.
type shimExit struct {
	Code       int32     `json:"code"`
	Signal     int32     `json:"signal,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	// Message is the termination message file's content, at most 4096 bytes.
	Message string `json:"message,omitempty"`
	// StartError says why the process could not start; Code is then 128.
	StartError string `json:"startError,omitempty"`
	// lost says why the status is unknown (rignode's own finding, not the shim's).
	lost string
}

// RunShim is the shim's main: args is the spec file. It returns the shim's
// exit code (0 once the exit file is written).
func RunShim(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: rignode shim <spec file>")
		return 2
	}
	var spec shimSpec
	if err := readJSON(args[0], &spec); err != nil {
		fmt.Fprintln(os.Stderr, "rignode shim:", err)
		return 1
	}
	if len(spec.Argv) == 0 || spec.Exit == "" || spec.State == "" || spec.Log == "" {
		fmt.Fprintf(os.Stderr, "rignode shim: %s names no program, log, state or exit file\n", args[0])
		return 1
	}
	// Signals meant for rignode or a terminal are not the shim's to act on:
	// the process is stopped through its own process group. (Caught, not
	// ignored: an ignored signal would stay ignored in the process.)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	go func() {
		for range sigs {
		}
	}()

	started := time.Now()
	fail := func(err error) int {
		now := time.Now()
		if werr := writeJSON(spec.Exit, shimExit{Code: 128, StartError: err.Error(), StartedAt: started, FinishedAt: now}); werr != nil {
			fmt.Fprintln(os.Stderr, "rignode shim:", werr)
			return 1
		}
		return 0
	}
	logs, err := newLogWriter(spec.Log, spec.LogMaxSize, spec.LogMaxFiles)
	if err != nil {
		return fail(fmt.Errorf("log file: %w", err))
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		_ = logs.Close()
		return fail(err)
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env, cmd.Dir = spec.Env, spec.Dir
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = pw.Close()
		_ = pr.Close()
		_ = logs.Close()
		return fail(err)
	}
	_ = pw.Close()
	started = time.Now()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(logs, pr)
	}()
	self, _ := procIdentity(os.Getpid())
	id, _ := procIdentity(cmd.Process.Pid)
	if err := writeJSON(spec.State, shimState{ShimPID: os.Getpid(), ShimID: self, PID: cmd.Process.Pid, ID: id, StartedAt: started}); err != nil {
		fmt.Fprintln(os.Stderr, "rignode shim: state file:", err)
	}

	_ = cmd.Wait()
	res := shimExit{StartedAt: started, FinishedAt: time.Now()}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		res.Signal = int32(ws.Signal())
		res.Code = 128 + res.Signal
	} else {
		res.Code = int32(cmd.ProcessState.ExitCode())
	}
	// What the process left behind in its group ends with it, as in a
	// container whose init exits.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-drained:
	case <-time.After(2 * time.Second): // a child of the group keeps the pipe open
	}
	_ = pr.Close()
	<-drained
	_ = logs.Close()
	if b, err := os.ReadFile(spec.TermFile); err == nil {
		res.Message = string(b[:min(len(b), maxTerminationMessage)])
	}
	if err := writeJSON(spec.Exit, res); err != nil {
		fmt.Fprintln(os.Stderr, "rignode shim: exit file:", err)
		return 1
	}
	return 0
}

// writeJSON writes v to path atomically: a reader sees the whole file or none.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// exists reports whether path exists (an error other than "not there" counts as there).
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
