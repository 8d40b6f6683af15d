package state

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed 5-field cron expression, "M H D Mon W", in UTC (the
// operator's CronJobs use time zone Etc/UTC).
type Cron struct {
	expr                     string
	min, hour, dom, mon, dow []bool
	domStar, dowStar         bool
}

var cronFields = []struct {
	name   string
	lo, hi int
}{{"minute", 0, 59}, {"hour", 0, 23}, {"day of month", 1, 31}, {"month", 1, 12}, {"day of week", 0, 7}}

// ParseCron parses "M H D Mon W": numbers, *, ranges a-b, steps */n and a-b/n, and lists.
func ParseCron(expr string) (*Cron, error) {
	f := strings.Fields(expr)
	if len(f) != 5 {
		return nil, fmt.Errorf("schedule %q is not a 5-field cron expression \"M H D Mon W\" (UTC), e.g. \"30 9 * * *\"", expr)
	}
	c := &Cron{expr: strings.Join(f, " ")}
	sets := make([][]bool, 5)
	for i, spec := range cronFields {
		s, err := parseCronField(f[i], spec.lo, spec.hi)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %s field %q: %v", expr, spec.name, f[i], err)
		}
		sets[i] = s
	}
	if sets[4][7] {
		sets[4][0] = true // 7 is Sunday too
	}
	c.min, c.hour, c.dom, c.mon, c.dow = sets[0], sets[1], sets[2], sets[3], sets[4]
	c.domStar, c.dowStar = f[2] == "*", f[4] == "*"
	return c, nil
}

func parseCronField(s string, lo, hi int) ([]bool, error) {
	set := make([]bool, hi+1)
	for _, part := range strings.Split(s, ",") {
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("step %q is not a positive number", stepText)
			}
			step = n
		}
		a, b := lo, hi
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			x, y, _ := strings.Cut(rng, "-")
			var err1, err2 error
			a, err1 = strconv.Atoi(x)
			b, err2 = strconv.Atoi(y)
			if err1 != nil || err2 != nil || a > b {
				return nil, fmt.Errorf("range %q is not low-high", rng)
			}
		default:
			n, err := strconv.Atoi(rng)
			if err != nil {
				return nil, fmt.Errorf("%q is not a number (names like MON are not accepted)", rng)
			}
			a, b = n, n
			if hasStep {
				b = hi
			}
		}
		if a < lo || b > hi {
			return nil, fmt.Errorf("%d-%d is outside %d-%d", a, b, lo, hi)
		}
		for v := a; v <= b; v += step {
			set[v] = true
		}
	}
	return set, nil
}

// String is the normalised expression.
func (c *Cron) String() string { return c.expr }

func (c *Cron) dayMatches(t time.Time) bool {
	dom, dow := c.dom[t.Day()], c.dow[int(t.Weekday())]
	switch {
	case c.domStar && c.dowStar:
		return true
	case c.domStar:
		return dow
	case c.dowStar:
		return dom
	}
	return dom || dow // both restricted: either matches (cron's rule)
}

// Next is the first fire time strictly after t, within five years.
func (c *Cron) Next(t time.Time) (time.Time, bool) {
	t = t.UTC().Truncate(time.Minute).Add(time.Minute)
	end := t.AddDate(5, 0, 0)
	for day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC); day.Before(end); day = day.AddDate(0, 0, 1) {
		if !c.mon[int(day.Month())] || !c.dayMatches(day) {
			continue
		}
		for h := 0; h < 24; h++ {
			if !c.hour[h] {
				continue
			}
			for m := 0; m < 60; m++ {
				if !c.min[m] {
					continue
				}
				at := day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
				if !at.Before(t) {
					return at, true
				}
			}
		}
	}
	return time.Time{}, false
}

// MinGap is the smallest gap between two fire times on a day that fires,
// counting the wrap past midnight: a lower bound of the real smallest gap.
func (c *Cron) MinGap() time.Duration {
	var mins []int
	for h := 0; h < 24; h++ {
		for m := 0; m < 60; m++ {
			if c.hour[h] && c.min[m] {
				mins = append(mins, h*60+m)
			}
		}
	}
	sort.Ints(mins)
	gap := 24 * 60
	for i := 1; i < len(mins); i++ {
		gap = min(gap, mins[i]-mins[i-1])
	}
	if len(mins) > 1 {
		gap = min(gap, mins[0]+24*60-mins[len(mins)-1])
	}
	return time.Duration(gap) * time.Minute
}

// single reports whether field i is one plain number.
func single(expr string, i int) bool {
	f := strings.Fields(expr)
	_, err := strconv.Atoi(f[i])
	return err == nil
}
