package agentrun_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// decisionLog keeps the manager's log lines at V(1) and above, each with its
// key/value pairs, for the tests that read what a reconcile decided.
type decisionLog struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	msg string
	kv  map[string]string
}

// logger is a logr.Logger that records into l every line up to V(1).
func (l *decisionLog) logger() logr.Logger {
	return logr.New(&decisionSink{log: l})
}

// decisionSink is a logr sink that records lines and their values.
type decisionSink struct {
	log    *decisionLog
	values []any
}

func (s *decisionSink) Init(logr.RuntimeInfo)  {}
func (s *decisionSink) Enabled(level int) bool { return level <= 1 }
func (s *decisionSink) Info(_ int, msg string, kv ...any) {
	line := logLine{msg: msg, kv: map[string]string{}}
	all := append(append([]any{}, s.values...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		line.kv[fmt.Sprint(all[i])] = fmt.Sprint(all[i+1])
	}
	s.log.mu.Lock()
	s.log.lines = append(s.log.lines, line)
	s.log.mu.Unlock()
}
func (s *decisionSink) Error(err error, msg string, kv ...any) {
	s.Info(0, msg, append(kv, "error", err)...)
}
func (s *decisionSink) WithValues(kv ...any) logr.LogSink {
	return &decisionSink{log: s.log, values: append(append([]any{}, s.values...), kv...)}
}
func (s *decisionSink) WithName(string) logr.LogSink { return s }

// find returns the first line with msg whose values include want.
func (l *decisionLog) find(msg string, want map[string]string) (logLine, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
line:
	for _, ln := range l.lines {
		if ln.msg != msg {
			continue
		}
		for k, v := range want {
			if ln.kv[k] != v {
				continue line
			}
		}
		return ln, true
	}
	return logLine{}, false
}

// dump is the lines about run, for a failure message.
func (l *decisionLog) dump(run string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, ln := range l.lines {
		if ln.kv["run"] == run {
			fmt.Fprintf(&b, "  %s %v\n", ln.msg, ln.kv)
		}
	}
	return b.String()
}

// A user reading the manager's log at V(1) learns each decision of a run's
// reconciles: the rig it took, the attempt it started, how the attempt
// ended and how the run finished — each line with the run, its attempt, its
// rig and the reason.
func TestDecisionsAreLogged(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig-log", nil)
	scripts.set(ns, "logged", byPod(nil, ends(contract.Done, true, "timer set", 50*time.Millisecond)))
	create(t, newRun(ns, "logged", "rig-log"))
	waitPhase(t, ns, "logged", farmv1.RunSucceeded)
	for _, want := range []struct {
		msg string
		kv  map[string]string
	}{
		{"took a rig", map[string]string{"took": "rig-log", "reason": farmv1.ReasonLeased}},
		{"started an attempt", map[string]string{"rig": "rig-log", "pod": "logged-a1", "reason": farmv1.ReasonRunning}},
		{"attempt ended", map[string]string{"rig": "rig-log", "attempt": "1", "pod": "logged-a1", "reason": farmv1.OutcomeDone}},
		{"run finished", map[string]string{"rig": "rig-log", "attempt": "1", "phase": string(farmv1.RunSucceeded), "reason": farmv1.ReasonDone}},
		{"gave the rig back", map[string]string{"released": "rig-log", "to": "", "reason": farmv1.ReasonReleased}},
	} {
		want.kv["run"] = "logged"
		deadline := time.Now().Add(30 * time.Second)
		for _, ok := decisions.find(want.msg, want.kv); !ok; _, ok = decisions.find(want.msg, want.kv) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line %q with %v; the run's lines:\n%s", want.msg, want.kv, decisions.dump("logged"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
