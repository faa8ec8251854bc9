package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/storetest"
)

// leaseViews returns a factory of n stores on one Redis, sharing a prefix
// of their own, all reading clk.
func leaseViews(base redisstore.Options) func(t *testing.T, clk *clock.Fake, n int) []sluice.LeaseStore {
	run := 0
	return func(t *testing.T, clk *clock.Fake, n int) []sluice.LeaseStore {
		run++
		opts := base
		opts.Prefix = fmt.Sprintf("lease%d-%d", run, time.Now().UnixNano())
		opts.Clock = clk
		opts.Timeout = 10 * time.Second
		out := make([]sluice.LeaseStore, n)
		for i := range out {
			out[i] = open(t, opts)
		}
		return out
	}
}

// takeViews is leaseViews for storetest.RunAcquireTake.
func takeViews(base redisstore.Options) func(t *testing.T, clk *clock.Fake, n int) []storetest.RateLeaseStore {
	views := leaseViews(base)
	return func(t *testing.T, clk *clock.Fake, n int) []storetest.RateLeaseStore {
		var out []storetest.RateLeaseStore
		for _, s := range views(t, clk, n) {
			out = append(out, s.(*redisstore.Store))
		}
		return out
	}
}

// A rate policy and a concurrency limit decided in one script call pass the
// conformance suite on one server, with hashed keys, and on a cluster (the
// policy and the limit share a name, so their keys share a slot).
func TestAcquireTakeConformance(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("single", func(t *testing.T) {
		storetest.RunAcquireTake(t, takeViews(redisstore.Options{URL: "redis://" + srv.Addr}))
	})
	t.Run("hashed", func(t *testing.T) {
		storetest.RunAcquireTake(t, takeViews(redisstore.Options{URL: "redis://" + srv.Addr, HashKeys: true, HashSecret: []byte("s")}))
	})
	t.Run("cluster", func(t *testing.T) {
		nodes := redistest.StartCluster(t, 3)
		storetest.RunAcquireTake(t, takeViews(redisstore.Options{Addrs: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr}}))
	})
}

// Leases pass the conformance suite with several stores on one server, on
// a cluster, and with hashed keys.
func TestLeaseConformance(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("single", func(t *testing.T) {
		storetest.RunLeases(t, leaseViews(redisstore.Options{URL: "redis://" + srv.Addr}))
	})
	t.Run("hashed", func(t *testing.T) {
		storetest.RunLeases(t, leaseViews(redisstore.Options{URL: "redis://" + srv.Addr, HashKeys: true, HashSecret: []byte("s")}))
	})
	t.Run("cluster", func(t *testing.T) {
		nodes := redistest.StartCluster(t, 3)
		storetest.RunLeases(t, leaseViews(redisstore.Options{Addrs: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr}}))
	})
}

// On the server's clock, a lease never released frees its slot by itself,
// and the set's TTL is the time until its last lease expires: Redis holds
// nothing once every lease is gone.
func TestLeaseServerTime(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 10 * time.Second})
	b := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 10 * time.Second})
	ca, err := sluice.NewConcurrency(a, "exports", 1, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := sluice.NewConcurrency(b, "exports", 1, 200*time.Millisecond)
	if _, d, err := ca.Acquire(ctx, "user"); err != nil || !d.Allowed {
		t.Fatalf("first Acquire: %+v, %v", d, err)
	}
	const key = "sluice:{7:exports:user}:c"
	ttl, _ := strconv.Atoi(srv.Do(t, "PTTL", key))
	if ttl <= 0 || ttl > 200 {
		t.Errorf("PTTL %s: got %d ms, want 1 to 200", key, ttl)
	}
	_, d, err := cb.Acquire(ctx, "user")
	if err != nil || d.Allowed {
		t.Fatalf("second Acquire while held: %+v, %v", d, err)
	}
	if d.RetryAfter <= 0 || d.RetryAfter > 200*time.Millisecond {
		t.Errorf("RetryAfter: got %v, want within (0, 200ms]", d.RetryAfter)
	}
	// The holder "dies": the slot comes back once the lease timeout has
	// passed on the Redis server's clock, which only real time moves.
	var l *sluice.Lease
	eventually(t, 10*time.Second, func() bool {
		if l, _, err = cb.Acquire(ctx, "user"); err != nil {
			t.Fatal(err)
		}
		return l != nil
	}, func() string { return "the slot of a lease never released did not come back" })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := srv.Do(t, "EXISTS", key); got != "0" {
		t.Errorf("EXISTS %s after the last release: got %s, want 0", key, got)
	}
}

// rateOnly hides a store's leases.
type rateOnly struct{ sluice.Store }

// When Redis is down and the Local fallback store keeps no leases, Acquire
// reports the error and grants nothing; a lease held in Redis cannot be
// released until Redis is back, and then it can.
func TestLeaseRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	fb := memstore.New(memstore.Options{})
	t.Cleanup(func() { fb.Close() })
	// Redis is killed, not paused: calls fail at once, and the Timeout
	// only has to be one that a loaded machine cannot outrun.
	s := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 5 * time.Second, BreakerThreshold: 1000, Fallback: rateOnly{fb}})
	c, err := sluice.NewConcurrency(s, "down", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := c.Acquire(ctx, "k")
	if err != nil || l == nil {
		t.Fatalf("Acquire with Redis up: %v, %v", l, err)
	}
	srv.Stop()
	if l2, d, err := c.Acquire(ctx, "k2"); err == nil || l2 != nil || d.Allowed {
		t.Errorf("Acquire with Redis down: got %v, %+v, %v; want an error and no lease", l2, d, err)
	}
	if err := l.Release(ctx); err == nil {
		t.Error("Release with Redis down: got nil, want an error")
	}
	srv.Restart(t)
	// Release may be retried after a failure: the first command on a
	// connection that broke while Redis was away fails once.
	eventually(t, 10*time.Second, func() bool { err = l.Release(ctx); return err == nil },
		func() string { return fmt.Sprintf("Release after Redis came back: %v", err) })
	if l, _, err := c.Acquire(ctx, "k"); err != nil || l == nil {
		t.Fatalf("Acquire after the retried Release: %v, %v", l, err)
	}
}
