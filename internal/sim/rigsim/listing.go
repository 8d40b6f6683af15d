package rigsim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// ListingHeader is the first line of every element listing (docs/rig-contract.md, "The element listing").
const ListingHeader = `id [kind] "label" [left,top,right,bottom] conf`

// rowTolerance groups elements whose tops differ by less than this into one row when numbering.
const rowTolerance = 0.005

// seen is one element as the rig's vision reports it.
type seen struct {
	kind  phone.Kind
	label string
	box   phone.Box
	conf  float64
}

// look turns what the phone draws into what the vision sees: glare drops or misreads text.
func look(els []phone.Element, glare float64, rng *rand.Rand) []seen {
	out := make([]seen, 0, len(els))
	for _, e := range els {
		s := seen{kind: e.Kind, label: e.Label, box: clampBox(e.Box), conf: confidence(e)}
		if e.Kind == phone.Icon {
			s.label = ""
		}
		if e.Kind == phone.Text && glare > 0 && rng.Float64() < glare {
			if rng.Float64() < 0.5 {
				continue // washed out: the OCR missed it
			}
			s.label, s.conf = misread(s.label), 0.35+0.3*rng.Float64()
		}
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(a, b seen) int {
		if d := a.box.T - b.box.T; d < -rowTolerance || d > rowTolerance {
			return cmpFloat(a.box.T, b.box.T)
		}
		return cmpFloat(a.box.L, b.box.L)
	})
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// formatListing renders the listing: the header, then one row per element, ids renumbered from 0.
func formatListing(els []seen) string {
	var b strings.Builder
	b.WriteString(ListingHeader)
	for i, e := range els {
		// The label goes in quotes as it is, unescaped, as PhysiClaw prints it.
		fmt.Fprintf(&b, "\n%d [%s] \"%s\" [%.3f,%.3f,%.3f,%.3f] %.2f", i, e.kind, e.label, e.box.L, e.box.T, e.box.R, e.box.B, e.conf)
	}
	return b.String()
}

// confidence is a stable per-element score, as a detector gives the same element the same score.
func confidence(e phone.Element) float64 {
	h := fnv.New32a()
	h.Write([]byte(e.Label))
	n := float64(h.Sum32() % 10)
	if e.Kind == phone.Icon {
		return 0.80 + n/100
	}
	return 0.90 + n/100
}

// misreadPairs are the confusions OCR makes under glare.
var misreadPairs = strings.NewReplacer("o", "0", "l", "1", "e", "c", "S", "5", "i", "l", "a", "o", "B", "8")

func misread(s string) string {
	if m := misreadPairs.Replace(s); m != s {
		return m
	}
	return s + "."
}

func clampBox(b phone.Box) phone.Box {
	c := func(v float64) float64 { return min(max(v, 0), 1) }
	return phone.Box{L: c(b.L), T: c(b.T), R: c(b.R), B: c(b.B)}
}
