// Command library shows Sluice as a library on the embedded in-memory store:
// it sends a burst of requests for two clients through a limiter of 5
// requests per second (burst 5) AND 8 per minute, and prints each decision.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func main() {
	store := memstore.New(memstore.Options{})
	defer store.Close()

	lim, err := sluice.New(store, "demo",
		sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Second},
		sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 8, Period: time.Minute},
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, client := range []string{"203.0.113.7", "198.51.100.23"} {
		for i := 1; i <= 7; i++ {
			d, err := lim.Allow(ctx, client)
			if err != nil {
				log.Fatal(err)
			}
			status := "200 OK"
			if !d.Allowed {
				status = fmt.Sprintf("429 Too Many Requests, Retry-After %v", d.RetryAfter.Round(time.Millisecond))
			}
			fmt.Printf("%-14s request %d: %s (limit %d, remaining %d)\n", client, i, status, d.Limit, d.Remaining)
		}
	}

	// The leaky bucket as a queue: instead of a 429, each request waits for
	// its turn, paced at 5 per second, for at most one second.
	queue, err := sluice.New(store, "queue", sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Second, Burst: 1})
	if err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	for i := 1; i <= 4; i++ {
		d, err := queue.Wait(ctx, "worker", 1, time.Second)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("queued request %d: allowed=%v after %v\n", i, d.Allowed, time.Since(start).Round(10*time.Millisecond))
	}
}
