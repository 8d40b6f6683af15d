// Package wire reads what a rig's answers say beyond their text: the verdict
// of a gesture, and the kinds of failure the loop acts on (a busy rig, a rig
// that is not set up). Both forms a rig writes are read: PhysiClaw's one line
// (`Tapped at bbox [...] | screen: changed — hint`) and the older form of one
// line each for the action, the verdict and the hint (docs/rig-contract.md,
// "What comes back" and "The wire, as the real server writes it").
//
// Only the first text block of a result is ever read, as PhysiClaw itself
// reads it: the element listing that follows is the phone's own text, and an
// app that shows the words "screen: no visible change" or "busy" must not
// trip the stuck guard or a retry.
package wire

import (
	"strings"

	"github.com/clawfarm/clawfarm/internal/rig/listing"
)

// Verdict is what a gesture's result says about the screen.
type Verdict string

// The verdicts. None is a result that says nothing: a look, an error, or a
// gesture whose before and after frames could not be compared (blur, the
// camera re-tuning its exposure).
const (
	None      Verdict = ""
	Changed   Verdict = "changed"
	Unchanged Verdict = "unchanged"
)

// The verdict phrases as a rig writes them.
const (
	ChangedText   = "screen: changed"
	UnchangedText = "screen: no visible change"
)

// VerdictOf reads the verdict from a result's first text block.
func VerdictOf(first string) Verdict {
	for line := range strings.SplitSeq(first, "\n") {
		line = strings.TrimSpace(line)
		// PhysiClaw's form: the verdict follows the action after " | " and
		// ends at " — ", where the hint starts.
		if _, rest, ok := strings.Cut(line, " | "); ok {
			line, _, _ = strings.Cut(rest, " — ")
			line = strings.TrimSpace(line)
		}
		switch line {
		case ChangedText:
			return Changed
		case UnchangedText:
			return Unchanged
		}
	}
	return None
}

// IsBusy says whether an error's first text block is the rig's busy lock
// refusing a call: PhysiClaw's "… is busy — wait for the current operation to
// finish, then retry.", rigsim's "busy, retry: …".
func IsBusy(first string) bool { return strings.Contains(strings.ToLower(first), "busy") }

// IsNotSetUp says whether an error's first text block is a rig that is not
// set up (its arm or camera not connected, or not calibrated): PhysiClaw
// answers every tool so until its set-up is done. No call can work on it,
// and no turn of the agent's can change that.
func IsNotSetUp(first string) bool {
	low := strings.ToLower(first)
	for _, p := range notSetUp {
		if strings.Contains(low, p) {
			return true
		}
	}
	return false
}

// notSetUp are the phrases of a rig that is not set up, lower case: its
// hardware (PhysiClaw's "Hardware not set up…", rigsim's too), an arm whose
// work frame is not pinned to the calibration, and an AssistiveTouch button
// that was never calibrated.
var notSetUp = []string{"hardware not set up", "work frame is not pinned", "assistivetouch not calibrated"}

// First is the first text block of an answer that a trace holds only as
// its joined text: what comes before the element listing's header.
func First(joined string) string {
	if i := strings.Index(joined, listing.Header); i >= 0 {
		return joined[:i]
	}
	return joined
}
