package engine

import "strings"

// basePrompt is the engine's part of the system prompt: the loop's rules as
// the model must follow them (docs/engine.md, "The system prompt").
const basePrompt = `You drive a real phone through tools: a camera looks at the screen and a stylus touches it.

Rules of every turn:
- Call exactly two tools per turn: note(summary) plus exactly one other tool. Never zero, never three.
- The note is one line of at most 20 words: what this turn does and why. It is the only part of a turn that is kept long-term.
- One action, then look at the result. A wrong tap can send a message or place an order.
- Tool results are honest: an error result tells you what went wrong; read it and adapt.

Close the session yourself with end_session(status, recap) when you are done:
DONE the task is complete; FAIL it cannot be done; WAIT a person must reply before you can continue;
IDLE there was nothing to do; STUCK something unrecoverable happened and a fresh session should retry.`

// BootstrapFile is a context file for the system prompt: Source says whose
// it is ("rig/phone-apps", "run/farm-setup"), Name is the file's name.
type BootstrapFile struct {
	Source, Name, Text string
}

// systemPrompt assembles the system prompt in its fixed order
// (docs/engine.md, "The system prompt"): the engine's rules, the rig's
// instructions, the extra sections (the skills index), the bootstrap files
// in the order given (the rig's, then the run's), and the run's own
// addition last.
func systemPrompt(rigInstructions, extra string, bootstrap []BootstrapFile, appendText string) string {
	parts := []string{basePrompt}
	if s := strings.TrimSpace(rigInstructions); s != "" {
		parts = append(parts, "The rig's instructions:\n"+s)
	}
	if s := strings.TrimSpace(extra); s != "" {
		parts = append(parts, s)
	}
	if len(bootstrap) > 0 {
		var b strings.Builder
		b.WriteString("Context files from the farm (how its phones are set up; read them before you act):")
		for _, f := range bootstrap {
			b.WriteString("\n\n### " + f.Source + "/" + f.Name + "\n" + strings.TrimSpace(f.Text))
		}
		parts = append(parts, b.String())
	}
	if s := strings.TrimSpace(appendText); s != "" {
		parts = append(parts, s)
	}
	return strings.Join(parts, "\n\n")
}
