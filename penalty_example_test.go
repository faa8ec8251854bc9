package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
)

// A login limit of 3 attempts per 15 minutes whose offenders are blocked
// for a minute, then ten, then an hour.
func ExamplePolicy_WithPenalty() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()
	p, err := sluice.NewPolicy("login", sluice.Limit{Algorithm: sluice.GCRA, Count: 3, Period: 15 * time.Minute})
	if err != nil {
		panic(err)
	}
	p, err = p.WithPenalty(sluice.Penalty{
		Blocks: []time.Duration{time.Minute, 10 * time.Minute, time.Hour},
		Forget: 24 * time.Hour,
	})
	if err != nil {
		panic(err)
	}
	lim, _ := sluice.NewWithPolicy(store, p)
	ctx := context.Background()
	for range 4 {
		d, _ := lim.Allow(ctx, "alice")
		fmt.Println(d.Allowed, d.RetryAfter)
	}
	clk.Advance(time.Minute) // the block is over; the limit still denies
	d, _ := lim.Allow(ctx, "alice")
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// true 0s
	// true 0s
	// true 0s
	// false 1m0s
	// false 10m0s
}
