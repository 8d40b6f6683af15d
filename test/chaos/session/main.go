// Command session plays a loop pod's program in the chaos benchmark, on
// rignode (as a host process, the loop image mapped to it) and on the
// kubelet host (as a container of an image of its own): it holds a lock on
// its rig's state directory while it runs and ends, after 1–4 s, as its
// run's story says (the stories of test/chaos's fake-kubelet script).
//
// The lock is the ground truth for "two sessions on one phone": a session
// that finds it taken appends itself to .chaos-overlaps in the directory,
// and the benchmark counts those lines; every session appends itself to
// .chaos-sessions, so the benchmark knows how many ran.
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// The files the session keeps in the state directory; the benchmark reads
// the last two (test/chaos, sessionsFile and overlapsFile).
const (
	lockFile     = ".chaos-lock"
	sessionsFile = ".chaos-sessions"
	overlapsFile = ".chaos-overlaps"
)

func main() { os.Exit(run()) }

func run() int {
	_, name, _ := strings.Cut(os.Getenv(contract.SettingRun.Env), "/")
	attempt := os.Getenv(contract.SettingAttempt.Env)
	dir := os.Getenv(contract.SettingStateDir.Env)
	if name == "" || dir == "" {
		fmt.Fprintf(os.Stderr, "session: %s and %s must be set, as the operator sets them in a loop pod\n", contract.SettingRun.Env, contract.SettingStateDir.Env)
		return 2
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "session:", err)
		return 1
	}
	me := fmt.Sprintf("%s attempt %s (pid %d, host %s)", name, attempt, os.Getpid(), os.Getenv("HOSTNAME"))
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if err := appendLine(filepath.Join(dir, overlapsFile), me); err != nil {
			fmt.Fprintln(os.Stderr, "session:", err)
			return 1
		}
	}
	if err := appendLine(filepath.Join(dir, sessionsFile), me); err != nil {
		fmt.Fprintln(os.Stderr, "session:", err)
		return 1
	}
	s := contract.Done
	switch story, _, _ := strings.Cut(name, "-"); {
	case strings.Contains(name, "-f"):
	case story == "fail":
		s = contract.Fail
	case story == "stuck" && attempt == "1":
		s = contract.Stuck
	case story == "wait":
		s = contract.Wait
	case story == "idle":
		s = contract.Idle
	}
	time.Sleep(time.Duration(1000+rand.IntN(3000)) * time.Millisecond)
	m := contract.TerminationMessage{Sentinel: s, Retryable: true, Recap: "chaos " + string(s), ExitReason: contract.ReasonEndTurn, Turns: 3}
	b, _ := m.Encode()
	path := os.Getenv(contract.SettingTerminationLog.Env)
	if path == "" {
		path = contract.DefaultTerminationLog
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "session:", err)
	}
	return m.ExitCode()
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
