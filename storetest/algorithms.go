package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testAlgorithms checks every algorithm's decisions at exact times. The
// expected values are worked out by hand in the comments, from the
// definitions in package algo; several are fractional (3 per second), so
// that a store that rounds its arithmetic to its resolution fails.
func (s *suite) testAlgorithms(t *testing.T) {
	// Token bucket and GCRA with Count 3, Period 1s, Burst 5: one unit is
	// worth 1/3 s; a full bucket holds 5 units and takes 5/3 s to refill.
	// The two algorithms must admit exactly the same requests.
	bucketSteps := []step{
		{0, take, 1, allow(4, 333333334*ns)},               // debt 1 unit: reset ⌈1e9/3⌉ns
		{0, take, 4, allow(0, 1666666667*ns)},              // debt 5 units: reset ⌈5e9/3⌉ns
		{0, take, 1, deny(0, 333333334*ns, 1666666667*ns)}, // one unit short
		// At 333333µs, 999999000 of the 1e9 ticks of one unit have
		// drained: still 1000 ticks short, ⌈1000/3⌉ = 334ns.
		{333333 * us, take, 1, deny(0, 334*ns, 1333333667*ns)},
		// At 333334µs the unit is back, 2000 ticks to spare; the
		// bucket then lacks 4999998000 ticks: reset ⌈4999998000/3⌉.
		{333334 * us, take, 1, allow(0, 1666666000*ns)},
		{333334 * us, peek, 0, deny(0, 333332667*ns, 1666666000*ns)},
		{2 * s1, peek, 0, allow(5, 0)},                                // exactly full again
		{2 * s1, take, 5, allow(0, 1666666667*ns)},                    // a burst of 5
		{2333334 * us, take, 2, deny(1, 333332667*ns, 1333332667*ns)}, // 1 unit and 2000 ticks free: 2 do not fit
		{2333334 * us, take, 1, allow(0, 1666666000*ns)},              // and nothing was charged
		{time.Hour, peek, 0, allow(5, 0)},
	}
	for _, alg := range buckets {
		t.Run(alg.String(), func(t *testing.T) {
			e := s.env(t)
			e.script(e.limiter(bucket(alg, 3, s1, 5)), "k", bucketSteps)
		})
	}
	t.Run("fixed_window", func(t *testing.T) {
		// 5 per 1s window, windows aligned to the Unix epoch.
		e := s.env(t)
		e.script(e.limiter(limit(sluice.FixedWindow, 5, s1)), "k", []step{
			{250 * ms, take, 1, allow(4, 750*ms)},
			{250 * ms, take, 4, allow(0, 750*ms)},
			{250 * ms, take, 1, deny(0, 750*ms, 750*ms)},
			{999999 * us, take, 1, deny(0, us, us)},
			{s1, take, 1, allow(4, s1)},
			{s1, take, 5, deny(4, s1, s1)}, // 5 do not fit in 4: nothing charged
			{1500 * ms, take, 4, allow(0, 500*ms)},
			{1500 * ms, peek, 0, deny(0, 500*ms, 500*ms)},
			{3 * s1, peek, 0, allow(5, 0)},
			{3900 * ms, take, 5, allow(0, 100*ms)},
			{4 * s1, take, 5, allow(0, s1)}, // a new window: 10 in 100ms
		})
	})
	t.Run("sliding_window", func(t *testing.T) {
		// 3 per 1s: the previous window's count weighs (P−e)/P, e the
		// time elapsed in the current window.
		e := s.env(t)
		e.script(e.limiter(limit(sluice.SlidingWindow, 3, s1)), "k", []step{
			{0, take, 1, allow(2, 2*s1)},
			{0, take, 2, allow(0, 2*s1)},
			// cur 3: only after the rollover, once 3×(P−e) <= 2×P,
			// e >= P/3: at 1s + ⌈1e9/3⌉ns.
			{0, take, 1, deny(0, 1333333334*ns, 2*s1)},
			{s1, take, 1, deny(0, 333333334*ns, s1)}, // prev 3 weighs fully
			// e = 333333µs: 3×666667000 + 1e9 > 3e9 by 1000.
			{1333333 * us, take, 1, deny(0, 334*ns, 666667*us)},
			{1333334 * us, take, 1, allow(0, 1666666*us)},
			// e = 500ms: 1.5 + cur 1 + 1 > 3; fits once 3×(P−e) <= 1×P.
			{1500 * ms, take, 1, deny(0, 166666667*ns, 1500*ms)},
			{2 * s1, take, 1, allow(1, 2*s1)},    // prev 1 weighs fully: 1+1+1 <= 3
			{2 * s1, take, 2, deny(1, s1, 2*s1)}, // 1+1+2 > 3 until prev is gone
			{2 * s1, take, 1, allow(0, 2*s1)},    // nothing was charged
			{2750 * ms, peek, 0, deny(0, 250*ms, 1250*ms)},
			{4 * s1, peek, 0, allow(3, 0)},
		})
	})
	t.Run("sliding_log", func(t *testing.T) {
		// 3 per 1s: a request counts until one Period after it.
		e := s.env(t)
		e.script(e.limiter(limit(sluice.SlidingLog, 3, s1)), "k", []step{
			{0, take, 1, allow(2, s1)},
			{200 * ms, take, 2, allow(0, s1)},
			{300 * ms, take, 1, deny(0, 700*ms, 900*ms)}, // the oldest expires at 1s
			{s1, take, 2, deny(1, 200*ms, 200*ms)},       // 2 more need the 200ms entry gone
			{s1, take, 1, allow(0, s1)},                  // nothing was charged
			{1200 * ms, peek, 0, allow(2, 800*ms)},       // the 200ms entry has expired
			{1200 * ms, take, 2, allow(0, s1)},
			{2199999 * us, take, 2, deny(1, us, us)}, // the 1.2s entry lives 1µs more
			{2200 * ms, take, 2, allow(1, s1)},
			{3200 * ms, peek, 0, allow(3, 0)},
		})
	})
	t.Run("burst_defaults_to_count", func(t *testing.T) {
		for _, alg := range buckets {
			t.Run(alg.String(), func(t *testing.T) {
				e := s.env(t)
				e.script(e.limiter(limit(alg, 4, s1)), "k", []step{
					{0, peek, 0, allow(4, 0)},
					{0, take, 4, allow(0, s1)},
					{0, take, 1, deny(0, 250*ms, s1)},
				})
			})
		}
	})
	t.Run("windows_align_to_unix_epoch", func(t *testing.T) {
		// 700ms does not divide the suite's epoch (1700006400s): the
		// window containing the epoch started 300ms before it.
		e := s.env(t)
		e.script(e.limiter(limit(sluice.FixedWindow, 2, 700*ms)), "k", []step{
			{0, take, 2, allow(0, 400*ms)},
			{0, take, 1, deny(0, 400*ms, 400*ms)},
			{399999 * us, take, 1, deny(0, us, us)},
			{400 * ms, take, 2, allow(0, 700*ms)},
		})
	})
}

// testCost checks cost-weighted requests on every algorithm: a cost that
// exceeds what remains is denied and charges nothing.
func (s *suite) testCost(t *testing.T) {
	resets := map[sluice.Algorithm]time.Duration{ // after 10 units of 10 per second
		sluice.TokenBucket: s1, sluice.GCRA: s1, sluice.FixedWindow: s1, sluice.SlidingWindow: 2 * s1, sluice.SlidingLog: s1,
	}
	partial := map[sluice.Algorithm]time.Duration{ // after 7 units
		sluice.TokenBucket: 700 * ms, sluice.GCRA: 700 * ms, sluice.FixedWindow: s1, sluice.SlidingWindow: 2 * s1, sluice.SlidingLog: s1,
	}
	retry := map[sluice.Algorithm]time.Duration{ // for 4 units with 3 left
		// Buckets: one unit short, 100ms. Sliding window: 7+4 > 10
		// until the rollover, then 7×(P−e) <= 6×P, e >= P/7:
		// 1s + ⌈1e9/7⌉ns.
		sluice.TokenBucket: 100 * ms, sluice.GCRA: 100 * ms, sluice.FixedWindow: s1, sluice.SlidingWindow: 1142857143 * ns, sluice.SlidingLog: s1,
	}
	retryOne := map[sluice.Algorithm]time.Duration{ // for 1 unit with none left
		// Sliding window: 10×(P−e) <= 9×P once e >= P/10.
		sluice.TokenBucket: 100 * ms, sluice.GCRA: 100 * ms, sluice.FixedWindow: s1, sluice.SlidingWindow: 1100 * ms, sluice.SlidingLog: s1,
	}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := s.env(t)
			lim := e.limiter(limit(alg, 10, s1))
			e.script(lim, "k", []step{
				{0, take, 7, allow(3, partial[alg])},
				{0, take, 4, deny(3, retry[alg], partial[alg])},
				{0, take, 3, allow(0, resets[alg])},
				{0, take, 1, deny(0, retryOne[alg], resets[alg])},
			})
		})
	}
	t.Run("invalid_costs", func(t *testing.T) {
		// These never reach the store: the limiter rejects them. They
		// are here so that the suite documents the whole contract.
		e := s.env(t)
		lim := e.limiter(bucket(sluice.GCRA, 10, s1, 20))
		for _, n := range []int64{0, -1, 21} {
			if d, err := lim.AllowN(e.ctx(), "k", n); err == nil {
				t.Errorf("AllowN(%d) = %s, nil; want an error", n, describe(d))
			}
		}
		e.script(lim, "k", []step{{0, take, 20, allow(0, 2*s1)}})
	})
}
