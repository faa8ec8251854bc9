package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
)

// leaseRun numbers the names RunLeases uses, so that runs against one
// shared backend never meet.
var leaseRun atomic.Int64

// RunLeases runs the conformance suite of sluice.LeaseStore, through
// sluice.Concurrency, at exact times on a clock.Fake. newStores must return
// n views of one fresh backend (n stores sharing their leases, such as n
// redisstore.Store values on one Redis server, or one memstore.Store n
// times), all reading the time from clk. The suite checks that:
//
//   - no more than the limit of leases is ever held at once per key, with
//     many goroutines acquiring and releasing through every view;
//   - a lease never released frees its slot once the lease timeout has
//     passed on the clock, and not a microsecond before;
//   - Release is idempotent and a stale lease (expired, its slot taken by
//     another) releases nothing but itself;
//   - Renew extends a held lease and reports a lost one;
//   - keys and names are kept apart;
//   - the Decision carries Limit, Remaining, RetryAfter and ResetAfter;
//   - for a sluice.LeaseInspector, Peek reports the leases without taking
//     one and Reset frees every slot of a key.
//
// Durations must be exact to the microsecond.
func RunLeases(t *testing.T, newStores func(t *testing.T, clk *clock.Fake, n int) []sluice.LeaseStore) {
	t.Helper()
	ctx := context.Background()
	setup := func(t *testing.T, n int, limit int64, lease time.Duration) (*clock.Fake, []*sluice.Concurrency) {
		t.Helper()
		clk := clock.NewFake(epoch)
		stores := newStores(t, clk, n)
		if len(stores) != n {
			t.Fatalf("factory returned %d stores, want %d", len(stores), n)
		}
		name := fmt.Sprintf("lease-%s-%d", t.Name(), leaseRun.Add(1))
		var cs []*sluice.Concurrency
		for _, s := range stores {
			c, err := sluice.NewConcurrency(s, name, limit, lease)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		return clk, cs
	}
	acquire := func(t *testing.T, c *sluice.Concurrency, key string, want bool) (*sluice.Lease, sluice.Decision) {
		t.Helper()
		l, d, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatalf("Acquire(%q): %v", key, err)
		}
		if d.Allowed != want || (l != nil) != want {
			t.Fatalf("Acquire(%q): got allowed %v (lease %v), want %v; decision %+v", key, d.Allowed, l != nil, want, d)
		}
		return l, d
	}

	t.Run("limit", func(t *testing.T) {
		clk, cs := setup(t, 1, 3, time.Minute)
		c := cs[0]
		var ls []*sluice.Lease
		for i := range 3 {
			clk.Advance(time.Second)
			l, d := acquire(t, c, "k", true)
			if d.Limit != 3 || d.Remaining != int64(2-i) || d.RetryAfter != 0 || d.ResetAfter != time.Minute {
				t.Errorf("acquire %d: got limit %d remaining %d retry %v reset %v, want 3, %d, 0, 1m", i, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, 2-i)
			}
			if !d.Time.Equal(clk.Now()) {
				t.Errorf("acquire %d: got time %v, want %v", i, d.Time, clk.Now())
			}
			ls = append(ls, l)
		}
		clk.Advance(time.Second)
		_, d := acquire(t, c, "k", false)
		// The first lease, taken 3s ago, expires in 57s; the last in 59s.
		if d.Remaining != 0 || d.RetryAfter != 57*time.Second || d.ResetAfter != 59*time.Second {
			t.Errorf("denied: got remaining %d retry %v reset %v, want 0, 57s, 59s", d.Remaining, d.RetryAfter, d.ResetAfter)
		}
		acquire(t, c, "other", true)
		if err := ls[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		l, d := acquire(t, c, "k", true)
		if d.Remaining != 0 {
			t.Errorf("after a release: got remaining %d, want 0", d.Remaining)
		}
		for _, l := range append(ls, l) {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, d := acquire(t, c, "k", true); d.Remaining != 2 {
			t.Errorf("all released: got remaining %d, want 2", d.Remaining)
		}
	})

	t.Run("peek_reset", func(t *testing.T) {
		clk, cs := setup(t, 2, 2, time.Minute)
		if _, err := cs[0].Peek(ctx, "k"); errors.Is(err, sluice.ErrNoInspect) {
			t.Skip("not a sluice.LeaseInspector")
		}
		peek := func(key string) sluice.Decision {
			t.Helper()
			d, err := cs[1].Peek(ctx, key)
			if err != nil {
				t.Fatalf("Peek(%q): %v", key, err)
			}
			return d
		}
		if d := peek("k"); !d.Allowed || d.Remaining != 2 || d.ResetAfter != 0 || d.Limit != 2 {
			t.Errorf("no lease: got %+v, want allowed, 2 free, reset 0", d)
		}
		l1, _ := acquire(t, cs[0], "k", true)
		clk.Advance(10 * time.Second)
		acquire(t, cs[0], "k", true)
		clk.Advance(5 * time.Second)
		for range 2 { // peeking takes nothing
			if d := peek("k"); d.Allowed || d.Remaining != 0 || d.RetryAfter != 45*time.Second || d.ResetAfter != 55*time.Second || !d.Time.Equal(clk.Now()) {
				t.Errorf("full: got %+v, want refused, retry 45s, reset 55s", d)
			}
		}
		if err := l1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if d := peek("k"); !d.Allowed || d.Remaining != 1 || d.RetryAfter != 0 || d.ResetAfter != 55*time.Second {
			t.Errorf("one held: got %+v, want allowed, 1 free, reset 55s", d)
		}
		acquire(t, cs[1], "other", true)
		if err := cs[1].Reset(ctx, "k"); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		if d := peek("k"); d.Remaining != 2 || d.ResetAfter != 0 {
			t.Errorf("after Reset: got %+v, want 2 free", d)
		}
		if d := peek("other"); d.Remaining != 1 {
			t.Errorf("another key after Reset: got %d free, want 1", d.Remaining)
		}
	})

	t.Run("names_apart", func(t *testing.T) {
		clk := clock.NewFake(epoch)
		s := newStores(t, clk, 1)[0]
		base := fmt.Sprintf("apart-%d", leaseRun.Add(1))
		a, _ := sluice.NewConcurrency(s, base+":x", 1, time.Minute)
		b, _ := sluice.NewConcurrency(s, base, 1, time.Minute)
		acquire(t, a, "k", true)
		acquire(t, b, "x:k", true) // same bytes joined, different pair
		acquire(t, b, "k", true)
		acquire(t, a, "k", false)
	})

	t.Run("expiry", func(t *testing.T) {
		// A holder that dies never releases; its slot comes back after
		// the lease timeout, to the microsecond.
		clk, cs := setup(t, 2, 2, 200*time.Millisecond)
		acquire(t, cs[0], "k", true)
		clk.Advance(50 * time.Millisecond)
		acquire(t, cs[1], "k", true)
		clk.Advance(150*time.Millisecond - time.Microsecond)
		if _, d := acquire(t, cs[1], "k", false); d.RetryAfter != time.Microsecond {
			t.Errorf("1µs before expiry: got retry %v, want 1µs", d.RetryAfter)
		}
		clk.Advance(time.Microsecond)
		_, d := acquire(t, cs[1], "k", true)
		if d.Remaining != 0 || d.ResetAfter != 200*time.Millisecond {
			t.Errorf("at expiry: got remaining %d reset %v, want 0, 200ms", d.Remaining, d.ResetAfter)
		}
		clk.Advance(time.Hour)
		if _, d := acquire(t, cs[0], "k", true); d.Remaining != 1 {
			t.Errorf("all expired: got remaining %d, want 1", d.Remaining)
		}
	})

	t.Run("release", func(t *testing.T) {
		clk, cs := setup(t, 2, 1, time.Second)
		stale, _ := acquire(t, cs[0], "k", true)
		clk.Advance(time.Second) // stale expires; its slot goes to fresh
		fresh, _ := acquire(t, cs[1], "k", true)
		// The stale lease was lost: its first release says so, and does
		// not free the slot fresh holds; a second does nothing.
		if err := stale.Release(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
			t.Fatalf("releasing an expired lease: got %v, want ErrLeaseLost", err)
		}
		if err := stale.Release(ctx); err != nil {
			t.Fatal(err)
		}
		acquire(t, cs[0], "k", false) // fresh still holds the slot
		for range 2 {
			if err := fresh.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		l, _ := acquire(t, cs[0], "k", true)
		if err := fresh.Release(ctx); err != nil { // a third time: still nothing
			t.Fatal(err)
		}
		acquire(t, cs[1], "k", false)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var none *sluice.Lease
		if err := none.Release(ctx); err != nil {
			t.Errorf("nil lease: got %v, want nil", err)
		}
	})

	t.Run("release_lost", func(t *testing.T) {
		// Release tells a lease released in time from one lost.
		clk, cs := setup(t, 2, 2, time.Second)
		kept, _ := acquire(t, cs[0], "k", true)
		lost, _ := acquire(t, cs[1], "k", true)
		clk.Advance(time.Second - time.Microsecond)
		if err := kept.Release(ctx); err != nil {
			t.Errorf("released 1µs before expiry: got %v, want nil", err)
		}
		if err := kept.Release(ctx); err != nil {
			t.Errorf("released twice: got %v, want nil", err)
		}
		clk.Advance(time.Microsecond)
		if err := lost.Release(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
			t.Errorf("released at expiry: got %v, want ErrLeaseLost", err)
		}
		if err := lost.Release(ctx); err != nil {
			t.Errorf("a lost lease released again: got %v, want nil", err)
		}
	})

	t.Run("renew", func(t *testing.T) {
		clk, cs := setup(t, 1, 1, time.Second)
		l, _ := acquire(t, cs[0], "k", true)
		clk.Advance(900 * time.Millisecond)
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("Renew of a held lease: %v", err)
		}
		if want := clk.Now().Add(time.Second); !l.Expires().Equal(want) {
			t.Errorf("renewed: expires %v, want %v", l.Expires(), want)
		}
		clk.Advance(900 * time.Millisecond) // past the first expiry
		if _, d := acquire(t, cs[0], "k", false); d.RetryAfter != 100*time.Millisecond {
			t.Errorf("renewed lease: got retry %v, want 100ms", d.RetryAfter)
		}
		clk.Advance(100 * time.Millisecond)
		if err := l.Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
			t.Errorf("Renew of an expired lease: got %v, want ErrLeaseLost", err)
		}
		l2, _ := acquire(t, cs[0], "k", true)
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l2.Renew(ctx); !errors.Is(err, sluice.ErrLeaseLost) {
			t.Errorf("Renew of a released lease: got %v, want ErrLeaseLost", err)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		const limit, views, goroutines, tries = 5, 3, 24, 40
		_, cs := setup(t, views, limit, time.Hour)
		peak, granted := holdLeases(t, goroutines, tries, func(g int) (*sluice.Lease, bool, error) {
			l, d, err := cs[g%views].Acquire(ctx, "k")
			return l, d.Allowed, err
		})
		if peak > limit {
			t.Errorf("got %d leases in flight at once, want at most %d", peak, limit)
		}
		if granted < limit {
			t.Errorf("got %d leases granted in all, want at least %d", granted, limit)
		}
		// Every lease was released: the full limit is free again.
		var ls []*sluice.Lease
		for i := range limit {
			l, _ := acquire(t, cs[i%views], "k", true)
			ls = append(ls, l)
		}
		acquire(t, cs[0], "k", false)
		for _, l := range ls {
			l.Release(ctx)
		}
	})
}

// holdLeases runs goroutines that each try tries times to take a lease with
// acquire (given the goroutine's number), hold it for a moment and release
// it, all starting at once. It returns the most leases held at once and
// how many were granted in all.
func holdLeases(t *testing.T, goroutines, tries int, acquire func(g int) (*sluice.Lease, bool, error)) (peak, granted int64) {
	t.Helper()
	ctx := context.Background()
	var inFlight, most, n atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for range tries {
				l, ok, err := acquire(g)
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if !ok {
					runtime.Gosched()
					continue
				}
				n.Add(1)
				now := inFlight.Add(1)
				for p := most.Load(); now > p && !most.CompareAndSwap(p, now); p = most.Load() {
				}
				runtime.Gosched()
				inFlight.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return most.Load(), n.Load()
}
