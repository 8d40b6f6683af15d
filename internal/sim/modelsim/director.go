package modelsim

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// maxLooks is how many retry turns (peeks, unlocks) a step gets before the script gives up STUCK.
const maxLooks = 3

// unknownToolName is the tool the unknown_tool misbehaviour calls.
const unknownToolName = "tap_everything"

// reply is one assistant turn.
type reply struct {
	calls   []toolCall
	content string
	finish  string // "tool_calls" or "stop"
}

// next decides the next turn of a session from the transcript.
func (sess *Session) next(t transcript) (reply, *Step) {
	if t.turns >= len(sess.Steps) {
		return turn(t, "the script is over; ending the session", endCall("STUCK", "modelsim: the scenario has no more steps")), nil
	}
	st := &sess.Steps[t.turns]
	if r, retrying := st.lookAgain(t); retrying {
		return r, st
	}
	action := st.action(t.listing)
	note := st.Note
	if note == "" {
		note = st.defaultNote()
	}
	return st.misbehave(t, note, action), st
}

// lookAgain returns a retry turn when the screen is not what the step needs yet.
func (st *Step) lookAgain(t transcript) (reply, bool) {
	label := st.needs()
	if label == "" || st.Call != nil && st.Call.Name == contract.ToolUnlockPhone {
		return reply{}, false
	}
	if t.listing != nil && shows(t.listing, label) {
		return reply{}, false
	}
	if t.retries >= maxLooks {
		return turn(t, "giving up: the screen never showed what I need", endCall("STUCK", fmt.Sprintf("gave up: %q never appeared on the screen after %d looks", label, maxLooks))), true
	}
	for _, l := range lockScreenLabels {
		if t.listing != nil && shows(t.listing, l) {
			return turn(t, retryMarker+" the phone is locked; unlocking it", call(contract.ToolUnlockPhone, map[string]any{})), true
		}
	}
	return turn(t, fmt.Sprintf("%s %q is not on the screen yet", retryMarker, label), call(contract.ToolPeek, map[string]any{})), true
}

// needs is the label the step must see on screen before it can act.
func (st *Step) needs() string {
	switch {
	case st.Expect != "":
		return st.Expect
	case st.Tap != "":
		return st.Tap
	case st.DoubleTap != "":
		return st.DoubleTap
	case st.LongPress != "":
		return st.LongPress
	case st.Swipe != nil && st.Swipe.Label != "":
		return st.Swipe.Label
	}
	return ""
}

// action is the step's one tool call (besides the note).
func (st *Step) action(listing []element) toolCall {
	at := func(label string) map[string]any {
		e, _ := find(listing, label, st.Occurrence)
		return map[string]any{"bbox": e.bbox[:]}
	}
	switch {
	case st.Peek:
		return call(contract.ToolPeek, map[string]any{})
	case st.Screenshot:
		return call(contract.ToolScreenshot, map[string]any{})
	case st.Tap != "":
		return call(contract.ToolTap, at(st.Tap))
	case st.DoubleTap != "":
		return call(contract.ToolDoubleTap, at(st.DoubleTap))
	case st.LongPress != "":
		return call(contract.ToolLongPress, at(st.LongPress))
	case st.Clipboard != "":
		return call(contract.ToolSendToClipboard, map[string]any{"text": st.Clipboard})
	case st.Swipe != nil:
		args := map[string]any{"direction": st.Swipe.Direction}
		if st.Swipe.Label != "" {
			args["bbox"] = at(st.Swipe.Label)["bbox"]
		} else {
			args["bbox"] = st.Swipe.BBox
		}
		if st.Swipe.Size != "" {
			args["size"] = st.Swipe.Size
		}
		if st.Swipe.Speed != "" {
			args["speed"] = st.Swipe.Speed
		}
		return call(contract.ToolSwipe, args)
	case st.Call != nil:
		args := st.Call.Arguments
		if args == nil {
			args = map[string]any{}
		}
		return call(st.Call.Name, args)
	}
	return endCall(st.End.Status, st.End.Recap)
}

func (st *Step) defaultNote() string {
	switch {
	case st.Peek:
		return "looking at the screen"
	case st.Screenshot:
		return "taking a sharper screenshot"
	case st.Tap != "":
		return "tapping " + st.Tap
	case st.DoubleTap != "":
		return "double-tapping " + st.DoubleTap
	case st.LongPress != "":
		return "long-pressing " + st.LongPress
	case st.Clipboard != "":
		return "putting the text on the clipboard to paste it"
	case st.Swipe != nil:
		return "swiping " + st.Swipe.Direction
	case st.Call != nil:
		return "calling " + st.Call.Name
	}
	return "ending the session: " + st.End.Status
}

// misbehave builds the turn: [note, action], or the wrong shape the step asks for.
func (st *Step) misbehave(t transcript, summary string, action toolCall) reply {
	n := noteCall(summary)
	switch st.Misbehave {
	case "malformed_args":
		action.Function.Arguments = action.Function.Arguments[:len(action.Function.Arguments)/2]
		return turn(t, "", n, action)
	case "unknown_tool":
		return turn(t, "", n, call(unknownToolName, map[string]any{"everything": true}))
	case "no_note":
		return turn(t, "", action)
	case "note_only":
		return turn(t, "", n)
	case "two_actions":
		return turn(t, "", n, action, action)
	case "text_only":
		return reply{content: "I have looked at the phone and I think the task is complete.", finish: "stop"}
	}
	return turn(t, "", n, action)
}

// turn numbers the calls and, when summary is set, puts its note first.
func turn(t transcript, summary string, calls ...toolCall) reply {
	if summary != "" {
		calls = append([]toolCall{noteCall(summary)}, calls...)
	}
	calls = slices.Clone(calls)
	for i := range calls {
		calls[i].ID = fmt.Sprintf("call_%d_%d", t.turnIndex, i)
		calls[i].Type = "function"
	}
	return reply{calls: calls, finish: "tool_calls"}
}

func call(name string, args any) toolCall {
	b, _ := json.Marshal(args)
	return toolCall{Function: functionCall{Name: name, Arguments: string(b)}}
}

func noteCall(summary string) toolCall {
	return call(contract.ToolNote, map[string]any{"summary": summary})
}

func endCall(status, recap string) toolCall {
	return call(contract.ToolEndSession, map[string]any{"status": status, "recap": recap})
}
