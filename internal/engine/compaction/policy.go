package compaction

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// The numbers (docs/engine.md, "Compaction": the first fold at 30 complete
// turns, the newest 10 always kept whole, then a fold every 20 turns).
const (
	// FoldAt complete turns in the transcript trigger a fold (the default cadence).
	FoldAt = 30
	// KeepTurns are kept whole by a fold; the next fold comes FoldAt-KeepTurns (20) turns later.
	KeepTurns = 10
	// MaxResultChars is the largest tool result that enters the transcript
	// whole; longer ones keep their head and tail (docs/engine.md, "Compaction", truncation).
	MaxResultChars = 16000
	// ResultHead and ResultTail are what a truncated result keeps.
	ResultHead = 10000
	ResultTail = 4000
	// OverflowResultChars is what overflow compaction cuts every long result to
	// when there is no turn left to fold (ours).
	OverflowResultChars = 2000
)

// The tools whose results a fold keeps verbatim: what the agent loaded from
// the rig's memory and logs, and the skills it loaded (docs/engine.md).
var (
	MemoryTools = map[string]bool{contract.ToolReadMemory: true, contract.ToolReadLogs: true}
	SkillTools  = map[string]bool{contract.ToolSkill: true}
)

// The fold message: one user message right after the opening one, with three slots.
const (
	FoldHeader    = "[Folded: the older turns of this session, compacted. Summaries are your notes from those turns; memory and skill loads are kept verbatim.]"
	slotSummaries = "<<summaries>>"
	slotMemory    = "<<memory loads>>"
	slotSkills    = "<<skill loads>>"
	loadSep       = "\n-----\n"
	SupersededTag = provider.SupersededTag
)

// Policy is the compaction of docs/engine.md, "Compaction": latest screen
// wins, and turn folds into three slots near the top. It keeps no state:
// everything it needs is in the transcript, so a resumed session compacts
// exactly as the first did.
//
// At and Keep are the fold cadence (zero: FoldAt and KeepTurns): a fold
// comes at At complete turns and keeps the newest Keep whole, so the next
// comes At-Keep turns later. A fold rewrites the head of the transcript and
// so spends the provider's prompt cache; the cadence weighs that against the
// growth of the request (docs/engine.md, "Prompt caching and the fold policy").
type Policy struct {
	At, Keep int
}

func (p Policy) cadence() (at, keep int) {
	if p.At <= 0 || p.Keep <= 0 || p.Keep >= p.At {
		return FoldAt, KeepTurns
	}
	return p.At, p.Keep
}

// Compact applies latest-screen-wins always, folds at At complete turns,
// and on preflight or overflow folds harder: half of the turns left, then
// long results cut to OverflowResultChars.
func (p Policy) Compact(_ context.Context, why Trigger, _ int, msgs []provider.Message) ([]provider.Message, bool, error) {
	at, keep := p.cadence()
	out, changed := LatestScreen(msgs)
	head, turns := split(out)
	switch {
	case len(turns) >= at:
		out, changed = fold(head, turns, keep), true
	case why != BeforeRequest && len(turns) > 1:
		out, changed = fold(head, turns, min(keep, len(turns)/2)), true
	case why != BeforeRequest:
		var cut bool
		out, cut = cutResults(out, OverflowResultChars)
		changed = changed || cut
	}
	return out, changed, nil
}

// Nudge asks for the scratchpad in the turn before a fold.
func (p Policy) Nudge(msgs []provider.Message) string {
	at, keep := p.cadence()
	if _, turns := split(msgs); len(turns) == at-1 {
		return fmt.Sprintf("[Compaction after this turn: all but the newest %d turns fold into one-line summaries and their "+
			"screens and results are dropped. Write anything you still need from them into the scratchpad now (note's scratchpad argument).]", keep)
	}
	return ""
}

// split cuts a transcript into its head (everything before the first
// assistant message: the opening message and the fold message) and its
// turns (an assistant message and what follows it up to the next one).
func split(msgs []provider.Message) (head []provider.Message, turns [][]provider.Message) {
	i := 0
	for i < len(msgs) && msgs[i].Role != provider.RoleAssistant {
		i++
	}
	head = msgs[:i]
	for i < len(msgs) {
		j := i + 1
		for j < len(msgs) && msgs[j].Role != provider.RoleAssistant {
			j++
		}
		turns = append(turns, msgs[i:j])
		i = j
	}
	return head, turns
}

// fold keeps the newest keep turns and folds the older ones into the fold message.
func fold(head []provider.Message, turns [][]provider.Message, keep int) []provider.Message {
	folded := turns[:len(turns)-keep]
	var sums, mems, skills []string
	foldAt := -1
	for i, m := range head {
		if m.Role == provider.RoleUser && strings.HasPrefix(m.Text, FoldHeader) {
			foldAt = i
			sums, mems, skills = parseFold(m.Text)
		}
	}
	for _, t := range folded {
		sum := "(a turn without a note)"
		for _, c := range t[0].ToolCalls {
			if c.Name == contract.ToolNote {
				var a struct{ Summary string }
				if json.Unmarshal([]byte(c.Arguments), &a) == nil && a.Summary != "" {
					sum = strings.Join(strings.Fields(a.Summary), " ")
				}
			}
		}
		sums = append(sums, "- "+sum)
		for _, m := range t[1:] {
			if m.Role != provider.RoleTool || m.IsError {
				continue
			}
			switch {
			case MemoryTools[m.ToolName]:
				mems = addOnce(mems, m.Text)
			case SkillTools[m.ToolName]:
				skills = addOnce(skills, m.Text)
			}
		}
	}
	text := renderFold(sums, mems, skills)
	out := make([]provider.Message, 0, len(head)+1+keep*4)
	if foldAt >= 0 {
		out = append(out, head...)
		out[foldAt] = provider.Message{Role: provider.RoleUser, Text: text}
	} else {
		n := min(1, len(head)) // right after the opening message
		out = append(out, head[:n]...)
		out = append(out, provider.Message{Role: provider.RoleUser, Text: text})
		out = append(out, head[n:]...)
	}
	for _, t := range turns[len(turns)-keep:] {
		out = append(out, t...)
	}
	return out
}

func addOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func renderFold(sums, mems, skills []string) string {
	var b strings.Builder
	b.WriteString(FoldHeader)
	b.WriteString("\n" + slotSummaries + "\n" + strings.Join(sums, "\n"))
	b.WriteString("\n" + slotMemory + "\n" + strings.Join(mems, loadSep))
	b.WriteString("\n" + slotSkills + "\n" + strings.Join(skills, loadSep))
	return b.String()
}

// FoldedSummaries reads a fold message: the one-line summary of each folded
// turn, oldest first, without the "- " they are listed with; ok is false
// when text is not a fold message. modelsim counts a folded script's
// turns with it.
func FoldedSummaries(text string) (sums []string, ok bool) {
	if !strings.HasPrefix(text, FoldHeader) {
		return nil, false
	}
	raw, _, _ := parseFold(text)
	for _, s := range raw {
		sums = append(sums, strings.TrimPrefix(s, "- "))
	}
	return sums, true
}

func parseFold(text string) (sums, mems, skills []string) {
	section := func(start, end string) string {
		_, rest, ok := strings.Cut(text, "\n"+start+"\n")
		if !ok {
			return ""
		}
		if end != "" {
			rest, _, _ = strings.Cut(rest, "\n"+end+"\n")
		}
		return rest
	}
	nonEmpty := func(parts []string) []string {
		var out []string
		for _, p := range parts {
			if strings.TrimSpace(p) != "" {
				out = append(out, p)
			}
		}
		return out
	}
	sums = nonEmpty(strings.Split(section(slotSummaries, slotMemory), "\n"))
	mems = nonEmpty(strings.Split(section(slotMemory, slotSkills), loadSep))
	skills = nonEmpty(strings.Split(section(slotSkills, ""), loadSep))
	return sums, mems, skills
}

var labelRow = regexp.MustCompile(`^\s*\d+ \[text\] "(.*)" \[`)

// LatestScreen keeps the images of the newest image-bearing message only.
// Every older screen's message is removed and the tool result it came from
// becomes a "(superseded <tool>)" stub with its action line and text labels.
func LatestScreen(msgs []provider.Message) ([]provider.Message, bool) {
	last := -1
	older := 0
	for i := range msgs {
		if len(msgs[i].Images) > 0 {
			if last >= 0 {
				older++
			}
			last = i
		}
	}
	if older == 0 {
		return msgs, false
	}
	out := make([]provider.Message, 0, len(msgs))
	for i, m := range msgs {
		if len(m.Images) == 0 || i == last {
			out = append(out, m)
			continue
		}
		if m.Role != provider.RoleUser {
			m.Images = nil // not ours to drop: keep the message, lose the picture
			out = append(out, m)
			continue
		}
		// The result the screen came from: the newest non-note result before it.
		for k := len(out) - 1; k >= 0 && out[k].Role == provider.RoleTool; k-- {
			if out[k].ToolName != contract.ToolNote {
				out[k].Text = Stub(out[k].ToolName, out[k].Text)
				break
			}
		}
	}
	return out, true
}

// Stub is a superseded screen's result: the tool, the action line and the text labels.
func Stub(tool, text string) string {
	if strings.HasPrefix(text, SupersededTag) {
		return text
	}
	var action string
	var labels []string
	for i, line := range strings.Split(text, "\n") {
		if m := labelRow.FindStringSubmatch(line); m != nil {
			if m[1] != "" {
				labels = append(labels, `"`+m[1]+`"`)
			}
			continue
		}
		if i == 0 && !strings.HasPrefix(line, "id [kind]") {
			action = strings.TrimSpace(line)
		}
	}
	s := SupersededTag + tool + ")"
	if action != "" {
		s += " " + action
	}
	if len(labels) > 0 {
		s += "\nlabels: " + strings.Join(labels, ", ")
	}
	return s
}

// cutResults cuts every tool result longer than n to its head and tail.
func cutResults(msgs []provider.Message, n int) ([]provider.Message, bool) {
	var out []provider.Message
	for i, m := range msgs {
		if m.Role != provider.RoleTool || len(m.Text) <= n+cutMarkerRoom {
			continue
		}
		if out == nil {
			out = append([]provider.Message(nil), msgs...)
		}
		out[i].Text = HeadTail(m.Text, n*2/3, n/3)
	}
	if out == nil {
		return msgs, false
	}
	return out, true
}

// cutMarkerRoom is room for HeadTail's marker, so a cut result is not cut again.
const cutMarkerRoom = 80

// HeadTail keeps the first head and last tail bytes of s (on rune
// boundaries) with a marker saying how much was cut between them.
func HeadTail(s string, head, tail int) string {
	if len(s) <= head+tail {
		return s
	}
	h, t := head, len(s)-tail
	for h > 0 && !utf8RuneStart(s[h]) {
		h--
	}
	for t < len(s) && !utf8RuneStart(s[t]) {
		t++
	}
	return s[:h] + fmt.Sprintf("\n…[%d characters cut from the middle of this result]…\n", t-h) + s[t:]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Truncator is the hook that cuts an oversized tool result head-and-tail
// before it enters the transcript.
type Truncator struct{ hooks.Base }

// ToolResultPersist cuts a result over MaxResultChars.
func (Truncator) ToolResultPersist(_ context.Context, _ hooks.ToolCall, r *hooks.ToolResult) {
	if len(r.Text) > MaxResultChars {
		r.Text = HeadTail(r.Text, ResultHead, ResultTail)
	}
}
