package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
)

// RateLeaseStore is a store of both rate limits and leases, as
// RunAcquireTake tests it.
type RateLeaseStore interface {
	sluice.Store
	sluice.LeaseStore
}

// RunAcquireTake runs the conformance suite of
// sluice.Concurrency.AcquireTake, a rate policy and a concurrency limit
// decided together, at exact times on a clock.Fake. newStores must return n
// views of one fresh backend, all reading the time from clk, as for
// RunLeases; the policy and the limit share their name, as the Redis store
// needs on a cluster. The suite checks that:
//
//   - a refused slot never charges the rate policy, and a refused rate
//     never takes a slot;
//   - both decisions carry exact Remaining, RetryAfter and ResetAfter;
//   - many goroutines through every view never exceed either limit, and
//     the rate policy is charged exactly once per admitted request.
func RunAcquireTake(t *testing.T, newStores func(t *testing.T, clk *clock.Fake, n int) []RateLeaseStore) {
	t.Helper()
	ctx := context.Background()
	type view struct {
		lim *sluice.Limiter
		c   *sluice.Concurrency
	}
	setup := func(t *testing.T, n int, rate sluice.Limit, slots int64, lease time.Duration) (*clock.Fake, []view) {
		t.Helper()
		clk := clock.NewFake(epoch)
		stores := newStores(t, clk, n)
		if len(stores) != n {
			t.Fatalf("factory returned %d stores, want %d", len(stores), n)
		}
		name := fmt.Sprintf("take-%s-%d", t.Name(), leaseRun.Add(1))
		var vs []view
		for _, s := range stores {
			lim, err := sluice.New(s, name, rate)
			if err != nil {
				t.Fatal(err)
			}
			c, err := sluice.NewConcurrency(s, name, slots, lease)
			if err != nil {
				t.Fatal(err)
			}
			vs = append(vs, view{lim, c})
		}
		return clk, vs
	}
	take := func(t *testing.T, v view, key string) (*sluice.Lease, sluice.Admission) {
		t.Helper()
		l, a, err := v.c.AcquireTake(ctx, v.lim, key, 1)
		if err != nil {
			t.Fatalf("AcquireTake(%q): %v", key, err)
		}
		if (l != nil) != a.Allowed() {
			t.Fatalf("AcquireTake(%q): lease %v but allowed %v", key, l != nil, a.Allowed())
		}
		return l, a
	}
	rate := sluice.Limit{Algorithm: sluice.TokenBucket, Count: 3, Period: time.Minute, Burst: 3}

	t.Run("exact", func(t *testing.T) {
		clk, vs := setup(t, 2, rate, 2, time.Minute)
		a0, b0 := vs[0], vs[1]
		l1, a := take(t, a0, "k")
		if !a.Allowed() || a.Rate.Remaining != 2 || a.Slot.Remaining != 1 || a.Slot.ResetAfter != time.Minute || !a.Rate.Time.Equal(clk.Now()) || !a.Slot.Time.Equal(clk.Now()) {
			t.Errorf("first: got %+v, want rate remaining 2, slot remaining 1, slot reset 1m, at now", a)
		}
		clk.Advance(time.Second)
		l2, a := take(t, b0, "k")
		if !a.Allowed() || a.Rate.Remaining != 1 || a.Slot.Remaining != 0 || a.Slot.ResetAfter != time.Minute {
			t.Errorf("second: got %+v, want rate remaining 1, slot remaining 0", a)
		}
		clk.Advance(time.Second)
		// No slot free: the rate policy is not charged.
		_, a = take(t, a0, "k")
		if a.Slot.Allowed || a.Slot.RetryAfter != 58*time.Second || a.Slot.ResetAfter != 59*time.Second || !a.Rate.Allowed || a.Rate.Remaining != 1 {
			t.Errorf("no slot: got %+v, want slot refused retry 58s reset 59s; rate admitting, remaining 1", a)
		}
		if d, err := a0.lim.Peek(ctx, "k"); err != nil || d.Remaining != 1 {
			t.Errorf("no slot: rate remaining %d (%v), want 1: a refused slot charged the rate", d.Remaining, err)
		}
		if err := l1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l3, a := take(t, b0, "k")
		if !a.Allowed() || a.Rate.Remaining != 0 {
			t.Errorf("after a release: got %+v, want allowed, rate remaining 0", a)
		}
		for _, l := range []*sluice.Lease{l2, l3} {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// The rate refuses: no slot is taken. 3 per minute: a token every
		// 20s, the first spent 2s ago.
		_, a = take(t, a0, "k")
		if a.Rate.Allowed || a.Rate.RetryAfter != 18*time.Second || a.Slot.Allowed {
			t.Errorf("rate refused: got %+v, want rate refused retry 18s, no slot", a)
		}
		for range 2 {
			l, d, err := a0.c.Acquire(ctx, "k")
			if err != nil || !d.Allowed {
				t.Fatalf("rate refused: a slot was taken: Acquire got %+v, %v", d, err)
			}
			defer l.Release(ctx)
		}
		clk.Advance(18*time.Second - time.Microsecond)
		if _, a = take(t, a0, "other"); !a.Allowed() {
			t.Errorf("other key: got %+v, want allowed", a)
		}
	})

	t.Run("rate_then_slot", func(t *testing.T) {
		// A rate refusal at a full key reports both: the rate's status
		// is a peek, charging nothing.
		clk, vs := setup(t, 1, sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1, Period: time.Minute}, 1, 10*time.Second)
		v := vs[0]
		l, _ := take(t, v, "k")
		_, a := take(t, v, "k")
		if a.Allowed() || a.Slot.Allowed || a.Rate.Allowed {
			t.Errorf("both full: got %+v, want both refused", a)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		if _, a := take(t, v, "k"); !a.Allowed() || a.Rate.Remaining != 0 {
			t.Errorf("next window: got %+v, want allowed, remaining 0", a)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		const slots, burst, views, goroutines, tries = 3, 40, 3, 12, 30
		_, vs := setup(t, views, sluice.Limit{Algorithm: sluice.TokenBucket, Count: 1, Period: time.Hour, Burst: burst}, slots, time.Hour)
		peak, admitted := holdLeases(t, goroutines, tries, func(g int) (*sluice.Lease, bool, error) {
			v := vs[g%views]
			l, a, err := v.c.AcquireTake(ctx, v.lim, "k", 1)
			return l, a.Allowed(), err
		})
		if peak > slots {
			t.Errorf("got %d in flight at once, want at most %d", peak, slots)
		}
		n := admitted
		if n > burst || n < slots {
			t.Errorf("got %d admitted, want %d to %d", n, slots, burst)
		}
		// The clock stood still: the rate was charged once per admitted
		// request, and never for a refused slot.
		d, err := vs[0].lim.Peek(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != burst-n {
			t.Errorf("rate remaining %d after %d admitted, want %d", d.Remaining, n, burst-n)
		}
		// No slot was kept by a refused rate.
		for i := range slots {
			l, d, err := vs[i%views].c.Acquire(ctx, "k")
			if err != nil || !d.Allowed {
				t.Fatalf("slot %d: got %+v, %v, want free", i, d, err)
			}
			defer l.Release(ctx)
		}
	})
}
