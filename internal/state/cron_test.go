package state

import (
	"strings"
	"testing"
	"time"
)

func TestPeriodicGap(t *testing.T) {
	for _, tc := range []struct {
		schedule string
		gap      time.Duration // the smallest gap between two runs
		refused  string        // what the refusal says, "" when accepted
	}{
		{"*/15 * * * *", 15 * time.Minute, "fires at 00:00 UTC and again at 00:15 UTC, 15m0s apart"},
		{"0 * * * *", time.Hour, ""},
		{"0,10 9 * * *", 10 * time.Minute, "fires at 09:00 UTC and again at 09:10 UTC, 10m0s apart"},
		{"0 9 * * 1-5", day, ""},
		{"0,30 9 * * *", 30 * time.Minute, ""},
		// Minutes 0, 29 and 58: the hour's last run is 2 minutes before the next hour's first.
		{"*/29 * * * *", 2 * time.Minute, "fires at 00:58 UTC and again at 01:00 UTC, 2m0s apart"},
		{"0 9 * * 1", 7 * day, ""},
		{"0 9 1 1 *", 365 * day, ""},
		// Across midnight: 23:50 one day, 00:00 the next.
		{"0,50 0,23 * * *", 10 * time.Minute, "fires at 23:50 UTC and again at 00:00 UTC the next day, 10m0s apart"},
		{"0,59 0,23 * * 1,2", time.Minute, "at 23:59 UTC and again at 00:00 UTC the next day"},
		// Mondays only: 23:59 is never followed by 00:00 the next day.
		{"0,59 0,23 * * 1", 59 * time.Minute, ""},
		// The 31st and the 1st are back to back at the end of a 31-day month.
		{"10,50 0,23 1,31 * *", 20 * time.Minute, "at 23:50 UTC and again at 00:10 UTC the next day, 20m0s apart"},
		{"20 0 1,31 * *", day, ""},
		// February 28th and March 1st are back to back in 2027; February
		// 29th and March 1st only in leap years, 2028 the first.
		{"10,50 0,23 1,28 2,3 *", 20 * time.Minute, "20m0s apart"},
		{"10,50 0,23 1,29 2,3 *", 20 * time.Minute, "20m0s apart"},
		{"10,50 0,23 1,30 2,3 *", 40 * time.Minute, ""},
		// Both days restricted: either matches (Sundays, and the 1st).
		{"0,50 0,23 1 * 0", 10 * time.Minute, "10m0s apart"},
	} {
		t.Run(tc.schedule, func(t *testing.T) {
			c, err := ParseCron(tc.schedule)
			if tc.gap == 0 {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("parse: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a, b, ok := c.closest(t0)
			if !ok || b.Sub(a) != tc.gap {
				t.Errorf("closest %v %v (%s) %v, want %s", a, b, b.Sub(a), ok, tc.gap)
			}
			if a.Before(t0) && !midnight(a).Equal(midnight(t0)) {
				t.Errorf("closest starts at %v, before the day of %v", a, t0)
			}
			_, err = open(t).CreateJob(t0, NewJob{ID: "j", Kind: KindPeriodic, Schedule: tc.schedule, Description: "d"})
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "at least 30m0s apart")):
				t.Errorf("want a refusal saying %q, got %v", tc.refused, err)
			}
		})
	}
}

func TestParseCronFollowsTheCronJobParser(t *testing.T) {
	for _, tc := range []struct{ schedule, says string }{
		{"0 9 * * 7", `day of week field "7": end of range (7) above maximum (6)`},
		{"60 * * * *", `minute field "60"`},
		{"0 24 * * *", `hour field "24"`},
		{"0 0 0 * *", `day of month field "0"`},
		{"0 0 1 13 *", `month field "13"`},
		{"0 0 * JAN *", `month field "JAN": use numbers`},
		{"0 0 * * MON", `day of week field "MON": use numbers`},
		{"0 0 ? * *", `day of month field "?"`},
		{"@daily", "not a 5-field cron expression"},
		{"TZ=UTC 0 9 * *", `minute field "TZ=UTC"`},
		{"*/0 * * * *", "step of range should be a positive number"},
		{"5-1 * * * *", "beyond end of range"},
	} {
		_, err := ParseCron(tc.schedule)
		if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), `"M H D Mon W"`) {
			t.Errorf("%q: %v, want it to say %q and how to write a schedule", tc.schedule, err, tc.says)
		}
	}
	// A day-of-month step starting with * still restricts the day of month,
	// so with a weekday either matches, as Kubernetes reads it.
	c, err := ParseCron("0 9 */10 * 1")
	if err != nil {
		t.Fatal(err)
	}
	// From Sunday 2026-11-29: Monday the 30th matches the weekday, and is not
	// 1, 11, 21 or 31.
	if n, _ := c.Next(t0); !n.Equal(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("next %v", n)
	}
	if n, _ := c.Next(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)); !n.Equal(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("next after Monday %v", n)
	}
	if _, ok := mustCron(t, "0 0 30 2 *").Next(t0); ok {
		t.Error("February 30th fires")
	}
}

func mustCron(t *testing.T, expr string) *Cron {
	t.Helper()
	c, err := ParseCron(expr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
