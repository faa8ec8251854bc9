package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
)

// A limiter of 3 requests per second per client, with a burst of 3.
func Example() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()

	lim, err := sluice.New(store, "api", sluice.Limit{Algorithm: sluice.GCRA, Count: 3, Period: time.Second})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	var d sluice.Decision
	for range 4 {
		d, _ = lim.Allow(ctx, "client-1")
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Waiting exactly as told is enough; a nanosecond less is not.
	clk.Advance(d.RetryAfter - 1)
	d, _ = lim.Allow(ctx, "client-1")
	fmt.Printf("1ns early: allowed=%v\n", d.Allowed)
	clk.Advance(1)
	d, _ = lim.Allow(ctx, "client-1")
	fmt.Printf("on time: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed=true remaining=2 retry_after=0s
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=333.333334ms
	// 1ns early: allowed=false
	// on time: allowed=true remaining=0
}

// Several limits on one key are checked and charged together: a request is
// admitted only if every limit admits it, and a rejected request is charged
// to none of them.
func ExampleNewPolicy() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()

	// 2 per second AND 3 per minute.
	policy, err := sluice.NewPolicy("api",
		sluice.Limit{Algorithm: sluice.TokenBucket, Count: 2, Period: time.Second},
		sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 3, Period: time.Minute},
	)
	if err != nil {
		panic(err)
	}
	lim, _ := sluice.NewWithPolicy(store, policy)
	ctx := context.Background()
	for i := range 5 {
		d, _ := lim.Allow(ctx, "user:42")
		fmt.Printf("t=%ds allowed=%v binding=%s remaining=%d\n", i, d.Allowed, policy.Limits()[d.Index], d.Remaining)
		clk.Advance(time.Second)
	}
	// Output:
	// t=0s allowed=true binding=token_bucket 2/1s remaining=1
	// t=1s allowed=true binding=sliding_window 3/1m0s remaining=1
	// t=2s allowed=true binding=sliding_window 3/1m0s remaining=0
	// t=3s allowed=false binding=sliding_window 3/1m0s remaining=0
	// t=4s allowed=false binding=sliding_window 3/1m0s remaining=0
}

// The leaky bucket as a queue: instead of rejecting, Reserve tells each
// request how long to wait for its turn, and refuses only those whose turn
// is further away than the caller will wait. Cancel gives a turn back.
func ExampleLimiter_Reserve() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()

	// 4 per second, one at a time: a turn every 250ms.
	lim, _ := sluice.New(store, "export", sluice.Limit{Algorithm: sluice.GCRA, Count: 4, Period: time.Second, Burst: 1})
	ctx := context.Background()
	var last sluice.Reservation
	for i := 1; i <= 5; i++ {
		r, _ := lim.Reserve(ctx, "tenant-7", 1, 900*time.Millisecond)
		fmt.Printf("request %d: ok=%v wait=%v\n", i, r.Allowed, r.Delay)
		if r.Allowed {
			last = r
		}
	}
	last.Cancel(ctx) // the request that waited 750ms gives up
	r, _ := lim.Reserve(ctx, "tenant-7", 1, 900*time.Millisecond)
	fmt.Printf("after a cancel: ok=%v wait=%v\n", r.Allowed, r.Delay)
	// Output:
	// request 1: ok=true wait=0s
	// request 2: ok=true wait=250ms
	// request 3: ok=true wait=500ms
	// request 4: ok=true wait=750ms
	// request 5: ok=false wait=0s
	// after a cancel: ok=true wait=750ms
}

// TakeAll decides the limits of several keys together, as a request that is
// limited per client address AND per API key: it is charged to both or, if
// either denies it, to neither.
func ExampleTakeAll() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()

	perIP, _ := sluice.NewPolicy("per-ip", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 3, Period: time.Minute})
	perKey, _ := sluice.NewPolicy("per-key", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Minute})
	ctx := context.Background()
	out := make([]sluice.Decision, 2)
	for _, apiKey := range []string{"key-a", "key-a", "key-a", "key-b", "key-b"} {
		ok, err := sluice.TakeAll(ctx, store, []sluice.Request{
			{Policy: perIP, Key: "203.0.113.7", N: 1},
			{Policy: perKey, Key: apiKey, N: 1},
		}, out)
		if err != nil {
			panic(err)
		}
		ip, _ := store.Peek(ctx, perIP, "203.0.113.7")
		fmt.Printf("%s: admitted=%v, the address has %d left\n", apiKey, ok, ip.Remaining)
	}
	// Output:
	// key-a: admitted=true, the address has 2 left
	// key-a: admitted=true, the address has 1 left
	// key-a: admitted=false, the address has 1 left
	// key-b: admitted=true, the address has 0 left
	// key-b: admitted=false, the address has 0 left
}

// A policy rebuilt under the same name, as a configuration reload builds it,
// takes over the counters of the one it replaces: raising the limit lets a
// denied client through at once, lowering it makes a heavy client wait for
// the new limit.
func ExampleNewPolicy_reload() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()
	ctx := context.Background()
	limiter := func(count int64) *sluice.Limiter {
		lim, err := sluice.New(store, "api", sluice.Limit{Algorithm: sluice.SlidingLog, Count: count, Period: time.Hour})
		if err != nil {
			panic(err)
		}
		return lim
	}
	show := func(lim *sluice.Limiter) {
		d, _ := lim.Allow(ctx, "client")
		fmt.Printf("limit %d: allowed=%v remaining=%d retry_after=%v\n", d.Limit, d.Allowed, d.Remaining, d.RetryAfter)
	}
	two := limiter(2)
	show(two)
	show(two)
	show(two)
	clk.Advance(10 * time.Minute)
	four := limiter(4) // the 2 used are carried
	show(four)
	show(four)
	show(four)
	one := limiter(1) // 4 used: the client waits for them to expire
	show(one)
	// Output:
	// limit 2: allowed=true remaining=1 retry_after=0s
	// limit 2: allowed=true remaining=0 retry_after=0s
	// limit 2: allowed=false remaining=0 retry_after=1h0m0s
	// limit 4: allowed=true remaining=1 retry_after=0s
	// limit 4: allowed=true remaining=0 retry_after=0s
	// limit 4: allowed=false remaining=0 retry_after=50m0s
	// limit 1: allowed=false remaining=0 retry_after=1h0m0s
}
