package storetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testCarry checks that a key's counters survive a change of its limits'
// definitions: a policy rebuilt under the same name takes over the state,
// carried to the new definition as package algo's Rule.Carry describes
// (the usage at the decision's time, capped at the new capacity; a bucket
// whose Burst alone changed, a sliding window or a log whose Period did
// not change keep their state exactly). The expected values are worked out
// in the comments.
func (s *suite) testCarry(t *testing.T) {
	const m = time.Minute
	// Raising a limit lets a denied key through at once: 2 per hour, used
	// up at +0; at +10m the limit becomes 4 per hour.
	raise := map[sluice.Algorithm][]step{
		// Usage ⌈(60m−10m)/30m⌉ = 2 units, a debt of 2×15m at +10m.
		sluice.TokenBucket: {
			{10 * m, take, 1, allow(1, 45*m)},
			{10 * m, take, 1, allow(0, 60*m)},
			{10 * m, take, 1, deny(0, 15*m, 60*m)},
		},
		// The window of +0 counts 2 of 4.
		sluice.FixedWindow: {
			{10 * m, take, 1, allow(1, 50*m)},
			{10 * m, take, 1, allow(0, 50*m)},
			{10 * m, take, 1, deny(0, 50*m, 50*m)},
		},
		// The same period: both counts kept (prev 0, cur 2). cur 4+1 > 4
		// fits once 4×(P−e) <= 3×P in the next window: e = 15m.
		sluice.SlidingWindow: {
			{10 * m, take, 1, allow(1, 110*m)},
			{10 * m, take, 1, allow(0, 110*m)},
			{10 * m, take, 1, deny(0, 65*m, 110*m)},
		},
		// The same period: the entry (+0, 2) is kept.
		sluice.SlidingLog: {
			{10 * m, take, 1, allow(1, 60*m)},
			{10 * m, take, 1, allow(0, 60*m)},
			{10 * m, take, 1, deny(0, 50*m, 60*m)},
		},
	}
	raise[sluice.GCRA] = raise[sluice.TokenBucket]
	// Lowering a limit makes a heavy key wait for the new limit to free
	// room: 10 per hour, 8 used at +0; at +10m the limit becomes 4 per hour.
	lower := map[sluice.Algorithm][]step{
		// Usage ⌈(48m−10m)/6m⌉ = 7, capped at 4: a full bucket of 4×15m.
		sluice.TokenBucket: {
			{10 * m, take, 1, deny(0, 15*m, 60*m)},
			{25*m - us, take, 1, deny(0, us, 45*m+us)},
			{25 * m, take, 1, allow(0, 60*m)},
		},
		// The window of +0 counts min(8, 4).
		sluice.FixedWindow: {
			{10 * m, take, 1, deny(0, 50*m, 50*m)},
			{60*m - us, take, 1, deny(0, us, us)},
			{60 * m, take, 1, allow(3, 60*m)},
		},
		// The same period: cur min(8, 4) = 4; 4×(P−e) <= 3×P at e = 15m
		// of the next window.
		sluice.SlidingWindow: {
			{10 * m, take, 1, deny(0, 65*m, 110*m)},
			{75*m - us, take, 1, deny(0, us, 45*m+us)},
			{75 * m, take, 1, allow(0, 105*m)},
		},
		// The same period: the entry (+0, 8) is kept and frees room when
		// it expires.
		sluice.SlidingLog: {
			{10 * m, take, 1, deny(0, 50*m, 50*m)},
			{60*m - us, take, 1, deny(0, us, us)},
			{60 * m, take, 1, allow(3, 60*m)},
		},
	}
	lower[sluice.GCRA] = lower[sluice.TokenBucket]
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Run("raise", func(t *testing.T) {
				e := s.env(t)
				old := e.limiter(limit(alg, 2, time.Hour))
				if got := e.admitted(old, "k", 1, 3); got != 2 {
					t.Fatalf("admitted %d of 3 under 2 per hour, want 2", got)
				}
				e.script(e.rebuilt(old, limit(alg, 4, time.Hour)), "k", raise[alg])
			})
			t.Run("lower", func(t *testing.T) {
				e := s.env(t)
				old := e.limiter(limit(alg, 10, time.Hour))
				e.check("AllowN(8) under 10 per hour", old.Policy(), e.take(old, "k", 8), allow(2, expectReset(alg, 48*m, 60*m)))
				e.script(e.rebuilt(old, limit(alg, 4, time.Hour)), "k", lower[alg])
			})
			t.Run("same_definition", func(t *testing.T) {
				// A policy rebuilt with the same name and limits (a
				// reload that changes nothing, or a rule removed and
				// added back) keeps the counters as they are.
				e := s.env(t)
				old := e.limiter(limit(alg, 3, time.Hour))
				if got := e.admitted(old, "k", 1, 2); got != 2 {
					t.Fatalf("admitted %d of 2 under 3 per hour, want 2", got)
				}
				e.at(10 * m)
				again := e.rebuilt(old, limit(alg, 3, time.Hour))
				want := allow(0, expectReset(alg, 50*m, 50*m))
				switch alg {
				case sluice.SlidingWindow:
					want = allow(0, 110*m)
				case sluice.SlidingLog: // the newest entry is this request's
					want = allow(0, 60*m)
				}
				e.check("AllowN(1) under the rebuilt policy", again.Policy(), e.take(again, "k", 1), want)
				if d := e.take(again, "k", 1); d.Allowed {
					t.Errorf("a fourth request under 3 per hour: %s, want denied", describe(d))
				}
				// Back under the first policy object: the same state.
				if d := e.take(old, "k", 1); d.Allowed {
					t.Errorf("under the first policy object: %s, want denied", describe(d))
				}
			})
			t.Run("change_and_back", func(t *testing.T) {
				// 3 per hour, 3 used; the limit goes to 6 and back to 3:
				// the key keeps the 4 it used.
				e := s.env(t)
				old := e.limiter(limit(alg, 3, time.Hour))
				e.admitted(old, "k", 1, 3)
				e.at(10 * m)
				raised := e.rebuilt(old, limit(alg, 6, time.Hour))
				if d := e.take(raised, "k", 1); !d.Allowed || d.Remaining != 2 {
					t.Fatalf("under 6 per hour after 3: %s, want allowed with 2 remaining", describe(d))
				}
				back := e.rebuilt(old, limit(alg, 3, time.Hour))
				if d := e.take(back, "k", 1); d.Allowed || d.Remaining != 0 {
					t.Errorf("back under 3 per hour after 4: %s, want denied with 0 remaining", describe(d))
				}
			})
		})
	}
	t.Run("algorithm_change", func(t *testing.T) {
		// 4 per hour, 3 used at +0; at +10m the algorithm changes and the
		// limit stays 4 per hour. Every algorithm holds a usage of 3 at
		// +10m (a bucket: ⌈(45m−10m)/15m⌉), carried to the new one; a
		// bucket to the other bucket algorithm keeps its debt of 35m.
		after := map[sluice.Algorithm][]step{
			sluice.TokenBucket: { // a debt of 45m at +10m
				{10 * m, take, 1, allow(0, 60*m)},
				{10 * m, take, 1, deny(0, 15*m, 60*m)},
			},
			sluice.FixedWindow: { // the window of +0 counts 3
				{10 * m, take, 1, allow(0, 50*m)},
				{10 * m, take, 1, deny(0, 50*m, 50*m)},
			},
			sluice.SlidingWindow: { // cur 3 in the window of +0
				{10 * m, take, 1, allow(0, 110*m)},
				{10 * m, take, 1, deny(0, 65*m, 110*m)},
			},
			sluice.SlidingLog: { // one entry (+10m, 3)
				{10 * m, take, 1, allow(0, 60*m)},
				{10 * m, take, 1, deny(0, 60*m, 60*m)},
			},
		}
		after[sluice.GCRA] = after[sluice.TokenBucket]
		exact := []step{ // the debt of 35m kept
			{10 * m, take, 1, allow(0, 50*m)},
			{10 * m, take, 1, deny(0, 5*m, 50*m)},
		}
		for _, from := range algorithms {
			for _, to := range algorithms {
				if from == to {
					continue
				}
				t.Run(from.String()+"_to_"+to.String(), func(t *testing.T) {
					e := s.env(t)
					old := e.limiter(limit(from, 4, time.Hour))
					e.take(old, "k", 3)
					steps := after[to]
					if from.IsBucket() && to.IsBucket() {
						steps = exact
					}
					e.script(e.rebuilt(old, limit(to, 4, time.Hour)), "k", steps)
				})
			}
		}
	})
	t.Run("period_change", func(t *testing.T) {
		// 4 per hour, 3 used at +0; at +10m the period becomes 30m. The
		// usage of 3 is carried into the new period's terms.
		after := map[sluice.Algorithm][]step{
			sluice.TokenBucket: { // a debt of 3×7m30s at +10m
				{10 * m, take, 1, allow(0, 30*m)},
				{10 * m, take, 1, deny(0, 7*m+30*s1, 30*m)},
			},
			sluice.FixedWindow: { // the 30m window of +0 counts 3
				{10 * m, take, 1, allow(0, 20*m)},
				{10 * m, take, 1, deny(0, 20*m, 20*m)},
			},
			// cur 3 in the 30m window of +0; 4×(P−e) <= 3×P at e =
			// 7m30s of the next window.
			sluice.SlidingWindow: {
				{10 * m, take, 1, allow(0, 50*m)},
				{10 * m, take, 1, deny(0, 27*m+30*s1, 50*m)},
			},
			sluice.SlidingLog: { // one entry (+10m, 3)
				{10 * m, take, 1, allow(0, 30*m)},
				{10 * m, take, 1, deny(0, 30*m, 30*m)},
			},
		}
		after[sluice.GCRA] = after[sluice.TokenBucket]
		for _, alg := range algorithms {
			t.Run(alg.String(), func(t *testing.T) {
				e := s.env(t)
				old := e.limiter(limit(alg, 4, time.Hour))
				e.take(old, "k", 3)
				e.script(e.rebuilt(old, limit(alg, 4, 30*m)), "k", after[alg])
			})
		}
	})
	t.Run("burst_change", func(t *testing.T) {
		// A bucket of 4 per hour with Burst 8, 7 used at +0: a debt of
		// 105m. At +10m only Burst changes, to 2: the debt of 95m is
		// kept, capped at 2×15m.
		for _, alg := range buckets {
			t.Run(alg.String(), func(t *testing.T) {
				e := s.env(t)
				old := e.limiter(bucket(alg, 4, time.Hour, 8))
				e.take(old, "k", 7)
				e.script(e.rebuilt(old, bucket(alg, 4, time.Hour, 2)), "k", []step{
					{10 * m, take, 1, deny(0, 15*m, 30*m)},
					{25 * m, take, 1, allow(0, 30*m)},
				})
			})
		}
	})
	t.Run("peek_writes_nothing", func(t *testing.T) {
		// Peek carries the state in memory only: the key stays under
		// the definition that wrote it.
		e := s.env(t)
		old := e.limiter(limit(sluice.FixedWindow, 2, time.Hour))
		e.take(old, "k", 2)
		changed := e.rebuilt(old, limit(sluice.FixedWindow, 4, time.Minute))
		e.script(changed, "k", []step{{10 * m, peek, 0, allow(2, m)}})
		e.script(old, "k", []step{{10 * m, take, 1, deny(0, 50*m, 50*m)}})
		// Had the peek written the carried state, the minute of +10m
		// would be over and the key fresh under the new definition.
		e.script(changed, "k", []step{{20 * m, peek, 0, allow(2, m)}})
	})
	t.Run("take_all", func(t *testing.T) {
		// A batch carries its requests' states as Take does.
		e := s.env(t)
		old := e.limiter(limit(sluice.FixedWindow, 2, time.Hour))
		other := e.limiter(limit(sluice.GCRA, 10, time.Hour))
		e.take(old, "k", 2)
		raised := e.rebuilt(old, limit(sluice.FixedWindow, 4, time.Hour))
		e.at(10 * m)
		reqs := []sluice.Request{{Policy: raised.Policy(), Key: "k", N: 2}, {Policy: other.Policy(), Key: "k", N: 1}}
		out := make([]sluice.Decision, 2)
		ok, err := sluice.TakeAll(e.ctx(), e.store, reqs, out)
		if err != nil || !ok {
			t.Fatalf("TakeAll of 2 under the raised limit: %v, %v; want admitted", ok, err)
		}
		e.check("TakeAll request 0", raised.Policy(), out[0], allow(0, 50*m))
		if ok, err := sluice.TakeAll(e.ctx(), e.store, reqs[:1], out); err != nil || ok {
			t.Errorf("TakeAll of 2 more: %v, %v; want denied", ok, err)
		}
	})
}

// rebuilt returns a limiter of a new policy with the same name as lim's and
// the given limits, as a reload builds it.
func (e *env) rebuilt(lim *sluice.Limiter, limits ...sluice.Limit) *sluice.Limiter {
	e.t.Helper()
	p, err := sluice.NewPolicy(lim.Policy().Name(), limits...)
	if err != nil {
		e.t.Fatalf("storetest: NewPolicy(%q, %v): %v", lim.Policy().Name(), limits, err)
	}
	return e.limiterOf(p)
}

// expectReset returns the ResetAfter of a key of a limit of one hour for
// which bucket rules hold a debt of debt and window rules a window that
// ends in window; sliding windows reset a period after their current
// window ends.
func expectReset(alg sluice.Algorithm, debt, window time.Duration) time.Duration {
	switch alg {
	case sluice.TokenBucket, sluice.GCRA:
		return debt
	case sluice.SlidingWindow:
		return window + time.Hour
	}
	return window
}
