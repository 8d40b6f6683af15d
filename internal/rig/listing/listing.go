// Package listing reads the element listing a rig returns with every view
// (docs/rig-contract.md, "What comes back"). It imports nothing, so the
// manager may use it without the rig client.
package listing

import (
	"regexp"
	"strconv"
	"strings"
)

// Header opens the element listing peek, screenshot and every gesture
// with a view return (docs/rig-contract.md, "What comes back").
const Header = `id [kind] "label" [left,top,right,bottom] conf`

// Element is one row of a listing: ids are renumbered 0,1,2… every frame.
type Element struct {
	ID    int    `json:"id"`
	Kind  string `json:"kind"` // icon or text
	Label string `json:"label"`
	// BBox is [left, top, right, bottom], fractions of the screen.
	BBox [4]float64 `json:"bbox"`
	Conf float64    `json:"conf"`
}

// Contains reports whether the point (x, y) lies in the element's box.
func (e Element) Contains(x, y float64) bool {
	return x >= e.BBox[0] && x <= e.BBox[2] && y >= e.BBox[1] && y <= e.BBox[3]
}

// listingRow is one row; the label is quoted as it is, unescaped, so a
// label's own quotes stay inside the greedy match.
var listingRow = regexp.MustCompile(`^(\d+) \[(\w+)\] "(.*)" \[([-0-9.]+),([-0-9.]+),([-0-9.]+),([-0-9.]+)\] ([0-9.]+)$`)

// Parse reads the last listing in a tool result's text: nil when the
// text has none, the rows it could read otherwise (a row it cannot read is
// left out, never guessed).
func Parse(text string) []Element {
	i := strings.LastIndex(text, Header)
	if i < 0 {
		return nil
	}
	out := []Element{}
	for _, line := range strings.Split(text[i+len(Header):], "\n") {
		m := listingRow.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		e := Element{Kind: m[2], Label: m[3]}
		e.ID, _ = strconv.Atoi(m[1])
		for j := range 4 {
			e.BBox[j], _ = strconv.ParseFloat(m[4+j], 64)
		}
		e.Conf, _ = strconv.ParseFloat(m[8], 64)
		out = append(out, e)
	}
	return out
}
