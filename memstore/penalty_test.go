package memstore_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A flood of new keys (ten times the store's cap) cannot lift a block: the
// penalty records of blocked clients are worth keeping as much as a key at
// its limit. (Valued at nothing, as a record of no definition once was,
// they went first and every client was unblocked.)
func TestFloodKeepsBlocks(t *testing.T) {
	const (
		maxKeys = 2000
		clients = 100
	)
	s, clk := newStore(t, memstore.Options{MaxKeys: maxKeys, Shards: 4})
	p, err := sluice.NewPolicy("flood-penalty", lim(sluice.FixedWindow, 5, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.WithPenalty(sluice.Penalty{Blocks: []time.Duration{2 * time.Hour}, Forget: time.Hour}); err != nil {
		t.Fatal(err)
	}
	l, err := sluice.NewWithPolicy(s, p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := func(i int) string { return "blocked-" + strconv.Itoa(i) }
	for i := range clients {
		l.AllowN(ctx, key(i), 5)
		if d := allow(t, l, key(i)); d.Allowed || d.RetryAfter != 2*time.Hour {
			t.Fatalf("%s: %+v, want blocked for two hours", key(i), d)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10 * maxKeys {
		clk.Advance(time.Millisecond)
		allow(t, l, strconv.FormatUint(rng.Uint64(), 16))
	}
	lifted := 0
	for i := range clients {
		// A lifted block would be replaced by a fresh one of two hours:
		// the request over the limit is a first offence again.
		if d := allow(t, l, key(i)); d.Allowed || d.RetryAfter != 2*time.Hour-20*time.Second {
			lifted++
		}
	}
	if lifted > 0 {
		t.Errorf("%d of %d blocks lifted by the flood (evicted: %d)", lifted, clients, s.Evicted())
	}
}

// A blocked key is refused by Reserve and reported by Peek, and neither
// charges it.
func TestPenaltyReserveAndPeek(t *testing.T) {
	s, clk := newStore(t, memstore.Options{})
	p, err := sluice.NewPolicy("reserve-penalty", lim(sluice.GCRA, 1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.WithPenalty(sluice.Penalty{Blocks: []time.Duration{time.Minute}, Forget: time.Hour}); err != nil {
		t.Fatal(err)
	}
	l, err := sluice.NewWithPolicy(s, p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allow(t, l, "k")
	allow(t, l, "k") // blocks k
	clk.Advance(10 * time.Second)
	d, err := s.Reserve(ctx, p, "k", 1, time.Hour)
	if err != nil || d.Allowed || d.RetryAfter != 50*time.Second || d.Delay != 0 {
		t.Fatalf("Reserve while blocked: %+v, %v; want refused for 50s", d, err)
	}
	if d, _ := l.Peek(ctx, "k"); d.Allowed || d.RetryAfter != 50*time.Second {
		t.Fatalf("Peek while blocked: %+v, want blocked for 50s", d)
	}
	clk.Advance(50 * time.Second)
	if d := allow(t, l, "k"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after the block: %+v, want allowed", d)
	}
}
