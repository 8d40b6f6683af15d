package phone

import (
	"fmt"
	"time"
)

// timer is the Clock app's countdown timer.
type timer struct {
	selected time.Duration // the duration picked on the Timers tab
	running  bool
	paused   bool
	duration time.Duration // the duration it was started with
	endsAt   time.Time
	left     time.Duration // remaining while paused
	fired    bool
}

func (t *timer) tick(now time.Time) {
	if t.running && !t.paused && !now.Before(t.endsAt) {
		t.running, t.fired = false, true
	}
}

func (t *timer) remaining(now time.Time) time.Duration {
	switch {
	case !t.running:
		return 0
	case t.paused:
		return t.left
	}
	return max(0, t.endsAt.Sub(now))
}

// timerPresets are the durations the Timers tab offers.
var timerPresets = []time.Duration{time.Minute, 3 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute}

func clockTabs(current string) []Element {
	var els []Element
	for i, tab := range []struct{ label, page string }{
		{"World", "clock.world"}, {"Alarms", "clock.alarms"}, {"Stopwatch", "clock.stopwatch"}, {"Timers", "clock.timers"},
	} {
		e := centered(tab.label, 0.14+float64(i)*0.24, 0.93, 1).pinned()
		if tab.page == current {
			e = e.color("orange")
		}
		pg := tab.page
		els = append(els, e.onTap(func(p *Phone) { p.replaceTop(pg) }))
	}
	return els
}

func clockWorld(p *Phone, _ string) page {
	els := append(titleBar("World Clock", ""), clockTabs("clock.world")...)
	for i, c := range []struct {
		city   string
		offset time.Duration
	}{{"Cupertino", -8 * time.Hour}, {"London", 0}, {"Shanghai", 8 * time.Hour}} {
		y := contentTop + 0.02 + float64(i)*rowHeight*1.5
		els = append(els, textEl(c.city, marginX, y, 2), rightAligned(p.now.Add(c.offset).Format("15:04"), 0.86, y, 3))
	}
	return page{elements: els}
}

func clockAlarms(p *Phone, _ string) page {
	els := append(titleBar("Alarms", ""), clockTabs("clock.alarms")...)
	return page{elements: append(els, textEl("07:00", marginX, contentTop+0.02, 3), rightAligned("Off", 0.86, contentTop+0.03, 2).color("grey"))}
}

func clockStopwatch(p *Phone, _ string) page {
	els := append(titleBar("Stopwatch", ""), clockTabs("clock.stopwatch")...)
	return page{elements: append(els, centered("00:00.00", 0.5, 0.30, 4), centered("Start", 0.75, 0.50, 2).filled("green"))}
}

func clockTimers(p *Phone, _ string) page {
	t := &p.timer
	els := append(titleBar("Timers", ""), clockTabs("clock.timers")...)
	if t.running {
		els = append(els, centered(formatClock(t.remaining(p.now)), 0.5, 0.25, 5))
		pause := "Pause"
		if t.paused {
			pause = "Resume"
		}
		els = append(els,
			centered("Cancel", 0.25, 0.50, 2).filled("grey").onTap(func(p *Phone) { p.timer.running, p.timer.paused = false, false }),
			centered(pause, 0.75, 0.50, 2).filled("orange").onTap(func(p *Phone) { p.timer.togglePause(p.now) }),
		)
		return page{elements: els}
	}
	if t.fired {
		els = append(els, centered("Timer done", 0.5, 0.16, 2).color("orange"))
	}
	els = append(els, centered(formatClock(t.selected), 0.5, 0.22, 5))
	for i, d := range timerPresets {
		cx, y := 0.2+float64(i%3)*0.3, 0.36+float64(i/3)*0.08
		dur := d
		e := centered(fmt.Sprintf("%d min", int(d.Minutes())), cx, y, 2).onTap(func(p *Phone) { p.timer.selected = dur })
		if d == t.selected {
			e = e.filled("orange")
		}
		els = append(els, e)
	}
	start := centered("Start", 0.5, 0.58, 3).filled("green").onTap(func(p *Phone) { p.timer.start(p.now) })
	return page{elements: append(els, start)}
}

func (t *timer) start(now time.Time) {
	if t.selected == 0 {
		return
	}
	t.running, t.paused, t.fired = true, false, false
	t.duration, t.endsAt = t.selected, now.Add(t.selected)
}

func (t *timer) togglePause(now time.Time) {
	if t.paused {
		t.paused, t.endsAt = false, now.Add(t.left)
		return
	}
	t.paused, t.left = true, t.endsAt.Sub(now)
}

func formatClock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%02d:%02d:%02d", s/3600, s/60%60, s%60)
}
