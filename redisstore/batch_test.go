package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// takeAll runs store.TakeAll and fails t on an error.
func takeAll(t *testing.T, store *redisstore.Store, reqs ...sluice.Request) ([]sluice.Decision, bool) {
	t.Helper()
	out := make([]sluice.Decision, len(reqs))
	ok, err := store.TakeAll(context.Background(), reqs, out)
	if err != nil {
		t.Fatalf("TakeAll: %v", err)
	}
	return out, ok
}

// A batch is one script call however many policies, keys and limits it
// holds, including a policy that needs the big-number script; a batch
// denied by a remembered denial costs Redis nothing.
func TestTakeAllOneCall(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: slow, Clock: clk})
	perIP := policy(t, "per-ip", sluice.Limit{Algorithm: sluice.SlidingLog, Count: 2, Period: time.Minute})
	search := policy(t, "search",
		sluice.Limit{Algorithm: sluice.TokenBucket, Count: 20, Period: 10 * time.Second, Burst: 40},
		sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 1000, Period: time.Hour})
	// 10^9 per second: beyond plain arithmetic, decided by sluice.lua.
	huge := policy(t, "huge", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 1e9, Period: time.Second})
	reqs := []sluice.Request{{Policy: perIP, Key: "10.0.0.1", N: 1}, {Policy: search, Key: "key-a", N: 1}, {Policy: huge, Key: "all", N: 1000}}

	if out, ok := takeAll(t, store, reqs...); !ok { // loads the script
		t.Fatalf("first batch: denied, want admitted: %+v", out)
	}
	calls := commandCalls(t, srv, "evalsha", "eval")
	if out, ok := takeAll(t, store, reqs...); !ok {
		t.Fatalf("second batch: denied, want admitted: %+v", out)
	}
	if got := commandCalls(t, srv, "evalsha", "eval") - calls; got != 1 {
		t.Errorf("a batch made %d script calls, want 1", got)
	}
	out, ok := takeAll(t, store, reqs...)
	if ok || out[0].Allowed || out[0].RetryAfter != time.Minute || !out[1].Allowed || !out[2].Allowed {
		t.Fatalf("third batch: got %v %+v, want denied by per-ip alone with RetryAfter 1m", ok, out)
	}
	// Denied: nothing was charged, on either script's arithmetic.
	for _, c := range []struct {
		p    *sluice.Policy
		key  string
		want int64
	}{{search, "key-a", 38}, {huge, "all", 1e9 - 2000}} {
		d, err := store.Peek(context.Background(), c.p, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != c.want {
			t.Errorf("%s after a denied batch: %d remaining, want %d", c.p.Name(), d.Remaining, c.want)
		}
	}
	// per-ip's denial is remembered: the same batch is denied again
	// without a call.
	calls = commandCalls(t, srv, "evalsha", "eval")
	for range 10 {
		out, ok := takeAll(t, store, reqs...)
		if ok || out[0].Allowed || out[0].RetryAfter <= 0 || out[0].Limit != 2 {
			t.Fatalf("cached batch: got %v %+v, want denied by per-ip", ok, out)
		}
	}
	if got := commandCalls(t, srv, "evalsha", "eval") - calls; got != 0 {
		t.Errorf("ten batches denied by a remembered denial made %d script calls, want 0", got)
	}
	// Once the window has passed, the batch is admitted again.
	clk.Advance(time.Minute)
	if out, ok := takeAll(t, store, reqs...); !ok {
		t.Fatalf("after a minute: denied, want admitted: %+v", out)
	}
}

// With Redis down a batch follows OnError, as one decision: Local decides it
// atomically on the fallback store, Allow admits it, Deny denies it; every
// Decision says Degraded, and OnFailure hears of each batch once.
func TestTakeAllRedisDown(t *testing.T) {
	tight := sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Hour}
	loose := sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10, Period: time.Hour}
	for _, onError := range []redisstore.Failure{redisstore.Local, redisstore.Allow, redisstore.Deny} {
		t.Run(onError.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			var fails failures
			store := open(t, redisstore.Options{
				URL: srv.URL(), Timeout: 100 * time.Millisecond, OnError: onError,
				BreakerThreshold: 1000, OnFailure: fails.record,
			})
			p, q := policy(t, "tight", tight), policy(t, "loose", loose)
			reqs := []sluice.Request{{Policy: q, Key: "shared", N: 1}, {Policy: p, Key: "k", N: 1}}
			srv.Stop()
			var admitted int
			for i := range 4 {
				out, ok := takeAll(t, store, reqs...)
				for j, d := range out {
					if !d.Degraded {
						t.Errorf("batch %d, request %d: Degraded=false, want true", i, j)
					}
				}
				switch onError {
				case redisstore.Allow:
					if !ok {
						t.Errorf("batch %d: denied, want admitted (fail open)", i)
					}
				case redisstore.Deny:
					if ok || out[1].RetryAfter <= 0 {
						t.Errorf("batch %d: got %v %+v, want denied with a RetryAfter (fail closed)", i, ok, out)
					}
				case redisstore.Local:
					if want := i < 2; ok != want {
						t.Errorf("batch %d: admitted %v, want %v (the fallback holds tight's limit of 2)", i, ok, want)
					}
				}
				if ok {
					admitted++
				}
			}
			if got := len(fails.list()); got != 4 {
				t.Errorf("OnFailure called %d times for 4 batches, want 4", got)
			}
			if onError == redisstore.Local {
				// The denied batches charged nothing to the fallback.
				if _, ok := takeAll(t, store, sluice.Request{Policy: q, Key: "shared", N: 8}, sluice.Request{Policy: p, Key: "other", N: 1}); !ok {
					t.Errorf("loose had %d of 10 charged, yet 8 more were denied: the denied batches were charged", admitted)
				}
			}
		})
	}
}

// On a Redis Cluster the keys of a batch lie in different slots: the store
// peeks at every request, and charges them all only if all would pass. An
// admitted batch of two costs four script calls (two peeks, two takes), a
// denied one two peeks, and a denial it saw is remembered: repeats cost
// nothing.
func TestTakeAllCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	store := open(t, redisstore.Options{URL: clusterURL(nodes), Timeout: slow})
	p := policy(t, "tight", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Hour})
	q := policy(t, "loose", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10, Period: time.Hour})
	reqs := []sluice.Request{{Policy: q, Key: "shared", N: 1}, {Policy: p, Key: "k", N: 1}}
	calls := func() int {
		n := 0
		for _, node := range nodes {
			n += commandCalls(t, node, "evalsha", "eval")
		}
		return n
	}
	// Every node has the script, so that no call is a NOSCRIPT retry.
	for _, node := range nodes {
		node.Do(t, "SCRIPT", "LOAD", redisstore.PlainLua)
	}
	for i, want := range []int{4, 4, 2, 0, 0} {
		before := calls()
		out, ok := takeAll(t, store, reqs...)
		if admit := i < 2; ok != admit || out[1].Allowed != admit {
			t.Errorf("batch %d: admitted %v %+v, want %v", i, ok, out, admit)
		}
		if got := calls() - before; got != want {
			t.Errorf("batch %d: %d script calls, want %d", i, got, want)
		}
	}
	d, err := store.Peek(context.Background(), q, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 8 {
		t.Errorf("loose: %d remaining, want 8 (charged by the two admitted batches only)", d.Remaining)
	}
}
