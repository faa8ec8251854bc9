package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/storekit"
)

// newStore returns a Redis store on srv that reads time from clk.
func newStore(t *testing.T, srv *redistest.Server, clk redisstore.Clock, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	opts.URL = "redis://" + srv.Addr
	opts.Clock = clk
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second // decisions, not latency, are under test
	}
	s, err := redisstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The Lua script must make exactly the decisions of package algo's Go code:
// drive both stores with the same clock and traffic and compare every
// decision. Redis works in microseconds, so its durations may be up to one
// microsecond longer (rounded up).
func TestScriptMatchesGo(t *testing.T) {
	srv := redistest.Start(t)
	epoch := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	policies := [][]sluice.Limit{
		{{Algorithm: sluice.GCRA, Count: 3, Period: time.Second}},
		{{Algorithm: sluice.GCRA, Count: 7, Period: 3 * time.Second, Burst: 4}},
		{{Algorithm: sluice.TokenBucket, Count: 20, Period: 10 * time.Second, Burst: 40}},
		{{Algorithm: sluice.TokenBucket, Count: 5, Period: time.Second, Burst: 2}},
		{{Algorithm: sluice.TokenBucket, Count: 999999937, Period: 24 * time.Hour, Burst: 999999937}},
		{{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Second}},
		{{Algorithm: sluice.SlidingWindow, Count: 10, Period: 7 * time.Second}},
		{{Algorithm: sluice.SlidingWindow, Count: 1_000_000_007, Period: 24 * time.Hour}},
		{{Algorithm: sluice.SlidingLog, Count: 5, Period: time.Second}},
		{
			{Algorithm: sluice.GCRA, Count: 10, Period: time.Second, Burst: 3},
			{Algorithm: sluice.TokenBucket, Count: 45, Period: 7 * time.Second},
		},
		{
			{Algorithm: sluice.GCRA, Count: 10, Period: time.Second},
			{Algorithm: sluice.TokenBucket, Count: 999999937, Period: 24 * time.Hour, Burst: 999999937},
		},
		{
			{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Second},
			{Algorithm: sluice.SlidingWindow, Count: 30, Period: 10 * time.Second},
			{Algorithm: sluice.SlidingLog, Count: 12, Period: 5 * time.Second},
			{Algorithm: sluice.FixedWindow, Count: 25, Period: 4 * time.Second},
		},
	}
	ctx := context.Background()
	for pi, limits := range policies {
		t.Run(fmt.Sprint(limits), func(t *testing.T) {
			clk := clock.NewFake(epoch)
			mem := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
			defer mem.Close()
			red := newStore(t, srv, clk, redisstore.Options{DenyCache: -1})
			p, err := sluice.NewPolicy(fmt.Sprintf("diff%d", pi), limits...)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(pi), 7))
			capacity := storekit.Of(p).Rule(0).Capacity()
			for i := range p.Len() {
				capacity = min(capacity, storekit.Of(p).Rule(i).Capacity())
			}
			mean := int64(storekit.Of(p).Rule(0).Period()) / max(storekit.Of(p).Rule(0).Count(), 1) / int64(time.Microsecond)
			// Reservations, and cancellations of past ones, for policies
			// that allow them.
			type reserved struct {
				key           string
				n             int64
				atGot, atWant time.Time // each store's own time for the request
			}
			var held []reserved
			for step := range 400 {
				if len(held) == 0 || rng.IntN(2) == 0 {
					clk.Advance(time.Duration(rng.Int64N(2*mean+2)) * time.Microsecond)
				}
				key := fmt.Sprintf("k%d", rng.IntN(3))
				n := 1 + rng.Int64N(min(capacity, 3))
				var got, want sluice.Decision
				var gerr, werr error
				switch r := rng.IntN(10); {
				case r < 2:
					want, werr = mem.Peek(ctx, p, key)
					got, gerr = red.Peek(ctx, p, key)
				case r < 5 && p.CanReserve() && capacity > 1:
					// A cost below the capacity: one that empties the bucket
					// is charged from a debt of zero at a time Redis rounds up
					// to the microsecond, so its schedule would lag Go's by
					// up to a microsecond per reservation, beyond the
					// rounding this test allows.
					n = 1 + rng.Int64N(min(capacity-1, 3))
					wait := time.Duration(rng.Int64N(8*mean+1)) * time.Microsecond
					want, werr = mem.Reserve(ctx, p, key, n, wait)
					got, gerr = red.Reserve(ctx, p, key, n, wait)
					if werr == nil && want.Allowed && got.Allowed {
						held = append(held, reserved{key, n, got.Time.Add(got.Delay), want.Time.Add(want.Delay)})
						if len(held) > 4 {
							held = held[1:]
						}
					}
				case r < 7 && len(held) > 0:
					// Mostly the latest reservation, while it is still
					// ahead and so refunded; sometimes an older one.
					i := len(held) - 1
					if rng.IntN(3) == 0 {
						i = rng.IntN(len(held))
					}
					c := held[i]
					held = append(held[:i], held[i+1:]...)
					werr = mem.Cancel(ctx, p, c.key, c.n, c.atWant)
					gerr = red.Cancel(ctx, p, c.key, c.n, c.atGot)
					if werr != nil || gerr != nil {
						t.Fatalf("step %d: cancel errors: memstore %v, redis %v", step, werr, gerr)
					}
					continue
				default:
					want, werr = mem.Take(ctx, p, key, n)
					got, gerr = red.Take(ctx, p, key, n)
				}
				if werr != nil || gerr != nil {
					t.Fatalf("step %d: errors: memstore %v, redis %v", step, werr, gerr)
				}
				same := got.Allowed == want.Allowed && got.Limit == want.Limit && got.Remaining == want.Remaining &&
					got.Index == want.Index && !got.Degraded && got.Time.Equal(want.Time) &&
					roundedUp(got.RetryAfter, want.RetryAfter) && roundedUp(got.ResetAfter, want.ResetAfter) &&
					roundedUp(got.Delay, want.Delay)
				if !same {
					t.Fatalf("step %d (key %s, cost %d): redis %+v\nwant (memstore) %+v", step, key, n, got, want)
				}
			}
		})
	}
}

// roundedUp reports whether got is want rounded up to a microsecond.
func roundedUp(got, want time.Duration) bool {
	return got >= want && got-want < time.Microsecond
}
