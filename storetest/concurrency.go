package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// hammer runs goroutines that each make tries requests of cost n on key
// at once, and returns the units admitted.
func (e *env) hammer(lim *sluice.Limiter, key string, goroutines, tries int, cost func(g, i int) int64) int64 {
	e.t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range tries {
				n := cost(g, i)
				d, err := lim.AllowN(e.ctx(), key, n)
				if err != nil {
					e.t.Errorf("AllowN(%q, %d): %v", key, n, err)
					return
				}
				if d.Allowed {
					admitted.Add(n)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return admitted.Load()
}

func one(int, int) int64 { return 1 }

// testConcurrency checks that a store decides atomically under contention:
// goroutines hammering one key never get more admitted than a sequential
// caller would, nor fewer.
func (s *suite) testConcurrency(t *testing.T) {
	const goroutines = 64
	t.Run("frozen", func(t *testing.T) {
		for _, alg := range algorithms {
			t.Run(alg.String(), func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(limit(alg, 100, s1))
				e.at(250 * ms)
				if got := e.hammer(lim, "k", goroutines, 16, one); got != 100 {
					t.Errorf("%d goroutines × 16 requests at one instant: admitted %d, want 100", goroutines, got)
				}
			})
		}
		t.Run("two_limits", func(t *testing.T) {
			e := s.env(t)
			lim := e.limiter(limit(sluice.SlidingLog, 50, s1), bucket(sluice.TokenBucket, 80, time.Hour, 0))
			if got := e.hammer(lim, "k", goroutines, 4, one); got != 50 {
				t.Errorf("admitted %d, want 50", got)
			}
			// The denials charged neither limit: 30 are left in the
			// second one once the first is free again.
			e.at(s1)
			if got := e.admitted(lim, "k", 1, 40); got != 30 {
				t.Errorf("a second later: admitted %d of 40, want 30", got)
			}
		})
	})
	t.Run("frozen_costs", func(t *testing.T) {
		// Costs of 1 to 4 at once: what is admitted plus what a
		// sequential caller can still take one unit at a time is
		// exactly the limit.
		for _, alg := range algorithms {
			t.Run(alg.String(), func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(limit(alg, 100, s1))
				got := e.hammer(lim, "k", goroutines, 4, func(g, i int) int64 { return int64((g+i)%4 + 1) })
				left := e.admitted(lim, "k", 1, 110)
				if got+int64(left) != 100 {
					t.Errorf("admitted %d units at once and %d after, want 100 in all", got, left)
				}
			})
		}
	})
	t.Run("stepped", func(t *testing.T) {
		// 10 per second, hammered at 0, 0.5s, 1s, ... 2.5s.
		want := map[sluice.Algorithm][]int64{
			sluice.TokenBucket: {10, 5, 5, 5, 5, 5},
			sluice.GCRA:        {10, 5, 5, 5, 5, 5},
			sluice.FixedWindow: {10, 0, 10, 0, 10, 0},
			// Weighted: at 1s the previous 10 weigh fully; at 1.5s
			// half, 5; at 2s the 5 of [1s, 2s) fully; at 2.5s 2.5 of
			// them, with 5 counted already: 7.5 − 5, 2 more.
			sluice.SlidingWindow: {10, 0, 0, 5, 5, 2},
			sluice.SlidingLog:    {10, 0, 10, 0, 10, 0},
		}
		for _, alg := range algorithms {
			t.Run(alg.String(), func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(limit(alg, 10, s1))
				var total, wantTotal int64
				for round, w := range want[alg] {
					e.at(time.Duration(round) * 500 * ms)
					got := e.hammer(lim, "k", 32, 4, one)
					if got != w {
						t.Errorf("round at +%v: admitted %d, want %d", e.now(), got, w)
					}
					total += got
					wantTotal += w
				}
				if total != wantTotal {
					t.Errorf("admitted %d in all, want %d", total, wantTotal)
				}
			})
		}
	})
	t.Run("many_keys", func(t *testing.T) {
		// Goroutines interleave 8 keys: each key admits its own limit.
		for _, alg := range algorithms {
			t.Run(alg.String(), func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(limit(alg, 20, s1))
				counts := make([]atomic.Int64, 8)
				var wg sync.WaitGroup
				for g := range goroutines {
					wg.Go(func() {
						for i := range 24 {
							k := (g + i) % len(counts)
							d, err := lim.Allow(e.ctx(), fmt.Sprint("key-", k))
							if err != nil {
								t.Errorf("Allow: %v", err)
								return
							}
							if d.Allowed {
								counts[k].Add(1)
							}
						}
					})
				}
				wg.Wait()
				for k := range counts {
					if got := counts[k].Load(); got != 20 {
						t.Errorf("key-%d: admitted %d, want 20", k, got)
					}
				}
			})
		}
	})
}

// testClockBackwards checks that a clock stepped back never admits more
// than the limit: state from the "future" keeps counting.
func (s *suite) testClockBackwards(t *testing.T) {
	const base = time.Hour
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Run("exhausted", func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(limit(alg, 10, s1))
				e.at(base)
				if got := e.admitted(lim, "k", 1, 12); got != 10 {
					t.Fatalf("at +%v: admitted %d of 12, want 10", e.now(), got)
				}
				for _, back := range []time.Duration{base - 1*us, base - 500*ms, base - s1, base - time.Minute, s1, base} {
					e.at(back)
					if got := e.admitted(lim, "k", 1, 12); got != 0 {
						t.Errorf("clock stepped back to +%v: admitted %d, want 0", back, got)
					}
					if d := e.peek(lim, "k"); d.Allowed {
						t.Errorf("clock stepped back to +%v: Peek = %s, want denied", back, describe(d))
					}
				}
				e.at(base + 2*s1)
				if got := e.admitted(lim, "k", 1, 12); got != 10 {
					t.Errorf("at +%v: admitted %d of 12, want 10", e.now(), got)
				}
			})
			t.Run("half_used", func(t *testing.T) {
				// Buckets count the time until the state's time as
				// debt; windows count requests made at a stepped-back
				// time in the state's window (the log at its newest
				// entry's time). Either way 10 in all.
				e := s.env(t)
				lim := e.limiter(limit(alg, 10, s1))
				e.at(base)
				first := e.admitted(lim, "k", 1, 5)
				e.at(base - s1)
				back := e.admitted(lim, "k", 1, 12)
				wantBack := map[bool]int{true: 0, false: 5}[alg.IsBucket()]
				// Peek at base−1s, then at base once more: after 5
				// units at base, the buckets lack 15 units at base−1s;
				// the windows hold 10 in the window of base.
				backPeek := map[sluice.Algorithm]outcome{
					sluice.TokenBucket:   deny(0, 600*ms, 1500*ms),
					sluice.GCRA:          deny(0, 600*ms, 1500*ms),
					sluice.FixedWindow:   deny(0, 2*s1, 2*s1),
					sluice.SlidingWindow: deny(0, 2100*ms, 3*s1),
					sluice.SlidingLog:    deny(0, 2*s1, 2*s1),
				}
				if first != 5 || back != wantBack {
					t.Fatalf("admitted %d at +%v, then %d a second earlier; want 5, then %d", first, base, back, wantBack)
				}
				e.check("Peek a second back", lim.Policy(), e.peek(lim, "k"), backPeek[alg])
				e.at(base)
				again := e.admitted(lim, "k", 1, 12)
				if first+back+again != 10 {
					t.Errorf("admitted %d at +%v, %d a second earlier, then %d at +%v again; want 10 in all", first, base, back, again, base)
				}
				wantPeek := map[sluice.Algorithm]outcome{
					sluice.TokenBucket:   deny(0, 100*ms, s1),
					sluice.GCRA:          deny(0, 100*ms, s1),
					sluice.FixedWindow:   deny(0, s1, s1),
					sluice.SlidingWindow: deny(0, 1100*ms, 2*s1),
					sluice.SlidingLog:    deny(0, s1, s1),
				}
				e.check("Peek back at the start", lim.Policy(), e.peek(lim, "k"), wantPeek[alg])
			})
		})
	}
}
