package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
)

func TestNewConcurrencyRejects(t *testing.T) {
	s, _ := newStore(t)
	for _, tc := range []struct {
		name  string
		limit int64
		lease time.Duration
	}{
		{"", 1, time.Second},
		{strings.Repeat("n", 201), 1, time.Second},
		{"a\nb", 1, time.Second},
		{"c", 0, time.Second},
		{"c", -1, time.Second},
		{"c", sluice.MaxConcurrency + 1, time.Second},
		{"c", 1, 0},
		{"c", 1, -time.Second},
		{"c", 1, time.Millisecond - 1},
		{"c", 1, sluice.MaxLease + 1},
	} {
		c, err := sluice.NewConcurrency(s, tc.name, tc.limit, tc.lease)
		if !errors.Is(err, sluice.ErrInvalidConcurrency) || c != nil {
			t.Errorf("NewConcurrency(%q, %d, %v): got %v, %v; want ErrInvalidConcurrency", tc.name, tc.limit, tc.lease, c, err)
		}
	}
	if _, err := sluice.NewConcurrency(nil, "c", 1, time.Second); err == nil {
		t.Error("NewConcurrency with a nil store: got no error")
	}
	for _, ok := range []struct {
		limit int64
		lease time.Duration
	}{{1, sluice.MinLease}, {sluice.MaxConcurrency, sluice.MaxLease}} {
		if _, err := sluice.NewConcurrency(s, "c", ok.limit, ok.lease); err != nil {
			t.Errorf("NewConcurrency(%d, %v): %v", ok.limit, ok.lease, err)
		}
	}
}

// Wait takes a slot as soon as one is released, and gives up after
// maxWait when none is. It runs in a testing/synctest bubble: Wait's
// deadline and poll timer, and the store's clock, run on the bubble's fake
// time, so the waits are exact whatever the machine's load.
func TestConcurrencyWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Options{Clock: bubbleClock{}, SweepInterval: -1})
		defer s.Close()
		c, err := sluice.NewConcurrency(s, "wait", 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		held, _, err := c.Acquire(ctx, "k")
		if err != nil || held == nil {
			t.Fatalf("Acquire: %v, %v", held, err)
		}
		start := time.Now()
		if l, d, err := c.Wait(ctx, "k", 30*time.Millisecond, 5*time.Millisecond); err != nil || l != nil || d.Allowed {
			t.Fatalf("Wait while held: got %v, %+v, %v; want no lease", l, d, err)
		}
		if waited := time.Since(start); waited != 30*time.Millisecond {
			t.Errorf("Wait while held gave up after %v, want maxWait, 30ms", waited)
		}
		go func() {
			time.Sleep(20 * time.Millisecond)
			held.Release(ctx)
		}()
		start = time.Now()
		l, d, err := c.Wait(ctx, "k", time.Minute, 5*time.Millisecond)
		if err != nil || l == nil || !d.Allowed {
			t.Fatalf("Wait for a release: got %v, %+v, %v; want a lease", l, d, err)
		}
		// Released at 20ms: taken by the poll at 20ms, or at the latest by
		// the next one, 5ms later.
		if waited := time.Since(start); waited < 20*time.Millisecond || waited > 25*time.Millisecond {
			t.Errorf("Wait for a release took %v, want 20ms to 25ms (released at 20ms, polling every 5ms)", waited)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, _, err := c.Wait(cctx, "k", time.Minute, 0); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait with a cancelled context: got %v, want context.Canceled", err)
		}
	})
}

// bubbleClock reads the time of the testing/synctest bubble it is called in.
type bubbleClock struct{}

func (bubbleClock) Now() time.Time { return time.Now() }

// At most two exports run at once per user; a crashed export gives its
// slot back when its lease runs out.
func ExampleConcurrency() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()

	exports, err := sluice.NewConcurrency(store, "exports", 2, 30*time.Second)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	first, _, _ := exports.Acquire(ctx, "user-1")
	_, _, _ = exports.Acquire(ctx, "user-1") // never released: its holder crashed
	_, d, _ := exports.Acquire(ctx, "user-1")
	fmt.Printf("third: allowed=%v retry_after=%v\n", d.Allowed, d.RetryAfter)

	first.Release(ctx)
	third, d, _ := exports.Acquire(ctx, "user-1")
	fmt.Printf("after a release: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	third.Release(ctx)

	clk.Advance(30 * time.Second) // the crashed export's lease runs out
	_, d, _ = exports.Acquire(ctx, "user-1")
	fmt.Printf("after the timeout: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// third: allowed=false retry_after=30s
	// after a release: allowed=true remaining=0
	// after the timeout: allowed=true remaining=1
}

// At most 2 exports at once per user and 3 an hour: a user refused a slot
// keeps the rate, and a user over the rate holds no slot.
func ExampleConcurrency_AcquireTake() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Options{Clock: clk})
	defer store.Close()

	perHour, err := sluice.New(store, "exports", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 3, Period: time.Hour})
	if err != nil {
		panic(err)
	}
	exports, err := sluice.NewConcurrency(store, "exports", 2, 10*time.Minute)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	first, _, _ := exports.AcquireTake(ctx, perHour, "user-1", 1)
	exports.AcquireTake(ctx, perHour, "user-1", 1)
	_, a, _ := exports.AcquireTake(ctx, perHour, "user-1", 1)
	fmt.Printf("third at once: slot=%v rate remaining=%d\n", a.Slot.Allowed, a.Rate.Remaining)

	first.Release(ctx)
	third, a, _ := exports.AcquireTake(ctx, perHour, "user-1", 1)
	fmt.Printf("after a release: allowed=%v rate remaining=%d\n", a.Allowed(), a.Rate.Remaining)
	third.Release(ctx)

	_, a, _ = exports.AcquireTake(ctx, perHour, "user-1", 1)
	fmt.Printf("fourth in the hour: rate=%v retry_after=%v slots free=%d\n", a.Rate.Allowed, a.Rate.RetryAfter, a.Slot.Remaining)
	// Output:
	// third at once: slot=false rate remaining=1
	// after a release: allowed=true rate remaining=0
	// fourth in the hour: rate=false retry_after=20m0s slots free=1
}

// WaitTake waits for a slot that a release frees, and gives up at once on
// a rate that would not admit the request within the wait.
func TestWaitTake(t *testing.T) {
	// In a testing/synctest bubble: WaitTake's poll timer runs on fake
	// time, and synctest.Wait tells when the waiter is blocked between two
	// polls.
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		mem := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
		defer mem.Close()
		store := &countingStore{Store: mem}
		lim, _ := sluice.New(store, "w", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 2, Period: time.Hour})
		c, _ := sluice.NewConcurrency(store, "w", 1, time.Hour)
		ctx := context.Background()
		held, a, err := c.AcquireTake(ctx, lim, "k", 1)
		if err != nil || !a.Allowed() {
			t.Fatalf("first: %+v, %v", a, err)
		}
		got := make(chan sluice.Admission, 1)
		go func() {
			l, a, err := c.WaitTake(ctx, lim, "k", 1, time.Hour, time.Millisecond)
			if err != nil {
				t.Error(err)
			}
			l.Release(ctx)
			got <- a
		}()
		// The waiter cannot have the slot until it is released: once it
		// has been refused (its every refusal uncharged) and waits for its
		// next poll, release.
		synctest.Wait()
		if n := store.acquireTakes.Load(); n != 2 {
			t.Fatalf("the waiter waits after %d decisions, want 2: the first take's and its refusal", n)
		}
		select {
		case a := <-got:
			t.Fatalf("the waiter got %+v while the slot was held", a)
		default:
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if a := <-got; !a.Allowed() || a.Rate.Remaining != 0 {
			t.Fatalf("after the release: got %+v, want admitted with the rate spent", a)
		}
		// The rate is spent for 30 minutes: a wait of 10 ends at once.
		start := time.Now()
		_, a, err = c.WaitTake(ctx, lim, "k", 1, 10*time.Minute, 0)
		if err != nil || a.Rate.Allowed || a.Rate.RetryAfter != 30*time.Minute {
			t.Fatalf("rate spent: got %+v, %v, want refused, retry 30m", a, err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("a wait the rate cannot end in time took %v, want none", waited)
		}
	})
}

// countingStore is a memory store that counts its atomic rate-and-slot
// decisions, so that a test can tell a waiter has asked.
type countingStore struct {
	*memstore.Store
	acquireTakes atomic.Int64
}

func (s *countingStore) AcquireTake(ctx context.Context, p *sluice.Policy, n int64, name, key, id string, limit int64, lease time.Duration) (sluice.Decision, sluice.LeaseStatus, error) {
	s.acquireTakes.Add(1)
	return s.Store.AcquireTake(ctx, p, n, name, key, id, limit, lease)
}
