package rigsim

import (
	"math/rand/v2"
	"testing"

	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// Every row matches the contract's format (checked by parseListing), ids run 0,1,2… top-to-bottom,
// left-to-right, icons have no label and text always has one, on every screen the apps have.
func TestListingFormatOnEveryScreen(t *testing.T) {
	tr := startRig(t, Config{})
	check := func(where string, rows []row) {
		t.Helper()
		for i, r := range rows {
			if r.id != i {
				t.Fatalf("%s: row %d has id %d, want ids renumbered from 0", where, i, r.id)
			}
			if (r.kind == "icon") != (r.label == "") {
				t.Fatalf("%s: row %+v: icons have empty labels, text has a label", where, r)
			}
			if r.box[0] >= r.box[2] || r.box[1] >= r.box[3] {
				t.Fatalf("%s: row %+v has an empty box", where, r)
			}
			if i > 0 {
				p := rows[i-1]
				if r.box[1] < p.box[1]-rowTolerance || (r.box[1] <= p.box[1]+rowTolerance && r.box[1] >= p.box[1]-rowTolerance && r.box[0] < p.box[0]) {
					t.Fatalf("%s: row %d %+v comes after %+v: want top-to-bottom, left-to-right", where, i, r, p)
				}
			}
		}
	}
	check("home", tr.call(t, "peek", nil).listing(t))
	for _, app := range []string{"Clock", "Settings", "Messages", "Shop"} {
		res := tr.tapLabel(t, app)
		check(app, res.listing(t))
		tr.call(t, "home_screen", nil)
	}
}

// Ids are per frame: the same element gets a new id when the screen around it changes.
func TestIdsAreRenumberedEveryFrame(t *testing.T) {
	tr := startRig(t, Config{})
	home := tr.call(t, "peek", nil).listing(t)
	settings := tr.tapLabel(t, "Settings").listing(t)
	if settings[0].id != 0 || len(settings) == len(home) && settings[len(settings)-1].id != len(home)-1 {
		t.Fatalf("ids do not restart at 0 on a new frame")
	}
	if find(t, settings, "Wi-Fi").id == find(t, home, "Weather").id {
		t.Log("ids may coincide; what matters is that they are dense per frame")
	}
	if last := settings[len(settings)-1].id; last != len(settings)-1 {
		t.Fatalf("last id %d in a listing of %d rows", last, len(settings))
	}
}

func TestFormatListingRow(t *testing.T) {
	els := []seen{
		{kind: phone.Text, label: "Settings", box: phone.Box{L: 0.51, T: 0.55, R: 0.59, B: 0.63}, conf: 0.96},
		{kind: phone.Icon, box: phone.Box{L: 0.1, T: 0.2, R: 0.3, B: 0.4}, conf: 0.8},
	}
	got := formatListing(els)
	want := ListingHeader + "\n0 [text] \"Settings\" [0.510,0.550,0.590,0.630] 0.96\n1 [icon] \"\" [0.100,0.200,0.300,0.400] 0.80"
	if got != want {
		t.Fatalf("formatListing =\n%s\nwant\n%s", got, want)
	}
	sorted := look([]phone.Element{
		{Kind: phone.Text, Label: "B", Box: phone.Box{L: 0.5, T: 0.3, R: 0.6, B: 0.35}},
		{Kind: phone.Text, Label: "A", Box: phone.Box{L: 0.1, T: 0.302, R: 0.2, B: 0.35}},
		{Kind: phone.Text, Label: "top", Box: phone.Box{L: 0.8, T: 0.1, R: 0.9, B: 0.15}},
	}, 0, rand.New(rand.NewPCG(1, 1)))
	if sorted[0].label != "top" || sorted[1].label != "A" || sorted[2].label != "B" {
		t.Fatalf("order = %v, want top, then the row left to right", sorted)
	}
}
