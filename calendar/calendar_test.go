package calendar_test

import (
	"errors"
	"testing"
	"time"
	_ "time/tzdata" // the tests name zones; they must load without a zoneinfo database

	"github.com/sluicehq/sluice/calendar"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	z, err := calendar.LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func mustParse(t *testing.T, s string) *calendar.Calendar {
	t.Helper()
	c, err := calendar.Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return c
}

// at parses an RFC 3339 time.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPeriods(t *testing.T) {
	tests := []struct {
		cal, now, start, end string
	}{
		// Months from the 1st at midnight UTC.
		{"month", "2026-01-31T23:59:59Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
		{"month", "2026-02-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
		{"month", "2026-12-15T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		// Anchors on the 29th to 31st clamp to short months.
		{"month anchor=31", "2026-02-10T00:00:00Z", "2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z"},
		{"month anchor=31", "2026-02-28T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z"},
		{"month anchor=31", "2026-04-30T12:00:00Z", "2026-04-30T00:00:00Z", "2026-05-31T00:00:00Z"},
		{"month anchor=31", "2028-02-28T12:00:00Z", "2028-01-31T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"month anchor=30", "2028-03-01T00:00:00Z", "2028-02-29T00:00:00Z", "2028-03-30T00:00:00Z"},
		{"month anchor=29", "2027-02-28T00:00:00Z", "2027-02-28T00:00:00Z", "2027-03-29T00:00:00Z"},
		{"month anchor=29", "2028-02-28T23:00:00Z", "2028-01-29T00:00:00Z", "2028-02-29T00:00:00Z"},
		// An anchor with a time: before it, the period started last month.
		{"month anchor=15T09:00", "2026-03-15T08:59:59Z", "2026-02-15T09:00:00Z", "2026-03-15T09:00:00Z"},
		{"month anchor=15T09:00", "2026-03-15T09:00:00Z", "2026-03-15T09:00:00Z", "2026-04-15T09:00:00Z"},
		{"month anchor=01", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
		// Berlin is UTC+1 in winter, UTC+2 in summer.
		{"month anchor=15T09:00 zone=Europe/Berlin", "2026-03-20T00:00:00Z", "2026-03-15T08:00:00Z", "2026-04-15T07:00:00Z"},
		// Years, including a February 29 anchor.
		{"year", "2026-06-01T00:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"year anchor=04-01", "2026-03-31T23:59:59Z", "2025-04-01T00:00:00Z", "2026-04-01T00:00:00Z"},
		{"year anchor=02-29", "2027-03-01T00:00:00Z", "2027-02-28T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"year anchor=02-29", "2028-02-28T12:00:00Z", "2027-02-28T00:00:00Z", "2028-02-29T00:00:00Z"},
		// Days and weeks.
		{"day", "2026-05-05T13:00:00Z", "2026-05-05T00:00:00Z", "2026-05-06T00:00:00Z"},
		{"day anchor=T06:30", "2026-05-05T06:29:59Z", "2026-05-04T06:30:00Z", "2026-05-05T06:30:00Z"},
		{"day anchor=06:30", "2026-05-05T06:30:00Z", "2026-05-05T06:30:00Z", "2026-05-06T06:30:00Z"},
		// 2026-11-25 is a Wednesday.
		{"week start=monday", "2026-11-25T10:00:00Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"},
		{"week", "2026-11-25T10:00:00Z", "2026-11-22T00:00:00Z", "2026-11-29T00:00:00Z"},
		{"week start=wednesday", "2026-11-25T00:00:00Z", "2026-11-25T00:00:00Z", "2026-12-02T00:00:00Z"},
		{"week start=wednesday anchor=T12:00", "2026-11-25T11:00:00Z", "2026-11-18T12:00:00Z", "2026-11-25T12:00:00Z"},
		{"week start=saturday", "2026-12-31T00:00:00Z", "2026-12-26T00:00:00Z", "2027-01-02T00:00:00Z"},
		// Daylight saving. New York: 2026-03-08 02:00 EST -> 03:00 EDT;
		// 2026-11-01 02:00 EDT -> 01:00 EST.
		{"day zone=America/New_York", "2026-03-08T12:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"},
		{"day zone=America/New_York", "2026-11-01T12:00:00Z", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"},
		// 02:30 does not exist on March 8: the day starts at the jump.
		{"day anchor=T02:30 zone=America/New_York", "2026-03-08T12:00:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"},
		{"day anchor=T02:30 zone=America/New_York", "2026-03-08T06:59:59Z", "2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z"},
		// 01:30 happens twice on November 1: the day starts at the first.
		{"day anchor=T01:30 zone=America/New_York", "2026-11-01T06:00:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		{"month zone=America/New_York", "2026-03-20T00:00:00Z", "2026-03-01T05:00:00Z", "2026-04-01T04:00:00Z"},
		// Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 -> 02:00.
		{"day zone=Europe/Berlin", "2026-03-29T12:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		{"day zone=Europe/Berlin", "2026-10-25T12:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"},
		{"week start=monday zone=Europe/Berlin", "2026-03-29T12:00:00Z", "2026-03-22T23:00:00Z", "2026-03-29T22:00:00Z"},
		// Lord Howe shifts by 30 minutes: +10:30 in winter, +11 in summer.
		// 2026-04-05 02:00 +11 -> 01:30 +10:30; 2026-10-04 02:00 -> 02:30.
		{"day zone=Australia/Lord_Howe", "2026-04-05T06:00:00Z", "2026-04-04T13:00:00Z", "2026-04-05T13:30:00Z"},
		{"day zone=Australia/Lord_Howe", "2026-10-04T06:00:00Z", "2026-10-03T13:30:00Z", "2026-10-04T13:00:00Z"},
		// 02:15 does not exist on October 4: the day starts at the jump.
		{"day anchor=T02:15 zone=Australia/Lord_Howe", "2026-10-04T06:00:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"},
		{"day anchor=T02:15 zone=Australia/Lord_Howe", "2026-10-03T15:29:59Z", "2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z"},
		// Kolkata has no daylight saving: +05:30 all year.
		{"month anchor=10T00:00 zone=Asia/Kolkata", "2026-07-09T18:29:59Z", "2026-06-09T18:30:00Z", "2026-07-09T18:30:00Z"},
		{"day zone=Asia/Kolkata", "2026-03-08T12:00:00Z", "2026-03-07T18:30:00Z", "2026-03-08T18:30:00Z"},
	}
	for _, tt := range tests {
		c := mustParse(t, tt.cal)
		now := at(t, tt.now)
		s, e := c.Bounds(now)
		if !s.Equal(at(t, tt.start)) || !e.Equal(at(t, tt.end)) {
			t.Errorf("%s at %s: got [%s, %s), want [%s, %s)", tt.cal, tt.now,
				s.UTC().Format(time.RFC3339), e.UTC().Format(time.RFC3339), tt.start, tt.end)
		}
	}
}

// TestTiling walks several years period by period in zones with and
// without daylight saving: every period ends where the next starts, each
// instant is in exactly one, and every period is its calendar length in
// local days (so a day is 23 to 25 hours, never 0 or 48).
func TestTiling(t *testing.T) {
	for _, spec := range []string{
		"day zone=America/New_York", "day anchor=T02:30 zone=America/New_York", "day anchor=T01:30 zone=America/New_York",
		"week start=monday anchor=T02:30 zone=Europe/Berlin", "month anchor=31T02:30 zone=Europe/Berlin",
		"month anchor=30T02:00 zone=Australia/Lord_Howe", "day anchor=T02:15 zone=Australia/Lord_Howe",
		"year anchor=02-29T02:30 zone=America/New_York", "month anchor=29 zone=Asia/Kolkata", "day anchor=T23:59:59",
	} {
		c := mustParse(t, spec)
		var lo, hi time.Duration
		switch c.Spec().Unit {
		case calendar.Day:
			lo, hi = 23*time.Hour, 25*time.Hour
		case calendar.Week:
			lo, hi = 7*24*time.Hour-time.Hour, 7*24*time.Hour+time.Hour
		case calendar.Month:
			lo, hi = 28*24*time.Hour-time.Hour, 31*24*time.Hour+time.Hour
		default:
			lo, hi = 365*24*time.Hour-time.Hour, 366*24*time.Hour+time.Hour
		}
		if hi > c.MaxLength() {
			t.Errorf("%s: MaxLength %v, below %v", spec, c.MaxLength(), hi)
		}
		now := at(t, "2024-01-01T00:00:00Z").UnixNano()
		end := at(t, "2031-01-01T00:00:00Z").UnixNano()
		s, e := c.Period(now)
		for n := 0; e < end; n++ {
			if !(s <= now && now < e) {
				t.Fatalf("%s: %v not in [%v, %v)", spec, time.Unix(0, now).UTC(), time.Unix(0, s).UTC(), time.Unix(0, e).UTC())
			}
			if l := time.Duration(e - s); l < lo || l > hi {
				t.Fatalf("%s: period [%v, %v) is %v long, want %v to %v", spec, time.Unix(0, s).UTC(), time.Unix(0, e).UTC(), l, lo, hi)
			}
			// The last nanosecond of a period and the first of the next.
			if s2, e2 := c.Period(e - 1); s2 != s || e2 != e {
				t.Fatalf("%s: the period of its last instant %v is [%v, %v)", spec, time.Unix(0, e-1).UTC(), time.Unix(0, s2).UTC(), time.Unix(0, e2).UTC())
			}
			ns, ne := c.Period(e)
			if ns != e {
				t.Fatalf("%s: after [%v, %v) comes [%v, %v)", spec, time.Unix(0, s).UTC(), time.Unix(0, e).UTC(), time.Unix(0, ns).UTC(), time.Unix(0, ne).UTC())
			}
			// A fresh calendar (no cache) agrees from the middle.
			if ms, me := mustParse(t, spec).Period(s + (e-s)/2); ms != s || me != e {
				t.Fatalf("%s: middle of [%v, %v) gives [%v, %v)", spec, time.Unix(0, s).UTC(), time.Unix(0, e).UTC(), time.Unix(0, ms).UTC(), time.Unix(0, me).UTC())
			}
			now, s, e = e, ns, ne
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{
		"", "fortnight", "month anchor=32", "month anchor=0", "month anchor=15T24:00", "month anchor=15T9:00",
		"month anchor=02-15", "day anchor=15", "week anchor=03-01", "year anchor=02-30", "year anchor=13-01",
		"month zone=Mars/Olympus", "month zone=Local", "month start=monday", "week start=funday",
		"month anchor=1 anchor=2", "month bogus=1", "month anchor", "month anchor=15T", "month anchor=15T09:00:60",
	} {
		if c, err := calendar.Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, c)
		} else if !errors.Is(err, calendar.ErrInvalid) {
			t.Errorf("Parse(%q): %v does not wrap ErrInvalid", s, err)
		}
	}
}

func TestWithAnchor(t *testing.T) {
	a, err := calendar.ParseAnchor("31T09:30")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ cal, want string }{
		{"month zone=Europe/Berlin", "month anchor=31T09:30 zone=Europe/Berlin"},
		{"day", "day anchor=T09:30"},
		{"week start=monday", "week start=monday anchor=T09:30"},
		{"year anchor=02-01", "year anchor=02-29T09:30"},
		{"year", "year anchor=31T09:30"},
	}
	for _, tt := range tests {
		if got := mustParse(t, tt.cal).WithAnchor(a).String(); got != tt.want {
			t.Errorf("%s with anchor %s: got %q, want %q", tt.cal, a, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"month", "month anchor=15T09:00 zone=Europe/Berlin", "week start=monday anchor=T06:00",
		"year anchor=02-29", "day anchor=23:59:59 zone=Australia/Lord_Howe", "month anchor=31", "T", "month anchor=-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := calendar.Parse(s)
		if err != nil {
			if !errors.Is(err, calendar.ErrInvalid) {
				t.Fatalf("Parse(%q): %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		// The canonical form reads back to the same calendar.
		c2, err := calendar.Parse(c.String())
		if err != nil || c2.String() != c.String() {
			t.Fatalf("Parse(%q).String() = %q reads back as %v, %v", s, c.String(), c2, err)
		}
		now := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC).UnixNano()
		st, e := c.Period(now)
		if !(st <= now && now < e) || time.Duration(e-st) > c.MaxLength() {
			t.Fatalf("%s: period [%d, %d) for %d", c, st, e, now)
		}
	})
}

func FuzzParseAnchor(f *testing.F) {
	for _, s := range []string{"15", "15T09:00", "T09:00", "09:00:30", "03-01T00:00", "02-29", "", "1-1T1:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := calendar.ParseAnchor(s)
		if err != nil {
			return
		}
		b, err := calendar.ParseAnchor(a.String())
		if err != nil || b != a {
			t.Fatalf("ParseAnchor(%q) = %+v; its String %q reads back as %+v, %v", s, a, a.String(), b, err)
		}
	})
}

func BenchmarkPeriod(b *testing.B) {
	c, err := calendar.Parse("month anchor=15T09:00 zone=Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC).UnixNano()
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			c.Period(t0 + int64(i))
		}
	})
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			// Alternate between periods a year apart.
			c.Period(t0 + int64(i%2)*365*24*int64(time.Hour))
		}
	})
}
