package memstore_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestAllowDoesNotAllocate checks that deciding for an existing key
// allocates nothing, for every algorithm alone and paired with a second
// limit: while admitting at a steady rate (a sliding_log at steady state
// reuses its ring), while denying, and when peeking.
func TestAllowDoesNotAllocate(t *testing.T) {
	for _, alg := range algorithms {
		for _, second := range []bool{false, true} {
			name := alg.String()
			limits := []sluice.Limit{lim(alg, 10, time.Second)}
			if second {
				name += "+gcra"
				limits = append(limits, lim(sluice.GCRA, 100_000, time.Hour))
			}
			t.Run(name, func(t *testing.T) {
				s, clk := newStore(t, memstore.Options{})
				l := newLimiter(t, s, limits...)
				ctx := context.Background()
				// Warm up: the key exists and, for a log, its ring has
				// reached its steady size.
				for range 100 {
					clk.Advance(200 * time.Millisecond)
					l.Allow(ctx, "k")
				}
				for _, c := range []struct {
					name string
					f    func()
				}{
					{"admitting", func() {
						clk.Advance(200 * time.Millisecond) // half the rate: every request fits
						if d, _ := l.Allow(ctx, "k"); !d.Allowed {
							t.Fatal("denied at the steady rate")
						}
					}},
					{"peeking", func() { l.Peek(ctx, "k") }},
					{"denying", func() {
						if d, _ := l.AllowN(ctx, "k", 10); d.Allowed {
							t.Fatal("admitted 10 at once after 1")
						}
					}},
				} {
					if n := testing.AllocsPerRun(1000, c.f); n != 0 {
						t.Errorf("%s: %v allocations per decision, want 0", c.name, n)
					}
				}
			})
		}
	}
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		t.Run("Reserve/"+alg.String(), func(t *testing.T) {
			s, clk := newStore(t, memstore.Options{})
			l := newLimiter(t, s, lim(alg, 10, time.Second))
			ctx := context.Background()
			l.Allow(ctx, "k")
			n := testing.AllocsPerRun(1000, func() {
				clk.Advance(100 * time.Millisecond)
				r, _ := l.Reserve(ctx, "k", 1, time.Second)
				r.Cancel(ctx)
			})
			if n != 0 {
				t.Errorf("%v allocations per Reserve and Cancel, want 0", n)
			}
		})
	}
}

// TestSlidingLogGrowthAllocations measures what a growing sliding_log
// costs: its ring doubles, so the allocations per admitted request fall as
// the log grows. It logs the figure and checks the doubling.
func TestSlidingLogGrowthAllocations(t *testing.T) {
	s, clk := newStore(t, memstore.Options{})
	l := newLimiter(t, s, lim(sluice.SlidingLog, 100_000, time.Hour))
	ctx := context.Background()
	l.Allow(ctx, "k")
	const n = 10_000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		clk.Advance(time.Microsecond) // a new entry every time
		l.Allow(ctx, "k")
	}
	runtime.ReadMemStats(&after)
	allocs := after.Mallocs - before.Mallocs
	t.Logf("%d admissions into one growing sliding_log: %d allocations (%.4f each)", n, allocs, float64(allocs)/n)
	if allocs > 32 { // about log2(10000) = 14 ring doublings
		t.Errorf("%d allocations for %d admissions, want about one per doubling of the ring", allocs, n)
	}
}
