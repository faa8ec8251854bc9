package algo_test

import (
	"errors"
	"testing"
	"time"
	_ "time/tzdata" // the tests name zones; they must load without a zoneinfo database

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/calendar"
)

func calRule(t *testing.T, alg algo.Algorithm, count int64, spec string) algo.Rule {
	t.Helper()
	c, err := calendar.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	r, err := algo.CompileCalendar(alg, count, c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func utc(y int, m time.Month, d, h, min int) int64 {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC).UnixNano()
}

const nsDay = int64(24 * time.Hour)

func TestCalendarRejectsOtherAlgorithms(t *testing.T) {
	c, _ := calendar.Parse("month")
	for _, a := range []algo.Algorithm{algo.TokenBucket, algo.GCRA, algo.SlidingLog} {
		if _, err := algo.CompileCalendar(a, 10, c); !errors.Is(err, algo.ErrInvalidRule) {
			t.Errorf("CompileCalendar(%v): got %v, want ErrInvalidRule", a, err)
		}
	}
	if _, err := algo.CompileCalendar(algo.FixedWindow, 0, c); !errors.Is(err, algo.ErrInvalidRule) {
		t.Errorf("a count of 0: got %v, want ErrInvalidRule", err)
	}
}

// A monthly fixed window anchored on the 31st: February is short, and the
// reset is the anchor, not 30 days on.
func TestCalendarFixedWindow(t *testing.T) {
	r := calRule(t, algo.FixedWindow, 3, "month anchor=31T09:00")
	var st algo.State
	now := utc(2026, time.February, 10, 12, 0)
	end := utc(2026, time.February, 28, 9, 0)
	for i := range 3 {
		var s algo.Status
		st, s = r.Eval(st, now, 1)
		if !s.Allowed || s.Remaining != int64(2-i) || s.ResetAfter != end-now {
			t.Fatalf("request %d: got %+v, want allowed, %d remaining, reset %v", i, s, 2-i, time.Duration(end-now))
		}
	}
	_, s := r.Eval(st, now, 1)
	if s.Allowed || s.RetryAfter != end-now || s.ResetAfter != end-now {
		t.Fatalf("over quota: got %+v, want denied with retry and reset %v", s, time.Duration(end-now))
	}
	if u := r.Used(st, now); u != 3 {
		t.Errorf("Used: got %d, want 3", u)
	}
	// The last nanosecond of the period is still in it; the anchor is not.
	if _, s := r.Eval(st, end-1, 1); s.Allowed || s.RetryAfter != 1 {
		t.Errorf("at the last ns: got %+v, want denied, retry 1ns", s)
	}
	st2, s := r.Eval(st, end, 1)
	next := utc(2026, time.March, 31, 9, 0)
	if !s.Allowed || s.Remaining != 2 || s.ResetAfter != next-end || st2.T != end {
		t.Errorf("at the anchor: got %+v state %+v, want allowed, 2 remaining, reset %v", s, st2, time.Duration(next-end))
	}
	if u := r.Used(st, end); u != 0 {
		t.Errorf("Used after the period: got %d, want 0", u)
	}
	if exp := r.Expiry(st, now); exp != end {
		t.Errorf("Expiry: got %v, want the period's end %v", time.Unix(0, exp).UTC(), time.Unix(0, end).UTC())
	}
}

// A monthly sliding window weighs February's count by the part of March
// not yet elapsed, March being 31 days long.
func TestCalendarSlidingWindow(t *testing.T) {
	r := calRule(t, algo.SlidingWindow, 100, "month")
	feb, mar, apr, may := utc(2026, 2, 1, 0, 0), utc(2026, 3, 1, 0, 0), utc(2026, 4, 1, 0, 0), utc(2026, 5, 1, 0, 0)
	st, s := r.Eval(algo.State{}, feb+5*nsDay, 100)
	if !s.Allowed || s.Remaining != 0 {
		t.Fatalf("filling February: got %+v", s)
	}
	// Full: retry once the next window (March, 31 days) has weighed the 100
	// down to 99: 100×(L−e) <= 99×L, e >= L/100.
	_, s = r.Eval(st, feb+5*nsDay, 1)
	if want := mar + (31*nsDay+99)/100 - (feb + 5*nsDay); s.Allowed || s.RetryAfter != want {
		t.Fatalf("denied in February: got %+v, want retry %v", s, time.Duration(want))
	}
	if s.ResetAfter != apr-(feb+5*nsDay) {
		t.Errorf("reset: got %v, want the end of March", time.Duration(s.ResetAfter))
	}
	// Halfway through March, half of February still counts.
	mid := mar + 31*nsDay/2
	_, s = r.Eval(st, mid, 0)
	if s.Remaining != 50 {
		t.Errorf("mid-March: got %d remaining, want 50", s.Remaining)
	}
	if u := r.Used(st, mid); u != 50 {
		t.Errorf("mid-March Used: got %d, want 50", u)
	}
	// Take 50 then: full until more of February has weighed out.
	st, s = r.Eval(st, mid, 50)
	if !s.Allowed || s.Remaining != 0 {
		t.Fatalf("mid-March take 50: got %+v", s)
	}
	_, s = r.Eval(st, mid, 1)
	// 100×(L−e) <= 49×L → e >= 51L/100 within March.
	if want := mar + (51*31*nsDay+99)/100 - mid; s.Allowed || s.RetryAfter != want {
		t.Errorf("mid-March denied: got %+v, want retry %v", s, time.Duration(want))
	}
	if s.ResetAfter != may-mid {
		t.Errorf("mid-March reset: got %v, want the end of April", time.Duration(s.ResetAfter))
	}
	// In April (30 days), March's 50 weigh (30−e)/30.
	_, s = r.Eval(st, apr+10*nsDay, 0)
	if want := int64(100 - (50*20+29)/30); s.Remaining != want {
		t.Errorf("April 11: got %d remaining, want %d", s.Remaining, want)
	}
	// Two periods on, nothing counts.
	if _, s = r.Eval(st, may, 0); s.Remaining != 100 || s.ResetAfter != 0 {
		t.Errorf("May: got %+v, want a fresh key", s)
	}
}

// A day in a zone with daylight saving is 23 or 25 hours; the window is
// the local day and the reset its end.
func TestCalendarDaylightSaving(t *testing.T) {
	r := calRule(t, algo.FixedWindow, 1, "day zone=America/New_York")
	// 2026-03-08 is 23 hours long in New York; 2026-11-01 25 hours.
	for _, tc := range []struct {
		now, end int64
	}{
		{utc(2026, 3, 8, 5, 0), utc(2026, 3, 9, 4, 0)},
		{utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 5, 0)},
	} {
		st, _ := r.Eval(algo.State{}, tc.now, 1)
		_, s := r.Eval(st, tc.now, 1)
		if s.Allowed || s.RetryAfter != tc.end-tc.now {
			t.Errorf("at %v: got %+v, want retry %v", time.Unix(0, tc.now).UTC(), s, time.Duration(tc.end-tc.now))
		}
	}
}

// Changing a calendar limit's anchor carries the usage into the new
// period; an equal calendar keeps the state as it is.
func TestCalendarCarry(t *testing.T) {
	old := calRule(t, algo.FixedWindow, 10, "month anchor=01")
	now := utc(2026, 3, 20, 0, 0)
	st, _ := old.Eval(algo.State{}, now, 7)
	same := calRule(t, algo.FixedWindow, 10, "month anchor=01")
	if !same.Equal(&old) || same.Carry(&old, st, now) != st {
		t.Errorf("an equal calendar rule does not keep the state")
	}
	moved := calRule(t, algo.FixedWindow, 10, "month anchor=15")
	if moved.Equal(&old) {
		t.Fatal("rules with different anchors are Equal")
	}
	c := moved.Carry(&old, st, now)
	if c.T != utc(2026, 3, 15, 0, 0) || c.A != 7 {
		t.Errorf("carried to the 15th: got %+v, want 7 in the period from March 15", c)
	}
	plain := mustCompile(t, algo.FixedWindow, 10, 31*24*time.Hour, 0)
	if plain.Equal(&old) {
		t.Error("a calendar rule Equals a fixed-length one")
	}
	if u := plain.Carry(&old, st, now); plain.Used(u, now) != 7 {
		t.Errorf("carried to a plain window: got %+v, want 7 used", u)
	}
	sw := calRule(t, algo.SlidingWindow, 5, "month anchor=01")
	sw2 := calRule(t, algo.SlidingWindow, 8, "month anchor=01")
	sst, _ := sw.Eval(algo.State{}, now, 5)
	if c := sw2.Carry(&sw, sst, now); c != sst {
		t.Errorf("sliding, same calendar: got %+v, want %+v kept", c, sst)
	}
}

func BenchmarkCalendarEval(b *testing.B) {
	c, err := calendar.Parse("month anchor=15T09:00 zone=Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	for _, alg := range []algo.Algorithm{algo.FixedWindow, algo.SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			r, err := algo.CompileCalendar(alg, 1_000_000_000, c)
			if err != nil {
				b.Fatal(err)
			}
			var st algo.State
			now := utc(2026, 11, 20, 0, 0)
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				st, _ = r.Eval(st, now, 1)
			}
		})
	}
}
