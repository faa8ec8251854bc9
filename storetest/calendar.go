package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	_ "time/tzdata" // the tests name zones; they must load without a zoneinfo database

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
)

func mustCalendar(t *testing.T, spec string) *calendar.Calendar {
	t.Helper()
	c, err := calendar.Parse(spec)
	if err != nil {
		t.Fatalf("storetest: calendar.Parse(%q): %v", spec, err)
	}
	return c
}

// testCalendar checks calendar quotas (sluice.Limit.Calendar): a monthly
// quota beside a rate limit resets at its anchor, across a short February
// and daylight-saving changes; random walks over months, weeks and days in
// zones with and without daylight saving decide as package algo does; and
// a limit whose anchor changes (Policy.WithAnchor) carries its usage.
func (s *suite) testCalendar(t *testing.T) {
	t.Run("anchor", func(t *testing.T) {
		// 10 a second and 5 a month from the 31st at 02:30 Berlin time.
		// The suite's epoch is 2023-11-15 00:00 UTC; the month started
		// 2023-10-31 02:30 CET (01:30 UTC) and ends 2023-11-30 02:30 CET.
		e := s.env(t)
		cal := mustCalendar(t, "month anchor=31T02:30 zone=Europe/Berlin")
		lim := e.limiter(limit(sluice.GCRA, 10, s1), sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Calendar: cal})
		end := time.Date(2023, 11, 30, 1, 30, 0, 0, time.UTC).Sub(epoch)
		feb := time.Date(2024, 2, 29, 1, 30, 0, 0, time.UTC).Sub(epoch)
		mar := time.Date(2024, 3, 31, 1, 0, 0, 0, time.UTC).Sub(epoch)
		m := func(o outcome) outcome { return o.by(1, 5) }
		e.script(lim, "k", []step{
			{0, take, 4, m(allow(1, end))},
			{s1, take, 1, m(allow(0, end-s1))},
			// Denied by the quota: retry at the anchor, not 30 days on.
			{2 * s1, take, 1, m(deny(0, end-2*s1, end-2*s1))},
			{end - us, take, 1, m(deny(0, us, us))},
			{end, take, 5, m(allow(0, 31*24*time.Hour))},
			// February 2024 ends on the 29th: the month from January 31
			// ends on February 29 at 02:30 CET.
			{feb - 3*s1, take, 5, m(allow(0, 3*s1))},
			{feb - s1, take, 1, m(deny(0, s1, s1))},
			// On March 31 2024 Berlin's clocks jumped from 02:00 to
			// 03:00, skipping 02:30: the month starts at the jump,
			// 01:00 UTC.
			{feb, take, 5, m(allow(0, mar-feb))},
			{mar - us, peek, 0, m(deny(0, us, us))},
		})
	})
	t.Run("walk", func(t *testing.T) {
		specs := [][]sluice.Limit{
			{{Algorithm: sluice.FixedWindow, Count: 7, Calendar: mustCalendar(t, "month anchor=31T02:30 zone=Europe/Berlin")}},
			{{Algorithm: sluice.SlidingWindow, Count: 9, Calendar: mustCalendar(t, "month anchor=30T02:00 zone=America/New_York")}},
			{limit(sluice.GCRA, 3, s1), {Algorithm: sluice.SlidingWindow, Count: 6, Calendar: mustCalendar(t, "day anchor=T02:15 zone=Australia/Lord_Howe")}},
			{{Algorithm: sluice.SlidingWindow, Count: 5, Calendar: mustCalendar(t, "week start=monday anchor=T02:30 zone=Europe/Berlin")},
				{Algorithm: sluice.FixedWindow, Count: 8, Calendar: mustCalendar(t, "year anchor=02-29 zone=Asia/Kolkata")}},
		}
		for i, limits := range specs {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(limits...)
				p := lim.Policy()
				// Boundaries of the shortest calendar: a walk that
				// jumped year by year would outrun stores' clocks.
				var cal *calendar.Calendar
				for _, l := range limits {
					if l.Calendar != nil && (cal == nil || l.Calendar.MaxLength() < cal.MaxLength()) {
						cal = l.Calendar
					}
				}
				m := newModel(p)
				rng := rand.New(rand.NewPCG(uint64(i+1), 0xca1))
				now := time.Duration(0)
				for k := range 400 {
					switch x := rng.IntN(100); {
					case x < 30:
					case x < 60:
						now += time.Duration(rng.Int64N(int64(6*time.Hour/us))) * us
					case x < 80:
						// Just before, at or after a boundary.
						_, end := cal.Period(epoch.Add(now).UnixNano())
						now = time.Duration(end-epoch.UnixNano()) + time.Duration(rng.Int64N(3)-1)*us
					default:
						now += time.Duration(rng.Int64N(int64(40*24*time.Hour/us))) * us
					}
					e.at(now)
					var got, want sluice.Decision
					what := "Peek"
					if rng.IntN(4) == 0 {
						got, want = e.peek(lim, "k"), m.decide(e.clk.Now().UnixNano(), 0)
					} else {
						n := 1 + rng.Int64N(3)
						what = fmt.Sprintf("AllowN(%d)", n)
						got, want = e.take(lim, "k", n), m.decide(e.clk.Now().UnixNano(), n)
					}
					w := outcome{allowed: want.Allowed, remaining: want.Remaining, retryAfter: want.RetryAfter,
						resetAfter: want.ResetAfter, index: want.Index, limit: want.Limit}
					if !e.check(fmt.Sprintf("walk %d, operation %d: %s", i, k, what), p, got, w) {
						return
					}
				}
			})
		}
	})
	t.Run("carry", func(t *testing.T) {
		// A client's anchor moves from the 1st to the 20th: the 6 used
		// in the month from November 1 count in the new month from
		// November 20, and a plain 30-day window after that keeps them.
		e := s.env(t)
		base := e.policy(sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10, Calendar: mustCalendar(t, "month")})
		lim := e.limiterOf(base)
		e.take(lim, "k", 6)
		a, _ := calendar.ParseAnchor("20")
		moved := e.limiterOf(base.WithAnchor(a))
		if moved.Policy() == base || moved.Policy().Name() != base.Name() {
			t.Fatalf("WithAnchor: got policy %q (same: %v), want a new policy named %q", moved.Policy().Name(), moved.Policy() == base, base.Name())
		}
		end := time.Date(2023, 11, 20, 0, 0, 0, 0, time.UTC).Sub(epoch)
		e.script(moved, "k", []step{
			{s1, peek, 0, allow(4, end-s1)},
			{s1, take, 4, allow(0, end-s1)},
			{2 * s1, take, 1, deny(0, end-2*s1, end-2*s1)},
			{end, take, 1, allow(9, 30*24*time.Hour)},
		})
		// Back to the 1st: the 1 used from November 20 counts until
		// December 1.
		dec := time.Date(2023, 12, 1, 0, 0, 0, 0, time.UTC).Sub(epoch)
		e.script(lim, "k", []step{
			{end + s1, take, 9, allow(0, dec-end-s1)},
			{end + s1, take, 1, deny(0, dec-end-s1, dec-end-s1)},
		})
		plain := e.rebuilt(lim, limit(sluice.FixedWindow, 10, 30*24*time.Hour))
		if d := e.peek(plain, "k"); d.Remaining != 0 {
			t.Errorf("carried to a 30-day window: got %d remaining, want 0", d.Remaining)
		}
	})
	t.Run("carry_sliding", func(t *testing.T) {
		// A monthly sliding window raised from 5 to 8 keeps its counts:
		// 3 more fit in November, and the 8 weigh on December.
		e := s.env(t)
		cal := mustCalendar(t, "month")
		lim := e.limiter(sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 5, Calendar: cal})
		dec := time.Date(2023, 12, 1, 0, 0, 0, 0, time.UTC).Sub(epoch)
		jan := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Sub(epoch)
		e.script(lim, "k", []step{
			{0, take, 5, allow(0, jan)},
			{0, take, 1, deny(0, dec+31*24*time.Hour/5, jan)},
		})
		raised := e.rebuilt(lim, sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 8, Calendar: cal})
		mid := dec + 31*24*time.Hour/2
		e.script(raised, "k", []step{
			{s1, take, 3, allow(0, jan-s1)},
			// Half of December gone: half of November's 8 still count.
			{mid, peek, 0, allow(4, jan-mid)},
			{jan, peek, 0, allow(8, 0)},
		})
	})
}
