package sluice_test

import (
	"context"
	"fmt"
	"time"
	_ "time/tzdata" // the tests name zones; they must load without a zoneinfo database

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
)

// A plan of 10 requests a second and 3 a month, the month renewed on the
// 31st (the last day of shorter months) at 09:00 Berlin time; one customer
// has its own anchor, the 3rd.
func ExamplePolicy_WithAnchor() {
	clk := clock.NewFake(time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()

	month, err := calendar.Parse("month anchor=31T09:00 zone=Europe/Berlin")
	if err != nil {
		panic(err)
	}
	p, err := sluice.NewPolicy("plan",
		sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second},
		sluice.Limit{Algorithm: sluice.FixedWindow, Count: 3, Calendar: month})
	if err != nil {
		panic(err)
	}
	lim, _ := sluice.NewWithPolicy(store, p)
	ctx := context.Background()
	var d sluice.Decision
	for range 4 {
		d, _ = lim.AllowN(ctx, "acme", 1)
	}
	fmt.Println("acme: allowed", d.Allowed, "renews", d.Time.Add(d.RetryAfter).In(month.Spec().Zone))

	third, _ := calendar.ParseAnchor("03")
	own, _ := sluice.NewWithPolicy(store, p.WithAnchor(third))
	d, _ = own.AllowN(ctx, "globex", 1)
	fmt.Println("globex: remaining", d.Remaining, "renews", d.ResetTime().In(month.Spec().Zone))
	// Output:
	// acme: allowed false renews 2026-02-28 09:00:00 +0100 CET
	// globex: remaining 2 renews 2026-03-03 00:00:00 +0100 CET
}
