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

// A store too small for its keys forgets live state to stay within its cap,
// and Evicted says so: here 64 clients, each limited to one request an hour,
// share a store that holds 16 entries, so 48 of them lose their state while
// it still matters (and could be admitted again). A gateway exports the
// count as sluice_evicted_keys_total; a count that keeps rising means
// MaxKeys is too small, or a flood of new keys is under way.
func ExampleStore_Evicted() {
	store := memstore.New(memstore.Options{MaxKeys: 16, Shards: 1})
	defer store.Close()
	lim, _ := sluice.New(store, "per-client", sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Hour})

	ctx := context.Background()
	for i := range 64 {
		lim.Allow(ctx, fmt.Sprint("client-", i))
	}
	fmt.Printf("cap %d, held %d, evicted %d\n", store.MaxKeys(), store.Len(), store.Evicted())
	// Output: cap 16, held 16, evicted 48
}
