package wire

import "testing"

func TestVerdictOf(t *testing.T) {
	for _, c := range []struct {
		first string
		want  Verdict
	}{
		// PhysiClaw's one line.
		{"Tapped at bbox [0.4, 0.4, 0.6, 0.5] | screen: changed — read the attached view: did the value/state you targeted change?", Changed},
		{"Swiped up m at bbox [0.4, 0.4, 0.6, 0.5] | screen: no visible change — the attached view shows the page after the swipe", Unchanged},
		// Its sequence: the verdict after the last step, the hint on a line of its own.
		{"1 tap ok — Tapped at bbox [0.4, 0.4, 0.6, 0.5]\n2 tap ok — Tapped at bbox [0.1, 0.1, 0.2, 0.2] | screen: no visible change \n— the attached view shows the state after the final step", Unchanged},
		// The verdict withheld: frames that could not be compared.
		{"Tapped at bbox [0.4, 0.4, 0.6, 0.5] — read the attached view: did the value/state you targeted change?", None},
		{"Tapped at bbox [0.4, 0.4, 0.6, 0.5] — read the attached view (auto-view unavailable — `peek` to see the screen)", None},
		// The older form: a line each.
		{"Tapped at bbox [0.4, 0.4, 0.6, 0.5]\nscreen: no visible change\nhint: the gesture may have missed", Unchanged},
		{"Tapped at bbox [0.4, 0.4, 0.6, 0.5]\nscreen: changed\nhint: plan the next move", Changed},
		// Words that only look like a verdict.
		{`Copied 25 chars to phone clipboard — now paste it`, None},
		{`14 [text] "screen: no visible change" [0.510,0.550,0.590,0.630] 0.96`, None},
		{"", None},
	} {
		if got := VerdictOf(c.first); got != c.want {
			t.Errorf("VerdictOf(%q) = %q, want %q", c.first, got, c.want)
		}
	}
}

func TestKindsOfFailure(t *testing.T) {
	for _, c := range []struct {
		text           string
		busy, notSetUp bool
	}{
		{"Error executing tool tap: PhysiClaw is busy — wait for the current operation to finish, then retry.", true, false},
		{"Error executing tool tap: busy, retry: the rig is running another gesture", true, false},
		{"Error executing tool peek: Hardware not set up. Run /setup to connect and calibrate.", false, true},
		{"Error executing tool peek: hardware not set up: the arm, camera or calibration is missing", false, true},
		{"Error executing tool tap: Arm work frame is not pinned to the calibration — restart the server (--hot-start with the arm at its park spot), or recalibrate.", false, true},
		{"Error executing tool send_to_clipboard: AssistiveTouch not calibrated — run /setup first", false, true},
		{"Error executing tool tap: tap target [0.88, 0.88, 0.92, 0.92] overlaps AssistiveTouch button — aim aside", false, false},
		{"Unknown tool: fly", false, false},
	} {
		if got := IsBusy(c.text); got != c.busy {
			t.Errorf("IsBusy(%q) = %v, want %v", c.text, got, c.busy)
		}
		if got := IsNotSetUp(c.text); got != c.notSetUp {
			t.Errorf("IsNotSetUp(%q) = %v, want %v", c.text, got, c.notSetUp)
		}
	}
}

func TestFirst(t *testing.T) {
	joined := "Tapped at bbox [0.4, 0.4, 0.6, 0.5] | screen: changed — look\n" +
		`id [kind] "label" [left,top,right,bottom] conf` + "\n" + `0 [text] "screen: no visible change" [0.1,0.1,0.2,0.2] 0.90`
	if got := VerdictOf(First(joined)); got != Changed {
		t.Errorf("the joined answer's verdict: %q, want changed (the listing's row is the phone's text)", got)
	}
}
