package redisstore_test

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// Two or more API servers share one limit through Redis. If Redis fails,
// each server goes on limiting its own traffic with the same limits in
// memory, and the decisions say so.
func ExampleNew() {
	store, err := redisstore.New(redisstore.Options{
		URL:     "redis://127.0.0.1:6379/0",
		Timeout: 50 * time.Millisecond,
		OnError: redisstore.Local,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim, err := sluice.New(store, "search", sluice.Limit{Algorithm: sluice.GCRA, Count: 20, Period: 10 * time.Second, Burst: 40})
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/api/search", func(w http.ResponseWriter, r *http.Request) {
		// The connection's address: a client cannot choose it, as it could
		// a header.
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		d, err := lim.Allow(r.Context(), ip)
		if err != nil || !d.Allowed {
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		if d.Degraded {
			log.Print("rate limit decided locally: Redis is unavailable")
		}
		w.Write([]byte("results"))
	})
}

// A configuration loader refuses, before serving, a limit the Redis store
// cannot run.
func ExampleCheckLimit() {
	for _, l := range []sluice.Limit{
		{Algorithm: sluice.GCRA, Count: 10, Period: time.Second},
		{Algorithm: sluice.GCRA, Count: 10, Period: 1500 * time.Nanosecond},
	} {
		fmt.Println(redisstore.CheckLimit(l))
	}
	// Output:
	// <nil>
	// redisstore: unsupported limit: period 1.5µs is not a whole number of microseconds (Redis keeps time in microseconds)
}
