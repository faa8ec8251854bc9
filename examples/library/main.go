// Command library shows Sluice as a library on the embedded in-memory store.
// A limiter of 5 requests per second (bursts of 5) AND 8 per minute decides
// a burst of requests from one client, then more a second later, until the
// per-minute limit stops them; another client has a quota of its own. Then
// the leaky bucket as a queue schedules requests instead of rejecting them.
//
// The store runs on a fake clock that the program moves by hand, so that a
// minute of traffic takes no time and the output is always the same. A real
// program leaves memstore.Options.Clock unset: the store reads the system's
// clock.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
)

func main() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()

	lim, err := sluice.New(store, "demo",
		sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Second},
		sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 8, Period: time.Minute},
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	send := func(client string, n int) {
		for range n {
			d, err := lim.Allow(ctx, client)
			if err != nil {
				log.Fatal(err)
			}
			status := "200 OK"
			if !d.Allowed {
				status = fmt.Sprintf("429 Too Many Requests, Retry-After %v", d.RetryAfter.Round(time.Millisecond))
			}
			fmt.Printf("  %-13s %s (limit %d, remaining %d)\n", client, status, d.Limit, d.Remaining)
		}
	}
	fmt.Println("0s: 7 requests at once; the burst of 5 passes, 5 per second stops the rest")
	send("203.0.113.7", 7)
	clk.Advance(time.Second)
	fmt.Println("1s: 5 more; 3 pass, and 8 per minute stops the rest for over a minute")
	send("203.0.113.7", 5)
	fmt.Println("1s: another client has a quota of its own")
	send("198.51.100.23", 2)

	// The leaky bucket as a queue: instead of a 429, each request is given
	// its turn, paced at 5 per second, if that turn is at most a second
	// away (Wait would then sleep until it).
	queue, err := sluice.New(store, "queue", sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Second, Burst: 1})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("1s: 7 jobs queued at once, 5 per second, waiting at most 1s")
	for i := 1; i <= 7; i++ {
		r, err := queue.Reserve(ctx, "worker", 1, time.Second)
		if err != nil {
			log.Fatal(err)
		}
		if r.Allowed {
			fmt.Printf("  job %d: runs in %v\n", i, r.Delay)
		} else {
			fmt.Printf("  job %d: refused, its turn is %v away\n", i, r.RetryAfter)
		}
	}
}
