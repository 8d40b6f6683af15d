package claw

import (
	"bytes"
	"testing"
)

// On a terminal the bar stays under the lines: each line clears it, is
// written, and the bar is drawn again; off a terminal only lines are written.
func TestPrinterKeepsTheBarUnderTheLines(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := &printer{w: &b, tty: true}
	p.Bar(progressBar(12, 48))
	p.Line("t12  note: opening Settings")
	p.Bar(progressBar(13, 48))
	p.ClearBar()
	p.Line("DONE  done")
	bar12 := "[██████░░░░░░░░░░░░░░░░░░]  12/48"
	bar13 := "[██████░░░░░░░░░░░░░░░░░░]  13/48"
	want := "\r\033[K" + bar12 + "\r\033[K" + "t12  note: opening Settings\n" + bar12 + "\r\033[K" + bar13 + "\r\033[K" + "DONE  done\n"
	if b.String() != want {
		t.Errorf("terminal output:\n got %q\nwant %q", b.String(), want)
	}

	b.Reset()
	p = &printer{w: &b, tty: false}
	p.Bar(progressBar(12, 48))
	p.Line("t12  note: opening Settings")
	p.ClearBar()
	if b.String() != "t12  note: opening Settings\n" {
		t.Errorf("plain output: %q", b.String())
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		turn, max int32
		want      string
	}{
		{0, 300, "[░░░░░░░░░░░░░░░░░░░░░░░░]  0/300"},
		{150, 300, "[████████████░░░░░░░░░░░░]  150/300"},
		{300, 300, "[████████████████████████]  300/300"},
		{400, 300, "[████████████████████████]  400/300"},
		{3, 0, "[████████████████████████]  3/1"},
	} {
		if got := progressBar(c.turn, c.max); got != c.want {
			t.Errorf("progressBar(%d, %d) = %q, want %q", c.turn, c.max, got, c.want)
		}
	}
}
