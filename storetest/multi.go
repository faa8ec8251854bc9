package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testMultiLimit checks that a policy of two limits decides atomically, for
// every pair of algorithms: the short limit L0 is 10 per second and the long
// limit L1 is 25 per hour. A request that either limit denies is charged to
// neither, and the Decision names the binding limit.
func (s *suite) testMultiLimit(t *testing.T) {
	const h = time.Hour
	// L0 after 10 units at a window start: its ResetAfter, and its
	// RetryAfter for one more unit (sliding window: 10×(P−e) <= 9×P from
	// e = P/10 of the next window).
	reset0 := map[sluice.Algorithm]time.Duration{sluice.TokenBucket: s1, sluice.GCRA: s1, sluice.FixedWindow: s1, sluice.SlidingWindow: 2 * s1, sluice.SlidingLog: s1}
	retry0 := map[sluice.Algorithm]time.Duration{sluice.TokenBucket: 100 * ms, sluice.GCRA: 100 * ms, sluice.FixedWindow: s1, sluice.SlidingWindow: 1100 * ms, sluice.SlidingLog: s1}
	// L1 at 4s, with 10 units charged at 0 and 10 at 2s. One unit of the
	// buckets is worth 144s, of which 4s have drained.
	//   reset20:  ResetAfter with 20 charged: buckets 20×144s−4s; the fixed
	//             window ends at 1h; the sliding window's count weighs
	//             until 2h; the log's newest entry (2s) expires at 1h+2s.
	//   retry6:   RetryAfter for 6 units with 20 charged: buckets one unit
	//             less 4s; sliding window 20×(P−e) <= 19×P in the next
	//             window, e = P/20 = 180s; the log waits for its oldest.
	//   reset25:  ResetAfter with 25 charged, the last 5 at 4s.
	//   retry1:   RetryAfter for 1 unit with 25 charged: sliding window
	//             e = P/25 = 144s.
	//   retry6b:  RetryAfter for 6 units with 25 charged: buckets 6 units
	//             less 4s; sliding window e = 6P/25 = 864s.
	reset20 := map[sluice.Algorithm]time.Duration{sluice.TokenBucket: 2876 * s1, sluice.GCRA: 2876 * s1, sluice.FixedWindow: 3596 * s1, sluice.SlidingWindow: 7196 * s1, sluice.SlidingLog: 3598 * s1}
	retry6 := map[sluice.Algorithm]time.Duration{sluice.TokenBucket: 140 * s1, sluice.GCRA: 140 * s1, sluice.FixedWindow: 3596 * s1, sluice.SlidingWindow: 3776 * s1, sluice.SlidingLog: 3596 * s1}
	reset25 := map[sluice.Algorithm]time.Duration{sluice.TokenBucket: 3596 * s1, sluice.GCRA: 3596 * s1, sluice.FixedWindow: 3596 * s1, sluice.SlidingWindow: 7196 * s1, sluice.SlidingLog: h}
	retry1 := map[sluice.Algorithm]time.Duration{sluice.TokenBucket: 140 * s1, sluice.GCRA: 140 * s1, sluice.FixedWindow: 3596 * s1, sluice.SlidingWindow: 3740 * s1, sluice.SlidingLog: 3596 * s1}
	retry6b := map[sluice.Algorithm]time.Duration{sluice.TokenBucket: 860 * s1, sluice.GCRA: 860 * s1, sluice.FixedWindow: 3596 * s1, sluice.SlidingWindow: 4460 * s1, sluice.SlidingLog: 3596 * s1}

	for _, a := range algorithms {
		for _, b := range algorithms {
			t.Run(a.String()+"+"+b.String(), func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(limit(a, 10, s1), limit(b, 25, h))
				l0 := func(o outcome) outcome { return o.by(0, 10) }
				l1 := func(o outcome) outcome { return o.by(1, 25) }
				e.script(lim, "k", []step{
					{0, peek, 0, l0(allow(10, 0))}, // fewest remaining binds
					{0, take, 10, l0(allow(0, reset0[a]))},
					// L0 denies: if L1 were charged, the 10
					// units at 2s would not fit.
					{0, take, 1, l0(deny(0, retry0[a], reset0[a]))},
					{0, take, 1, l0(deny(0, retry0[a], reset0[a]))},
					{0, take, 1, l0(deny(0, retry0[a], reset0[a]))},
					{2 * s1, take, 10, l0(allow(0, reset0[a]))},
					{2 * s1, take, 1, l0(deny(0, retry0[a], reset0[a]))},
					// At 4s L0 is full and L1 has 5 left: L1
					// denies 6 units. If L0 were charged, the
					// 5 units next would not fit it.
					{4 * s1, take, 6, l1(deny(5, retry6[b], reset20[b]))},
					{4 * s1, take, 6, l1(deny(5, retry6[b], reset20[b]))},
					{4 * s1, take, 5, l1(allow(0, reset25[b]))},
					{4 * s1, peek, 0, l1(deny(0, retry1[b], reset25[b]))},
					{4 * s1, take, 1, l1(deny(0, retry1[b], reset25[b]))},
					// Both deny 6 units: the longest wait binds.
					{4 * s1, take, 6, l1(deny(0, retry6b[b], reset25[b]))},
					{4 * s1, take, 5, l1(deny(0, retry5(b), reset25[b]))},
					{4 * s1, reset, 0, outcome{}},
					{4 * s1, peek, 0, l0(allow(10, 0))},
				})
			})
		}
	}
	t.Run("ties", func(t *testing.T) {
		// A fixed window and a log of 5 per second tie on everything:
		// the first limit binds. A sliding window ties on Remaining
		// but resets later: it binds.
		e := s.env(t)
		lim := e.limiter(limit(sluice.FixedWindow, 5, s1), limit(sluice.SlidingLog, 5, s1))
		e.script(lim, "k", []step{
			{0, peek, 0, allow(5, 0).by(0, 5)},
			{0, take, 2, allow(3, s1).by(0, 5)},
			{0, take, 3, allow(0, s1).by(0, 5)},
			{0, take, 1, deny(0, s1, s1).by(0, 5)},
			{500 * ms, take, 1, deny(0, 500*ms, 500*ms).by(0, 5)},
		})
		lim = e.limiter(limit(sluice.FixedWindow, 5, s1), limit(sluice.SlidingWindow, 5, s1))
		e.script(lim, "k", []step{
			{0, peek, 0, allow(5, 0).by(0, 5)},
			{0, take, 2, allow(3, 2*s1).by(1, 5)},
			{0, take, 3, allow(0, 2*s1).by(1, 5)},
			{0, take, 1, deny(0, 1200*ms, 2*s1).by(1, 5)},
			{s1, take, 1, deny(0, 200*ms, s1).by(1, 5)},
		})
	})
}

// retry5 is L1's RetryAfter for 5 units with 25 charged, the last 5 at 4s:
// buckets 5 units less 4s; the sliding window e = 5P/25 = 720s; the log
// waits for its oldest entry.
func retry5(b sluice.Algorithm) time.Duration {
	switch b {
	case sluice.TokenBucket, sluice.GCRA:
		return 716 * s1
	case sluice.SlidingWindow:
		return 4316 * s1
	}
	return 3596 * s1
}
