package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A store capped at 100,000 entries shared by two policies: a per-IP limit
// and a global one. The cap bounds memory whatever keys clients send.
func ExampleNew() {
	store := memstore.New(memstore.Options{MaxKeys: 100_000})
	defer store.Close()

	perIP, _ := sluice.New(store, "per-ip", sluice.Limit{Algorithm: sluice.SlidingLog, Count: 5, Period: time.Minute})
	global, _ := sluice.New(store, "global", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10_000, Period: time.Second})

	ctx := context.Background()
	admitted := 0
	for range 7 {
		g, _ := global.Allow(ctx, "all")
		d, _ := perIP.Allow(ctx, "198.51.100.23")
		if g.Allowed && d.Allowed {
			admitted++
		}
	}
	fmt.Printf("admitted %d of 7; entries held: %d\n", admitted, store.Len())
	// Output: admitted 5 of 7; entries held: 2
}
