package state

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Cron is a parsed 5-field cron expression, "M H D Mon W", in UTC (the
// operator's CronJobs use time zone Etc/UTC). It is parsed and evaluated by
// robfig/cron's ParseStandard, the parser the Kubernetes CronJob controller
// uses, so a job's schedule fires here exactly when its CronJob does.
type Cron struct {
	expr  string
	sched cron.Schedule
}

var cronFields = []string{"minute", "hour", "day of month", "month", "day of week"}

const cronHelp = `write "M H D Mon W" in UTC with numbers: minute 0-59, hour 0-23, day of month 1-31, month 1-12, ` +
	`day of week 0-6 (0 is Sunday); each field is *, a number, a range a-b, a list a,b or a step */n or a-b/n, e.g. "30 9 * * 1-5"`

// ParseCron parses "M H D Mon W": numbers, *, ranges a-b, steps */n and a-b/n,
// and lists. Names (MON, JAN), ? and descriptors (@daily, TZ=) are refused,
// though the CronJob would take them: with numbers as the one spelling, the
// one-time check can read a schedule field by field.
func ParseCron(expr string) (*Cron, error) {
	f := strings.Fields(expr)
	if len(f) != 5 {
		return nil, fmt.Errorf("schedule %q is not a 5-field cron expression \"M H D Mon W\" (UTC), e.g. \"30 9 * * *\"", expr)
	}
	for i, field := range f {
		if strings.IndexFunc(field, func(r rune) bool { return !strings.ContainsRune("0123456789*,-/", r) }) >= 0 {
			return nil, fmt.Errorf("schedule %q: %s field %q: use numbers, *, ranges a-b, lists a,b and steps /n only "+
				"(names like MON or JAN are not accepted); %s", expr, cronFields[i], field, cronHelp)
		}
	}
	norm := strings.Join(f, " ")
	s, err := cron.ParseStandard(norm)
	if err != nil {
		// The library's error names the bad value but not its field: find
		// the field by parsing it alone.
		for i := range f {
			probe := []string{"*", "*", "*", "*", "*"}
			probe[i] = f[i]
			if _, ferr := cron.ParseStandard(strings.Join(probe, " ")); ferr != nil {
				return nil, fmt.Errorf("schedule %q: %s field %q: %v; %s", expr, cronFields[i], f[i], ferr, cronHelp)
			}
		}
		return nil, fmt.Errorf("schedule %q: %v; %s", expr, err, cronHelp)
	}
	return &Cron{expr: norm, sched: s}, nil
}

// String is the normalised expression.
func (c *Cron) String() string { return c.expr }

// Next is the first fire time strictly after t, in UTC; false when there is
// none within five years of t (as far as the library looks).
func (c *Cron) Next(t time.Time) (time.Time, bool) {
	n := c.sched.Next(t.UTC())
	return n, !n.IsZero()
}

// MinGap is the smallest gap between two consecutive fire times from now on
// (see closest), or 0 when the schedule does not fire twice.
func (c *Cron) MinGap() time.Duration {
	a, b, ok := c.closest(time.Now())
	if !ok {
		return 0
	}
	return b.Sub(a)
}

// gapYears bounds the search for two fire times on different days: between
// 1901 and 2099 the calendar repeats every 28 years (dates with their
// weekdays, leap days included), so 28 years show every pair of days a
// schedule can fire on back to back.
const gapYears = 28

const day = 24 * time.Hour

// closest returns the two consecutive fire times that are closest together,
// from the first day on or after from that fires; ok is false when the
// schedule does not fire twice.
//
// Walking every fire time for a long stretch would take hundreds of
// thousands of Next calls for a frequent schedule, so the walk follows the
// shape of a 5-field schedule instead. The minute and hour fields alone pick
// the times of day, and UTC has no daylight saving, so every day that fires
// fires at the same times: one day's fire times (at most 1440) give every
// gap within a day. Every other gap runs from a day's last fire to the first
// fire of the next day that fires, k days later; it is k days minus the
// day's span from first to last fire, smallest for the closest two firing
// days. Those are found by stepping Next from day to day (one call per
// firing day, for up to gapYears), and only when such a gap could beat the
// gaps within a day.
func (c *Cron) closest(from time.Time) (a, b time.Time, ok bool) {
	first, fires := c.Next(from)
	if !fires {
		return a, b, false
	}
	d0 := midnight(first)
	var times []time.Time // the fire times on d0
	for t := d0.Add(-time.Second); ; {
		n, fires := c.Next(t)
		if !fires || !n.Before(d0.Add(day)) {
			break
		}
		times = append(times, n)
		t = n
	}
	for i := 1; i < len(times); i++ {
		if !ok || times[i].Sub(times[i-1]) < b.Sub(a) {
			a, b, ok = times[i-1], times[i], true
		}
	}
	span := times[len(times)-1].Sub(times[0])
	if ok && b.Sub(a) <= day-span {
		return a, b, ok // no gap across midnight can be smaller
	}
	end := d0.AddDate(gapYears, 0, 0)
	for d := d0; ; {
		n, fires := c.Next(d.Add(day - time.Second)) // the first fire on a later day
		if !fires || !n.Before(end) {
			break
		}
		last := d.Add(times[len(times)-1].Sub(d0))
		if !ok || n.Sub(last) < b.Sub(a) {
			a, b, ok = last, n, true
		}
		if n.Sub(last) == day-span {
			break // back-to-back days: the smallest gap across midnight
		}
		d = midnight(n)
	}
	return a, b, ok
}

func midnight(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// single reports whether field i is one plain number.
func single(expr string, i int) bool {
	f := strings.Fields(expr)
	_, err := strconv.Atoi(f[i])
	return err == nil
}

// clock names fire time t as a time of day in UTC, adding "the next day"
// when it falls on a later day than ref (the two are less than a day apart).
func clock(ref, t time.Time) string {
	s := t.UTC().Format("15:04") + " UTC"
	if !midnight(t.UTC()).Equal(midnight(ref.UTC())) {
		s += " the next day"
	}
	return s
}
