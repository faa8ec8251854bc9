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
