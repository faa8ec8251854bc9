package redisstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// penalized returns a limiter of the limits under a penalty.
func penalized(t *testing.T, store sluice.Store, name string, pen sluice.Penalty, limits ...sluice.Limit) *sluice.Limiter {
	t.Helper()
	p, err := policy(t, name, limits...).WithPenalty(pen)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := sluice.NewWithPolicy(store, p)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// A blocked key is answered from the local cache of denials until its
// block ends, without a script call; then it reaches Redis again.
func TestPenaltyBlockCached(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Clock: clk, Timeout: slow})
	lim := penalized(t, store, "login", sluice.Penalty{Blocks: []time.Duration{time.Minute}, Forget: time.Hour},
		sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1, Period: time.Second})
	allow(t, lim, "k")
	if d := allow(t, lim, "k"); d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("offence: %+v, want denied for a minute", d)
	}
	calls := commandCalls(t, srv, "evalsha", "eval")
	clk.Set(epoch.Add(59 * time.Second))
	for i := range 50 {
		if d := allow(t, lim, "k"); d.Allowed || d.RetryAfter != time.Second || d.Degraded {
			t.Fatalf("blocked request %d: %+v, want denied for the block's last second", i, d)
		}
	}
	if grew := commandCalls(t, srv, "evalsha", "eval") - calls; grew != 0 {
		t.Errorf("50 blocked requests made %d script calls, want none", grew)
	}
	clk.Set(epoch.Add(time.Minute))
	if d := allow(t, lim, "k"); !d.Allowed {
		t.Errorf("at the block's end: %+v, want allowed (the block charged nothing)", d)
	}
	if grew := commandCalls(t, srv, "evalsha", "eval") - calls; grew != 1 {
		t.Errorf("the request at the block's end made %d script calls, want 1", grew)
	}
}

// Denials that do not block are strikes and are not cached: each reaches
// Redis, so After of them block. (Cached, the second and third would not
// count, and the key would never be blocked.)
func TestPenaltyStrikesReachRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Clock: clk, Timeout: slow})
	lim := penalized(t, store, "login", sluice.Penalty{After: 3, Blocks: []time.Duration{time.Minute}, Forget: time.Hour}, hourly)
	for range 3 {
		allow(t, lim, "k")
	}
	for i, want := range []time.Duration{20 * time.Minute, 20 * time.Minute, time.Minute} {
		if d := allow(t, lim, "k"); d.Allowed || d.RetryAfter != want {
			t.Fatalf("denial %d: %+v, want RetryAfter %v", i+1, d, want)
		}
	}
	if err := lim.Reset(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, lim, "k"); !d.Allowed {
		t.Errorf("after Reset: %+v, want allowed", d)
	}
}

// A policy that needs big-number arithmetic gets the penalty too.
func TestPenaltyWide(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Clock: clk, Timeout: slow})
	lim := penalized(t, store, "wide", sluice.Penalty{Blocks: []time.Duration{time.Minute, time.Hour}, Forget: time.Hour},
		sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 1_000_000, Period: time.Hour})
	if !redisstore.Wide(store, lim.Policy()) {
		t.Fatal("the policy is decided in plain arithmetic; the test needs a wide one")
	}
	if d, err := lim.AllowN(t.Context(), "k", 1_000_000); err != nil || !d.Allowed {
		t.Fatalf("the whole window: %+v, %v", d, err)
	}
	if d := allow(t, lim, "k"); d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("offence: %+v, want denied for a minute", d)
	}
	if d, err := lim.Peek(t.Context(), "k"); err != nil || d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("Peek while blocked: %+v, %v", d, err)
	}
}
