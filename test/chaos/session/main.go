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
//
// Once it holds the lock, a session calls its rig once, as a loop does:
// a tools/call to the rig endpoint with its pod's rig token, through the
// rig gateway. It names itself in a header, so that the rig behind the
// gateway can tell whose call it was handed, and appends the outcome to
// .chaos-calls.
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
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
	callsFile    = ".chaos-calls"
)

// SessionHeader names the session in its rig call: "<run> <attempt>".
const SessionHeader = "X-Chaos-Session"

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
	if err := appendLine(filepath.Join(dir, callsFile), name+" "+attempt+" "+callRig(name+" "+attempt)); err != nil {
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

// callRig makes one tools/call to the rig and says how it went: "admitted",
// or "refused <status>" for a reply that is not 200, or "failed <error>".
func callRig(session string) string {
	url := os.Getenv(contract.SettingRigEndpoint.Env)
	tok, err := os.ReadFile(os.Getenv(contract.SettingRigTokenFile.Env))
	if url == "" || err != nil {
		return fmt.Sprintf("failed no rig endpoint (%q) or token (%v)", url, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"peek","arguments":{}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return "failed " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set(SessionHeader, session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "failed " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("refused %d", resp.StatusCode)
	}
	return "admitted"
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
