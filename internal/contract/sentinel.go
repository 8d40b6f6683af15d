// Package contract is the pod contract (v1) between the operator and the loop,
// as Go: the sentinels and their exit codes, the exit reasons, the loop's
// settings with their flag and environment names, and the termination message.
// The loop writes it, the controller reads it; it is defined once, here, and
// imports nothing of the project. docs/loop-contract.md is its prose twin.
// It also names the tools an agent calls (tools.go), so the engine, the rig
// client and the simulators spell each name the same way.
package contract

import "fmt"

// Sentinel is how an agent ends a session.
type Sentinel string

// The five sentinels (docs/loop-contract.md, "Exit codes and the termination
// message"; the agent ends a session with one through end_session,
// docs/rig-contract.md, "Engine-side tools").
const (
	Done  Sentinel = "DONE"
	Fail  Sentinel = "FAIL"
	Wait  Sentinel = "WAIT"
	Idle  Sentinel = "IDLE"
	Stuck Sentinel = "STUCK"
)

// Sentinels lists every sentinel in a stable order.
var Sentinels = []Sentinel{Done, Fail, Wait, Idle, Stuck}

// ParseSentinel accepts a sentinel name in any case.
func ParseSentinel(s string) (Sentinel, error) {
	for _, v := range Sentinels {
		if string(v) == s || equalFoldASCII(string(v), s) {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown sentinel %q: want one of DONE, FAIL, WAIT, IDLE, STUCK", s)
}

// Exit codes of the loop process (docs/loop-contract.md, "Exit codes and the termination message").
const (
	ExitDone              = 0
	ExitFail              = 1
	ExitInvalidConfig     = 2
	ExitWait              = 10
	ExitIdle              = 11
	ExitStuck             = 12
	ExitStuckNonRetryable = 13
)

// ExitCode is the process exit code for a sentinel; retryable matters only for STUCK.
func ExitCode(s Sentinel, retryable bool) int {
	switch s {
	case Done:
		return ExitDone
	case Fail:
		return ExitFail
	case Wait:
		return ExitWait
	case Idle:
		return ExitIdle
	case Stuck:
		if retryable {
			return ExitStuck
		}
		return ExitStuckNonRetryable
	}
	return ExitStuck
}

// Class is what an exit code means to the operator.
type Class string

// The classes of an attempt's end, as the controller acts on them.
const (
	ClassDone          Class = "Done"
	ClassFail          Class = "Fail"
	ClassWait          Class = "Wait"
	ClassIdle          Class = "Idle"
	ClassStuck         Class = "Stuck"           // retryable: a fresh attempt, counted
	ClassBudget        Class = "BudgetExhausted" // STUCK, not retryable
	ClassInvalidConfig Class = "InvalidConfig"
)

// ClassOfExitCode maps an exit code to its class. Any code outside the table
// (a crash, OOM, a signal) counts as a retryable STUCK.
func ClassOfExitCode(code int) Class {
	switch code {
	case ExitDone:
		return ClassDone
	case ExitFail:
		return ClassFail
	case ExitInvalidConfig:
		return ClassInvalidConfig
	case ExitWait:
		return ClassWait
	case ExitIdle:
		return ClassIdle
	case ExitStuckNonRetryable:
		return ClassBudget
	}
	return ClassStuck
}

// ClassOfSentinel maps a sentinel (and its retryable flag) to its class.
func ClassOfSentinel(s Sentinel, retryable bool) Class {
	return ClassOfExitCode(ExitCode(s, retryable))
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
