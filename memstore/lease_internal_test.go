package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clock"
)

// Keys whose leases all expired without a release are swept once the map
// has doubled, so a crash loop cannot grow memory without bound.
func TestLeaseKeysSwept(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	s := New(Options{Clock: clk, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	for i := range 1000 {
		if _, err := s.Acquire(ctx, "c", strconv.Itoa(i), "id", 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Second)
	for i := range 100 {
		if _, err := s.Acquire(ctx, "c", "new"+strconv.Itoa(i), "id", 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.leaseKeys(); got > 100 {
		t.Errorf("after 1000 keys expired and 100 new ones: got %d keys held, want at most 100", got)
	}
	// A released key is dropped at once.
	s.Release(ctx, "c", "new0", "id")
	if got := s.leaseKeys(); got != 99 {
		t.Errorf("after a release: got %d keys, want 99", got)
	}
}
