package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
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
// maxWait when none is.
func TestConcurrencyWait(t *testing.T) {
	s := memstore.New(memstore.Options{SweepInterval: -1})
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
	if l, d, err := c.Wait(ctx, "k", 30*time.Millisecond, 5*time.Millisecond); err != nil || l != nil || d.Allowed {
		t.Fatalf("Wait while held: got %v, %+v, %v; want no lease", l, d, err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		held.Release(ctx)
	}()
	l, d, err := c.Wait(ctx, "k", time.Minute, 5*time.Millisecond)
	if err != nil || l == nil || !d.Allowed {
		t.Fatalf("Wait for a release: got %v, %+v, %v; want a lease", l, d, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := c.Wait(cctx, "k", time.Minute, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context: got %v, want context.Canceled", err)
	}
}

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
