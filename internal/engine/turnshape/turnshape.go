// Package turnshape is the rule that shapes every turn: exactly two tool
// calls, one note and exactly one other tool, [note, one-other]
// (docs/engine.md, "Reading the loop", judge). A wrong shape is rejected
// with a corrective that names the offending tool, so the model resends the
// same action rather than any shape-valid substitute.
package turnshape

import (
	"fmt"
	"strings"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// Verdict is the check's answer.
type Verdict struct {
	OK bool
	// Empty: the reply had no tool calls at all.
	Empty bool
	// Offending names the tool(s) that broke the shape.
	Offending string
	// Corrective is the message the model reads when the turn is rejected.
	Corrective string
}

// Check judges a turn by its tool-call names. A tool in alone may also be
// called on its own (end_session on the last chance).
func Check(names []string, alone ...string) Verdict {
	notes, others := split(names)
	switch {
	case len(names) == 2 && notes == 1 && len(others) == 1:
		return Verdict{OK: true}
	case len(names) == 1 && len(others) == 1 && contains(alone, others[0]):
		return Verdict{OK: true}
	case len(names) == 0:
		return Verdict{Empty: true, Corrective: "Your reply called no tools. Every turn is exactly two tool calls: " +
			"note(summary) saying what you are doing and why, plus exactly one other tool. " +
			"Resend this turn as tool calls; when the task is over, call note and end_session(status, recap)."}
	case notes == 0 && len(others) == 1:
		return reject(others[0], fmt.Sprintf("You called %s without note. Every turn is exactly [note, one other tool]: "+
			"resend %s together with note(summary).", others[0], others[0]))
	case notes >= 1 && len(others) == 0:
		if notes > 1 {
			return reject(contract.ToolNote, fmt.Sprintf("You called note %d times and no other tool. Every turn is exactly one note plus "+
				"exactly one other tool: resend one note with the action you meant.", notes))
		}
		return reject(contract.ToolNote, "You called only note. Every turn is exactly one note plus exactly one other tool: "+
			"resend your note together with the one action you meant to take.")
	case notes > 1:
		return reject(contract.ToolNote, fmt.Sprintf("You called note %d times. Every turn is exactly one note plus exactly one other tool: "+
			"resend with a single note and %s.", notes, strings.Join(others, " or ")))
	default: // two or more other tools
		extra := strings.Join(others[1:], ", ")
		without := ""
		if notes == 0 {
			without = " and no note"
		}
		return reject(extra, fmt.Sprintf("You called %s in one turn%s; only one action is allowed per turn. "+
			"Resend note with %s alone, then do %s in a later turn after you have seen the result.",
			strings.Join(others, ", "), without, others[0], extra))
	}
}

func reject(offending, corrective string) Verdict {
	return Verdict{Offending: offending, Corrective: "Turn rejected, nothing was run. " + corrective}
}

func split(names []string) (notes int, others []string) {
	for _, n := range names {
		if n == contract.ToolNote {
			notes++
		} else {
			others = append(others, n)
		}
	}
	return notes, others
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
