package modelsim

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
)

// listingHeader opens every rig element listing (docs/rig-contract.md, "The element listing").
const listingHeader = `id [kind] "label" [left,top,right,bottom] conf`

// retryMarker opens the note of a turn that only looks again; such turns do not advance the script.
const retryMarker = "(looking again)"

// element is one row of a rig listing.
type element struct {
	kind  string
	label string
	bbox  [4]float64
}

var listingRow = regexp.MustCompile(`^\d+ \[(icon|text)\] "(.*)" \[([\d.]+),([\d.]+),([\d.]+),([\d.]+)\] [\d.]+$`)

// transcript is what modelsim reads from a request: the trigger, how far the script has got
// and what the screen showed last. Everything is derived from the request, so the server keeps no state.
type transcript struct {
	trigger   string    // the text of every user message, joined
	turns     int       // assistant turns that advanced the script
	retries   int       // retry turns since the last advancing one
	listing   []element // the newest listing, nil if none yet
	turnIndex int       // every assistant turn, for unique call ids
}

func readTranscript(msgs []chatMessage) transcript {
	var t transcript
	var users []string
	for _, m := range msgs {
		switch m.Role {
		case "user":
			text := m.text()
			// The Messages wire joins the opening message and the fold
			// message into one user message, so look inside.
			if i := strings.Index(text, compaction.FoldHeader); i >= 0 {
				// The engine folded these turns into one line each: they
				// count as they did before the fold.
				sums, _ := compaction.FoldedSummaries(text[i:])
				users = append(users, text[:i])
				for _, s := range sums {
					t.turnIndex++
					if strings.HasPrefix(s, retryMarker) {
						t.retries++
					} else {
						t.turns++
						t.retries = 0
					}
				}
				continue
			}
			users = append(users, text)
		case "assistant":
			t.turnIndex++
			if isRetry(m) {
				t.retries++
			} else if len(m.ToolCalls) > 0 || m.text() != "" {
				t.turns++
				t.retries = 0
			}
		}
	}
	t.trigger = strings.Join(users, "\n")
	for i := len(msgs) - 1; i >= 0 && t.listing == nil; i-- {
		if msgs[i].Role == "tool" || msgs[i].Role == "user" {
			if l := parseListing(msgs[i].text()); len(l) > 0 {
				t.listing = l
			}
		}
	}
	return t
}

func isRetry(m chatMessage) bool {
	for _, c := range m.ToolCalls {
		if c.Function.Name != contract.ToolNote {
			continue
		}
		var a struct {
			Summary string `json:"summary"`
		}
		if json.Unmarshal([]byte(c.Function.Arguments), &a) == nil && strings.HasPrefix(a.Summary, retryMarker) {
			return true
		}
	}
	return false
}

// parseListing reads the last listing in a text; nil if there is none. Labels are quoted as
// they are, unescaped, so a label's own quotes stay inside the greedy match.
func parseListing(text string) []element {
	i := strings.LastIndex(text, listingHeader)
	if i < 0 {
		return nil
	}
	els := []element{}
	for _, line := range strings.Split(text[i+len(listingHeader):], "\n") {
		m := listingRow.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		e := element{kind: m[1], label: m[2]}
		for j := range 4 {
			e.bbox[j], _ = strconv.ParseFloat(m[3+j], 64)
		}
		els = append(els, e)
	}
	return els
}

// find resolves a label against the listing: an exact match, then a case-insensitive one,
// then one that contains it. occurrence picks among equal matches (1 first, -1 last).
func find(els []element, label string, occurrence int) (element, bool) {
	l := strings.ToLower(label)
	for _, match := range []func(string) bool{
		func(s string) bool { return s == label },
		func(s string) bool { return strings.ToLower(s) == l },
		func(s string) bool { return strings.Contains(strings.ToLower(s), l) },
	} {
		var hits []element
		for _, e := range els {
			if e.kind == "text" && match(e.label) {
				hits = append(hits, e)
			}
		}
		if len(hits) == 0 {
			continue
		}
		switch {
		case occurrence < 0 && -occurrence <= len(hits):
			return hits[len(hits)+occurrence], true
		case occurrence > 0 && occurrence <= len(hits):
			return hits[occurrence-1], true
		}
		return hits[0], true
	}
	return element{}, false
}

// shows reports whether any text element contains s.
func shows(els []element, s string) bool {
	_, ok := find(els, s, 0)
	return ok
}

// lockScreenLabels are what a locked phone shows; a step that needs the screen unlocks first.
var lockScreenLabels = []string{"Swipe up to unlock", "Enter Passcode", "Wrong Passcode"}
