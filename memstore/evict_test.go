package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A full shard evicts the entry worth least: the one whose state uses the
// smallest fraction of its limit, not the least recently used. In a shard
// of 8 entries, which one sample covers, 6 keys at their limit, one that
// used 30 of 60 and one that used 1 of 60: new keys evict the 1 of 60 first,
// then the 30 of 60, and never a key at its limit while another is below.
func TestEvictionTakesLeastValuable(t *testing.T) {
	ctx := context.Background()
	s, _ := testStore(t, Options{Shards: 1, MaxKeys: 8})
	tight := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Hour})
	loose := testPolicy(t, sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 60, Period: time.Hour})
	s.Take(ctx, loose, "light", 1)
	s.Take(ctx, loose, "half", 30)
	for i := range 6 {
		s.Take(ctx, tight, fmt.Sprint("full-", i), 1)
	}
	// The light and half keys are the most recently used: least recent use
	// would evict a key at its limit.
	s.Peek(ctx, loose, "light")
	s.Peek(ctx, loose, "half")
	s.Take(ctx, tight, "new-0", 1)
	if d, _ := s.Peek(ctx, loose, "light"); d.Remaining != 60 {
		t.Errorf("after one new key: the key that used 1 of 60 has %d remaining, want 60 (evicted)", d.Remaining)
	}
	if d, _ := s.Peek(ctx, loose, "half"); d.Remaining != 30 {
		t.Errorf("after one new key: the key that used 30 of 60 has %d remaining, want 30 (kept)", d.Remaining)
	}
	s.Take(ctx, tight, "new-1", 1)
	if d, _ := s.Peek(ctx, loose, "half"); d.Remaining != 60 {
		t.Errorf("after two new keys: the key that used 30 of 60 has %d remaining, want 60 (evicted)", d.Remaining)
	}
	for i := range 6 {
		if d, _ := s.Peek(ctx, tight, fmt.Sprint("full-", i)); d.Allowed {
			t.Errorf("key %d at its limit was evicted while keys below their limits were left", i)
		}
	}
	if got := s.Evicted(); got != 2 {
		t.Errorf("Evicted = %d, want 2", got)
	}
}

// When the first sample holds only keys at their limit, eviction widens the
// sample before it evicts one: in a shard of 64 entries, all at their limit
// but one, a new key evicts that one, wherever the hash placed it.
func TestEvictionWidensSample(t *testing.T) {
	ctx := context.Background()
	for run := range 20 {
		s, _ := testStore(t, Options{Shards: 1, MaxKeys: 64})
		tight := testPolicy(t, sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Hour})
		for i := range 63 {
			s.Take(ctx, tight, fmt.Sprint("full-", i), 2)
		}
		s.Take(ctx, tight, "light", 1)
		s.Take(ctx, tight, "new", 2)
		if d, _ := s.Peek(ctx, tight, "light"); d.Remaining != 2 {
			t.Fatalf("run %d: the one key below its limit has %d remaining, want 2 (evicted)", run, d.Remaining)
		}
		for i := range 63 {
			if d, _ := s.Peek(ctx, tight, fmt.Sprint("full-", i)); d.Allowed {
				t.Fatalf("run %d: key %d at its limit was evicted", run, i)
			}
		}
	}
}

// Among entries worth the same, the least recently used goes.
func TestEvictionTiesByRecency(t *testing.T) {
	ctx := context.Background()
	s, _ := testStore(t, Options{Shards: 1, MaxKeys: 8})
	p := testPolicy(t, sluice.Limit{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Hour})
	for i := range 8 {
		s.Take(ctx, p, fmt.Sprint("k", i), 1)
	}
	for i := range 8 {
		if i != 5 {
			s.Peek(ctx, p, fmt.Sprint("k", i))
		}
	}
	s.Take(ctx, p, "new", 1)
	if d, _ := s.Peek(ctx, p, "k5"); d.Remaining != 10 {
		t.Errorf("the least recently used key has %d remaining, want 10 (evicted)", d.Remaining)
	}
	for i := range 8 {
		if d, _ := s.Peek(ctx, p, fmt.Sprint("k", i)); i != 5 && d.Remaining != 9 {
			t.Errorf("key %d has %d remaining, want 9 (kept)", i, d.Remaining)
		}
	}
}

// State that is as good as fresh is dropped first and not counted as
// evicted, even before the second at which the store would expire it.
func TestEvictionOfFreshStateNotCounted(t *testing.T) {
	ctx := context.Background()
	s, clk := testStore(t, Options{Shards: 1, MaxKeys: 8})
	p := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second})
	for i := range 8 {
		s.Take(ctx, p, fmt.Sprint("old-", i), 1) // fresh again 100ms later
	}
	clk.Advance(150 * time.Millisecond)
	for i := range 8 {
		s.Take(ctx, p, fmt.Sprint("new-", i), 1)
	}
	if got, n := s.Evicted(), s.Len(); got != 0 || n != 8 {
		t.Errorf("after 8 new keys replaced 8 fresh ones: Evicted = %d with %d entries, want 0 with 8", got, n)
	}
	for i := range 8 {
		if d, _ := s.Peek(ctx, p, fmt.Sprint("new-", i)); d.Remaining != 9 {
			t.Errorf("new key %d: %d remaining, want 9", i, d.Remaining)
		}
	}
}

// With half of a shard's entries at their limits, eviction keeps every one
// of them through a flood twenty times the shard's size: the wider sample,
// 64 entries drawn at random, always holds one below its limit.
func TestEvictionKeepsKeysAtLimitWhenHalfAreBelow(t *testing.T) {
	ctx := context.Background()
	s, clk := testStore(t, Options{Shards: 1, MaxKeys: 1024})
	tight := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Hour})
	loose := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Hour})
	for i := range 512 {
		s.Take(ctx, tight, fmt.Sprint("full-", i), 1)
		s.Take(ctx, loose, fmt.Sprint("light-", i), 1)
	}
	for i := range 20 * 1024 {
		clk.Advance(time.Millisecond)
		s.Take(ctx, loose, fmt.Sprint("flood-", i), 1)
	}
	lost := 0
	for i := range 512 {
		if d, _ := s.Peek(ctx, tight, fmt.Sprint("full-", i)); d.Allowed {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of 512 keys at their limit were evicted, want none", lost)
	}
}
