package redisstore_test

import (
	"strconv"
	"testing"
	"time"
	_ "time/tzdata" // the tests name zones; they must load without a zoneinfo database

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// On the server's clock, a calendar quota's key expires exactly when its
// period ends (a fixed window) or when the next period ends (a sliding
// window, whose count weighs on the next period): PEXPIRETIME is the
// boundary the calendar computes, to the millisecond.
func TestCalendarKeyExpiresAtPeriodEnd(t *testing.T) {
	srv := redistest.Start(t)
	for i, spec := range []string{"day anchor=T06:00 zone=America/New_York", "month anchor=31T09:30 zone=Australia/Lord_Howe", "week start=monday zone=Europe/Berlin"} {
		cal, err := calendar.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow} {
			t.Run(spec+"/"+alg.String(), func(t *testing.T) {
				prefix := "cal" + strconv.Itoa(i) + alg.String()
				store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Prefix: prefix, Timeout: slow})
				lim := limiter(t, store, "p", sluice.Limit{Algorithm: alg, Count: 100, Calendar: cal})
				before := serverMicros(t, srv)
				d := allow(t, lim, "k")
				took := ceilMs(time.Duration(serverMicros(t, srv)-before) * time.Microsecond)
				if !d.Allowed || d.Degraded {
					t.Fatalf("got %+v, want allowed and not degraded", d)
				}
				_, end := cal.Period(d.Time.UnixNano())
				if alg == sluice.SlidingWindow {
					_, end = cal.Period(end)
				}
				if got := d.ResetTime().UnixNano(); got != end {
					t.Errorf("reset time: got %v, want %v", time.Unix(0, got).UTC(), time.Unix(0, end).UTC())
				}
				keys := keysOf(t, srv, prefix+":")
				if len(keys) != 1 {
					t.Fatalf("keys: got %q, want one", keys)
				}
				at, err := strconv.ParseInt(srv.Do(t, "PEXPIRETIME", keys[0]), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				// The key's time to live is set in whole milliseconds from
				// the server's clock when it is set, which may have moved on
				// from the time the script read: never before the end, and
				// after it by at most a millisecond more than the call took
				// on the server's clock (a loaded machine can stop Redis in
				// the middle of a script).
				want := end / int64(time.Millisecond)
				if at < want || at > want+1+took {
					t.Errorf("PEXPIRETIME: got %v, want the period's end %v (or up to %dms after: the call took %dms on the server's clock)", time.UnixMilli(at).UTC(), time.UnixMilli(want).UTC(), 1+took, took)
				}
			})
		}
	}
}
