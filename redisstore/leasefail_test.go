package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// With OnError Local, a lease acquired while Redis is down is held by the
// fallback store, and its Release goes there even once Redis is back; a
// lease held in Redis cannot be released while Redis is down and expires
// by itself. AcquireTake decides both limits on the fallback store.
func TestLeaseLocalFallback(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	fb := memstore.New(memstore.Options{Clock: clock.NewFake(epoch)})
	t.Cleanup(func() { fb.Close() })
	s := open(t, redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second, OnError: redisstore.Local, Fallback: fb, Connections: 1})
	c, err := sluice.NewConcurrency(s, "fall", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	inRedis, d, err := c.Acquire(ctx, "k")
	if err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("Redis up: got %+v, %v, want a lease from Redis", d, err)
	}

	srv.Stop()
	l1, d, err := c.Acquire(ctx, "k")
	if err != nil || !d.Allowed || !d.Degraded {
		t.Fatalf("Redis down: got %+v, %v, want a degraded lease", d, err)
	}
	l2, _, _ := c.Acquire(ctx, "k")
	if _, d, err := c.Acquire(ctx, "k"); err != nil || d.Allowed || !d.Degraded || d.RetryAfter != time.Minute {
		t.Fatalf("Redis down, fallback full: got %+v, %v, want refused by the fallback, retry 1m", d, err)
	}
	if err := inRedis.Release(ctx); err == nil {
		t.Errorf("releasing a lease held in Redis while Redis is down: got nil, want an error")
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("releasing a fallback lease: %v", err)
	}
	if st, _ := fb.Acquire(ctx, "fall", "k", "probe", 2, time.Minute); !st.Granted || st.InUse != 2 {
		t.Fatalf("fallback after a release: got %+v, want the slot free again", st)
	}
	fb.Release(ctx, "fall", "k", "probe")

	// AcquireTake decides on the fallback store too.
	lim, _ := sluice.New(s, "fall", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 5, Period: time.Hour, Burst: 5})
	lt, a, err := c.AcquireTake(ctx, lim, "k", 1)
	if err != nil || !a.Allowed() || !a.Rate.Degraded || !a.Slot.Degraded || a.Slot.Remaining != 0 {
		t.Fatalf("AcquireTake with Redis down: got %+v, %v, want both admitted on the fallback", a, err)
	}
	if _, a, err := c.AcquireTake(ctx, lim, "k", 1); err != nil || a.Allowed() || a.Rate.Remaining != 4 {
		t.Fatalf("AcquireTake with the fallback full: got %+v, %v, want refused, rate uncharged", a, err)
	}

	srv.Restart(t)
	eventually(t, 10*time.Second, func() bool {
		redisstore.ProbeDue(s) // the failures meanwhile may have opened the breaker
		_, d, err := c.Acquire(ctx, "other")
		return err == nil && !d.Degraded
	}, func() string { return "Redis back: leases still degraded" })
	for _, l := range []*sluice.Lease{l2, lt} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("releasing a fallback lease with Redis back: %v", err)
		}
	}
	if st, _ := fb.Acquire(ctx, "fall", "k", "probe", 2, time.Minute); st.InUse != 1 {
		t.Errorf("fallback after Redis came back: got %d leases held, want none before the probe", st.InUse-1)
	}
}

// With OnError Allow a lease is granted and held nowhere; with Deny it is
// refused, without an error, as decisions are.
func TestLeaseFailOpenAndClosed(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		onError redisstore.Failure
		granted bool
	}{{"allow", redisstore.Allow, true}, {"deny", redisstore.Deny, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			s := open(t, redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second, OnError: tc.onError})
			c, _ := sluice.NewConcurrency(s, "fail", 1, time.Minute)
			lim, _ := sluice.New(s, "fail", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1, Period: time.Hour})
			srv.Stop()
			for i := range 3 { // beyond the limit: no slot is counted
				l, d, err := c.Acquire(ctx, "k")
				if err != nil || d.Allowed != tc.granted || (l != nil) != tc.granted || !d.Degraded {
					t.Fatalf("acquire %d: got %+v, %v, want allowed %v, degraded", i, d, err, tc.granted)
				}
				if !tc.granted && d.RetryAfter <= 0 {
					t.Errorf("refused: got retry %v, want > 0", d.RetryAfter)
				}
				if l != nil {
					if err := l.Renew(ctx); err != nil {
						t.Errorf("renew of a lease held nowhere: %v", err)
					}
				}
				if err := l.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
				l, a, err := c.AcquireTake(ctx, lim, "k", 1)
				if err != nil || a.Allowed() != tc.granted || (l != nil) != tc.granted || !a.Slot.Degraded || !a.Rate.Degraded {
					t.Fatalf("acquire-take %d: got %+v, %v, want allowed %v, degraded", i, a, err, tc.granted)
				}
			}
		})
	}
}
