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
	"github.com/sluicehq/sluice/redisstore"
)

// hourly is a limit whose decisions do not change within a test's run at
// the server's time: a denial lasts twenty minutes, and there is no window
// boundary to cross.
var hourly = sluice.Limit{Algorithm: sluice.GCRA, Count: 3, Period: time.Hour}

// skew bounds how far a cached denial's RetryAfter may be from Redis's. The
// cache counts from when the reply arrived, on the coarse monotonic clock
// (clock.Default), so it runs late by the reply's latency plus the clock's
// lag; under -race on 2 cores that was measured at up to ~25ms. Any
// staleness of seconds would still show.
const skew = 250 * time.Millisecond

// A key past its limit is answered from the local cache of denials: 100
// denied requests cost Redis at most one script call, and each cached
// denial says what Redis would say, with RetryAfter counting down.
func TestDenyCacheSparesRedis(t *testing.T) {
	srv := redistest.Start(t)
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: slow})
	lim := limiter(t, store, "hammered", hourly)
	for i := range 3 {
		if d := allow(t, lim, "k"); !d.Allowed {
			t.Fatalf("request %d: got denied, want allowed", i)
		}
	}
	first := allow(t, lim, "k") // denied by Redis, and remembered
	if first.Allowed || first.RetryAfter <= 0 {
		t.Fatalf("fourth request: got %+v, want denied with a RetryAfter", first)
	}
	calls := commandCalls(t, srv, "evalsha", "eval")
	prev := first
	for i := range 100 {
		d := allow(t, lim, "k")
		if d.Allowed || d.Degraded || d.Limit != first.Limit || d.Index != first.Index || d.Remaining != 0 {
			t.Fatalf("cached denial %d: got %+v, want denied like %+v", i, d, first)
		}
		if d.RetryAfter <= 0 || d.RetryAfter > prev.RetryAfter {
			t.Fatalf("cached denial %d: RetryAfter %v after %v, want positive and not growing", i, d.RetryAfter, prev.RetryAfter)
		}
		if d.ResetAfter < d.RetryAfter {
			t.Fatalf("cached denial %d: ResetAfter %v < RetryAfter %v", i, d.ResetAfter, d.RetryAfter)
		}
		prev = d
	}
	if grew := commandCalls(t, srv, "evalsha", "eval") - calls; grew > 1 {
		t.Errorf("100 denied requests made %d script calls, want at most 1", grew)
	}
	// What Redis itself says now (Peek asks it, bypassing the cache).
	cached := allow(t, lim, "k")
	asked, err := lim.Peek(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if asked.Allowed || asked.Limit != cached.Limit || asked.Index != cached.Index || asked.Remaining != cached.Remaining {
		t.Errorf("cached %+v, Redis %+v: want the same denial", cached, asked)
	}
	if diff := (asked.RetryAfter - cached.RetryAfter).Abs(); diff > skew {
		t.Errorf("RetryAfter: cached %v, Redis %v: want within %v", cached.RetryAfter, asked.RetryAfter, skew)
	}
	if diff := (asked.ResetAfter - cached.ResetAfter).Abs(); diff > skew {
		t.Errorf("ResetAfter: cached %v, Redis %v: want within %v", cached.ResetAfter, asked.ResetAfter, skew)
	}
}

// The cache never changes a decision: the same random traffic (costs of one
// and more, several limits, peeks, resets) against a store with the cache
// and a store without it, on separate keys, gets the same answers.
func TestDenyCacheChangesNoDecision(t *testing.T) {
	srv := redistest.Start(t)
	with := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: slow})
	without := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: slow, DenyCache: -1})
	policies := [][]sluice.Limit{
		{hourly},
		{{Algorithm: sluice.TokenBucket, Count: 5, Period: time.Hour, Burst: 8}},
		{{Algorithm: sluice.SlidingLog, Count: 6, Period: time.Hour}},
		{
			{Algorithm: sluice.GCRA, Count: 10, Period: time.Hour, Burst: 4},
			{Algorithm: sluice.SlidingLog, Count: 7, Period: 2 * time.Hour},
		},
	}
	ctx := context.Background()
	for pi, limits := range policies {
		t.Run(fmt.Sprint(limits), func(t *testing.T) {
			name := fmt.Sprintf("same%d", pi)
			lw, lo := limiter(t, with, name, limits...), limiter(t, without, name, limits...)
			rng := rand.New(rand.NewPCG(uint64(pi), 9))
			calls := commandCalls(t, srv, "evalsha", "eval")
			scripted := 0 // decisions that would each cost a script call without a cache
			var worst time.Duration
			const steps = 300
			for step := range steps {
				k := rng.IntN(3)
				kw, ko := fmt.Sprintf("with%d", k), fmt.Sprintf("without%d", k)
				var dw, do sluice.Decision
				var ew, eo error
				switch r := rng.IntN(20); {
				case r == 0:
					ew, eo = lw.Reset(ctx, kw), lo.Reset(ctx, ko)
				case r < 3:
					scripted += 2
					dw, ew = lw.Peek(ctx, kw)
					do, eo = lo.Peek(ctx, ko)
				case r < 6:
					scripted += 2
					n := 2 + rng.Int64N(2)
					dw, ew = lw.AllowN(ctx, kw, n)
					do, eo = lo.AllowN(ctx, ko, n)
				default:
					scripted += 2
					dw, ew = lw.Allow(ctx, kw)
					do, eo = lo.Allow(ctx, ko)
				}
				if ew != nil || eo != nil {
					t.Fatalf("step %d: errors %v (cache) and %v (no cache)", step, ew, eo)
				}
				if dw.Allowed != do.Allowed || dw.Limit != do.Limit || dw.Index != do.Index || dw.Remaining != do.Remaining || dw.Degraded || do.Degraded {
					t.Fatalf("step %d: with the cache %+v, without %+v: want the same decision", step, dw, do)
				}
				diff := (dw.RetryAfter - do.RetryAfter).Abs()
				worst = max(worst, diff)
				if diff > skew {
					t.Fatalf("step %d: RetryAfter %v with the cache, %v without: want within %v", step, dw.RetryAfter, do.RetryAfter, skew)
				}
			}
			// The cache answered some of them, or the test proves nothing.
			hits := scripted - (commandCalls(t, srv, "evalsha", "eval") - calls)
			if hits < 10 {
				t.Errorf("the cache answered %d of %d requests, want enough denials to exercise it", hits, steps)
			}
			t.Logf("the cache answered %d of %d requests; RetryAfter differed by up to %v", hits, steps, worst)
		})
	}
}

// Reset through the same store forgets the cached denial at once.
func TestDenyCacheForgetsOnReset(t *testing.T) {
	srv := redistest.Start(t)
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: slow})
	lim := limiter(t, store, "reset", hourly)
	for range 5 {
		allow(t, lim, "k") // 3 admitted, 2 denied: the second from the cache
	}
	if err := lim.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, lim, "k"); !d.Allowed || d.Remaining != 2 {
		t.Errorf("after Reset: got Allowed=%v Remaining=%d, want Allowed=true Remaining=2", d.Allowed, d.Remaining)
	}
}

// Cancelling a reservation through the same store gives quota back; a
// denial cached before must not hide it. The cache's own comment promises
// it denies what Redis would admit only when another process resets or
// cancels.
func TestDenyCacheForgetsOnCancel(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, cache := range []int{-1, 0} {
		t.Run(fmt.Sprintf("DenyCache=%d", cache), func(t *testing.T) {
			store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: slow, DenyCache: cache})
			lim := limiter(t, store, fmt.Sprintf("cancel%d", cache), sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Hour, Burst: 2})
			allow(t, lim, "k") // one of two units used
			r, err := lim.Reserve(ctx, "k", 2, 2*time.Hour)
			if err != nil || !r.Allowed || r.Delay <= 0 {
				t.Fatalf("Reserve(2): got %+v, %v, want allowed in about an hour", r.Decision, err)
			}
			if d := allow(t, lim, "k"); d.Allowed {
				t.Fatalf("after the reservation: got allowed, want denied")
			}
			if err := r.Cancel(ctx); err != nil {
				t.Fatal(err)
			}
			// Redis now has a unit free again.
			if p, err := lim.Peek(ctx, "k"); err != nil || !p.Allowed {
				t.Fatalf("Peek after Cancel: got %+v, %v, want allowed", p, err)
			}
			if d := allow(t, lim, "k"); !d.Allowed {
				t.Errorf("after Cancel: got denied (RetryAfter %v), want allowed as Redis would", d.RetryAfter)
			}
		})
	}
}

// With Options.Clock the store decides at the caller's time; the deny cache
// must follow that clock too. A key denied at T is admitted by Redis once
// the clock passes T+RetryAfter; the cache must not keep denying it.
func TestDenyCacheFollowsInjectedClock(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	lim := limiter(t, open(t, redisstore.Options{URL: "redis://" + srv.Addr, Clock: clk, Timeout: slow}), "clocked",
		sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Minute})
	allow(t, lim, "k")
	allow(t, lim, "k")
	d := allow(t, lim, "k")
	if d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("third request: got %+v, want denied with RetryAfter 1m", d)
	}
	clk.Advance(time.Minute)
	d = allow(t, lim, "k")
	if !d.Allowed {
		t.Errorf("one minute later, in a new window: got denied (RetryAfter %v, Time %v), want allowed", d.RetryAfter, d.Time)
	}
	if !d.Time.Equal(clk.Now()) {
		t.Errorf("decision Time: got %v, want the clock's %v", d.Time, clk.Now())
	}
}
