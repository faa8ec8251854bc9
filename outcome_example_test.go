package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
)

// Counting only failed logins, two ways: check with Peek and charge a
// failure with Allow; or charge every attempt with Allow and Refund a
// success, which no number of concurrent attempts can overrun.
func ExampleLimiter_Refund() {
	store := memstore.New(memstore.Options{Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	defer store.Close()
	lim, err := sluice.New(store, "login", sluice.Limit{Algorithm: sluice.GCRA, Count: 3, Period: 15 * time.Minute})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	checkPassword := func(attempt int) bool { return attempt%2 == 0 } // every other attempt succeeds

	// Check, then charge failures.
	for attempt := range 8 {
		if d, _ := lim.Peek(ctx, "alice|203.0.113.7"); !d.Allowed {
			fmt.Printf("check-then-charge: attempt %d refused, retry after %v\n", attempt, d.RetryAfter)
			break
		}
		if !checkPassword(attempt) {
			lim.Allow(ctx, "alice|203.0.113.7")
		}
	}

	// Reserve, then give back successes.
	for attempt := range 8 {
		d, _ := lim.Allow(ctx, "bob|203.0.113.7")
		if !d.Allowed {
			fmt.Printf("reserve-then-refund: attempt %d refused, retry after %v\n", attempt, d.RetryAfter)
			break
		}
		if checkPassword(attempt) {
			lim.Refund(ctx, "bob|203.0.113.7", 1)
		}
	}
	// Output:
	// check-then-charge: attempt 6 refused, retry after 5m0s
	// reserve-then-refund: attempt 6 refused, retry after 5m0s
}
