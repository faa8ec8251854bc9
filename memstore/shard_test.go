package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/storekit"
)

// These tests look inside the store: at the table's probe runs, at the
// recency that eviction reads, and at the memory a shard holds.

var base = time.Unix(1_700_006_400, 0)

func testStore(t *testing.T, opts Options) (*Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(base)
	opts.Clock = clk
	if opts.SweepInterval == 0 {
		opts.SweepInterval = -1
	}
	s := New(opts)
	t.Cleanup(func() { s.Close() })
	return s, clk
}

func testPolicy(t *testing.T, limits ...sluice.Limit) *sluice.Policy {
	t.Helper()
	p, err := sluice.NewPolicy(fmt.Sprintf("%s-%d", t.Name(), rand.Uint64()), limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTableMatchesMap runs random inserts, lookups and removals, with ids
// crowded into few home slots so that probe runs are long and wrap around,
// against a map.
func TestTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tab := table{slots: make([]entry, minSlots)}
	want := map[id]int64{}
	var ids []id
	for step := range 200_000 {
		switch x := rng.IntN(10); {
		case x < 4 || len(ids) == 0: // insert a new id
			// The top bits pick the home slot: four of them.
			k := id{a: uint64(rng.IntN(4))<<62 | rng.Uint64()>>40 | 1, b: rng.Uint32()}
			if _, ok := want[k]; ok {
				continue
			}
			if _, found := tab.lookup(k); found {
				t.Fatalf("step %d: lookup(%v) found an id never inserted", step, k)
			}
			tab.slots[tab.insert(k)].st.A = int64(step)
			want[k] = int64(step)
			ids = append(ids, k)
		case x < 7: // remove one
			i := rng.IntN(len(ids))
			k := ids[i]
			j, found := tab.lookup(k)
			if !found {
				t.Fatalf("step %d: lookup(%v) = not found, want found", step, k)
			}
			tab.remove(j)
			delete(want, k)
			ids[i] = ids[len(ids)-1]
			ids = ids[:len(ids)-1]
		case x < 8 && len(tab.slots) > minSlots && tab.used*8 < len(tab.slots):
			tab.resize(max(minSlots, tab.used*2))
		default: // look one up
			k := ids[rng.IntN(len(ids))]
			j, found := tab.lookup(k)
			if !found || tab.slots[j].st.A != want[k] {
				t.Fatalf("step %d: lookup(%v) = %v, %v; want the entry of step %d", step, k, found, tab.slots[j].st.A, want[k])
			}
		}
		if tab.used != len(want) {
			t.Fatalf("step %d: used = %d, want %d", step, tab.used, len(want))
		}
	}
	for k, v := range want {
		if j, found := tab.lookup(k); !found || tab.slots[j].st.A != v {
			t.Fatalf("at the end: lookup(%v) = %v; want the entry of step %d", k, found, v)
		}
	}
}

// TestDeniedDecisionRefreshesRecency checks that a key's entries count as
// recently used when a decision reads them, whether it admits or denies:
// eviction spares the recently used, and a client that is being denied is
// the one whose state matters most. Recency is the shard's access tick, so
// after the denial every entry of the key carries the shard's latest tick.
func TestDeniedDecisionRefreshesRecency(t *testing.T) {
	for _, pc := range []struct {
		name   string
		limits []sluice.Limit
	}{
		{"one_limit", []sluice.Limit{{Algorithm: sluice.GCRA, Count: 1, Period: time.Hour}}},
		{"two_limits", []sluice.Limit{{Algorithm: sluice.GCRA, Count: 1, Period: time.Hour}, {Algorithm: sluice.FixedWindow, Count: 10, Period: time.Hour}}},
		{"log_and_bucket", []sluice.Limit{{Algorithm: sluice.SlidingLog, Count: 1, Period: time.Hour}, {Algorithm: sluice.GCRA, Count: 10, Period: time.Hour}}},
	} {
		t.Run(pc.name, func(t *testing.T) {
			s, clk := testStore(t, Options{Shards: 1})
			p := testPolicy(t, pc.limits...)
			ctx := context.Background()
			if d, _ := s.Take(ctx, p, "k", 1); !d.Allowed {
				t.Fatal("first request denied")
			}
			clk.Advance(10 * time.Second)
			if d, _ := s.Take(ctx, p, "k", 1); d.Allowed {
				t.Fatal("second request admitted")
			}
			k0, k1, sh := s.hash("k")
			now := sh.ticks
			for i := range p.Len() {
				k := entryID(k0, k1, storekit.Of(p).Slot(i))
				var seen uint32
				if lc := sh.logs[k]; lc != nil {
					seen = lc.seen
				} else if j, ok := sh.tab.lookup(k); ok {
					seen = sh.tab.slots[j].seen
				} else {
					t.Fatalf("limit %d: no entry", i)
				}
				if seen != now {
					t.Errorf("limit %d (%s) after a denial at tick %d: seen = tick %d, want %d", i, storekit.Of(p).Rule(i), now, seen, now)
				}
			}
		})
	}
}

// TestSweepShrinksShard fills one shard, lets most of it expire and sweeps:
// the table and the log map are rebuilt smaller, and what lives on keeps
// its state.
func TestSweepShrinksShard(t *testing.T) {
	s, clk := testStore(t, Options{Shards: 1})
	short := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second})
	long := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Hour})
	logs := testPolicy(t, sluice.Limit{Algorithm: sluice.SlidingLog, Count: 1, Period: time.Second})
	ctx := context.Background()
	for i := range 20_000 {
		s.Take(ctx, short, fmt.Sprint(i), 1)
	}
	for i := range 3000 {
		s.Take(ctx, logs, fmt.Sprint(i), 1)
	}
	for i := range 100 {
		s.Take(ctx, long, fmt.Sprint(i), 1)
	}
	sh := &s.shards[0]
	grown := len(sh.tab.slots)
	if grown < 20_100 || sh.peak != 3000 {
		t.Fatalf("after 20,100 keys and 3000 logs: %d slots and a peak of %d logs; want at least 20,100 slots and 3000", grown, sh.peak)
	}
	clk.Advance(2 * time.Second)
	for pass := 0; s.Len() > 100; pass++ {
		if pass == 1000 {
			t.Fatalf("after 1000 sweeps Len = %d, want 100", s.Len())
		}
		s.Sweep()
	}
	// One more pass shrinks the table once it holds under an eighth.
	s.Sweep()
	if got, want := len(sh.tab.slots), 200; got != want {
		t.Errorf("table of 100 live entries after sweeping: %d slots, want %d (grown to %d)", got, want, grown)
	}
	// The log map is rebuilt once it falls under a quarter of its peak
	// (maps of up to 1024 entries are left as they are).
	if sh.peak >= 3000/4 || len(sh.logs) != 0 {
		t.Errorf("log map after its 3000 entries expired: peak %d, %d entries; want a peak under 750 (rebuilt) and 0 entries", sh.peak, len(sh.logs))
	}
	for i := range 100 {
		if d, _ := s.Peek(ctx, long, fmt.Sprint(i)); d.Allowed {
			t.Fatalf("key %d of the long policy is fresh again after the shrink, want it still limited", i)
		}
	}
	for i := range 100 {
		if d, _ := s.Take(ctx, short, fmt.Sprint(i), 1); !d.Allowed {
			t.Fatalf("key %d of the short policy is limited after expiring", i)
		}
	}
	var zero algo.State
	for i := range sh.tab.slots {
		if e := &sh.tab.slots[i]; e.a != 0 && e.st == zero {
			t.Errorf("slot %d holds a zero state", i)
		}
	}
}

// TestTableSizeAtCap checks that a flood of new keys, with policies of one
// and of two limits, leaves every shard's table no larger than the size that
// holds the shard's cap at 3/4 full (plus one policy's entries of slack),
// and at most 3/4 full: at the cap an entry costs 64 bytes of table, not up
// to 128 as with tables that double.
func TestTableSizeAtCap(t *testing.T) {
	const maxKeys, shards = 10_000, 4
	s, _ := testStore(t, Options{MaxKeys: maxKeys, Shards: shards})
	one := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Hour})
	two := testPolicy(t,
		sluice.Limit{Algorithm: sluice.TokenBucket, Count: 1, Period: time.Hour},
		sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Hour})
	ctx := context.Background()
	for i := range 4 * maxKeys {
		p := one
		if i%3 == 0 {
			p = two
		}
		if _, err := s.Take(ctx, p, fmt.Sprint("flood-", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	per := maxKeys / shards
	limit := (4*(per+sluice.MaxLimits) + 2) / 3
	slots := 0
	for i := range s.shards {
		tab := &s.shards[i].tab
		if n := len(tab.slots); n > limit || tab.used*4 > n*3 || tab.used > per+sluice.MaxLimits {
			t.Errorf("shard %d: %d entries in %d slots; want at most %d entries in at most %d slots, at most 3/4 full", i, tab.used, n, per+sluice.MaxLimits, limit)
		}
		slots += len(tab.slots)
	}
	if got := float64(slots*int(unsafe.Sizeof(entry{}))) / float64(s.Len()); got > 65 {
		t.Errorf("%.1f bytes of table per entry at the cap, want at most 65", got)
	}
}

// TestTableGrowth checks the sizes a table grows through: half as large
// again each time, stopping once at its limit, and beyond it only if it
// must.
func TestTableGrowth(t *testing.T) {
	tab := table{slots: make([]entry, minSlots), limit: 50}
	var sizes []int
	for k := uint64(1); len(sizes) < 6; k++ {
		n := len(tab.slots)
		tab.insert(id{a: k*0x9e3779b97f4a7c15 | 1, b: uint32(k)})
		if len(tab.slots) != n {
			sizes = append(sizes, len(tab.slots))
		}
	}
	if want := []int{24, 36, 50, 75, 112, 168}; !slices.Equal(sizes, want) {
		t.Errorf("sizes = %v, want %v", sizes, want)
	}
	if tab.used*4 > len(tab.slots)*3 {
		t.Errorf("%d entries in %d slots, more than 3/4 full", tab.used, len(tab.slots))
	}
}

// TestEvicted checks that Evicted counts the entries evicted while their
// state was live, in the table and among sliding_log state, and not the
// expired entries that make room once time has passed.
func TestEvicted(t *testing.T) {
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			s, clk := testStore(t, Options{MaxKeys: 64, Shards: 1})
			if got := s.MaxKeys(); got != 64 {
				t.Fatalf("MaxKeys = %d, want 64", got)
			}
			p := testPolicy(t, sluice.Limit{Algorithm: alg, Count: 1, Period: time.Hour})
			ctx := context.Background()
			take := func(prefix string, n int) {
				t.Helper()
				for i := range n {
					if d, err := s.Take(ctx, p, fmt.Sprint(prefix, i), 1); err != nil || !d.Allowed {
						t.Fatalf("Take %s%d: %+v, %v", prefix, i, d, err)
					}
				}
			}
			take("a", 64)
			if got := s.Evicted(); got != 0 {
				t.Fatalf("after filling the store: Evicted = %d, want 0", got)
			}
			take("b", 36)
			if got, n := s.Evicted(), s.Len(); got != 36 || n != 64 {
				t.Fatalf("after 36 keys past the cap: Evicted = %d with %d entries, want 36 with 64", got, n)
			}
			// Every entry is fresh again: making room forgets nothing
			// that matters. (Eight new keys at a time: an eviction
			// samples eight entries, so each sample holds an expired
			// one, and must pick it.)
			for round := range 10 {
				clk.Advance(2 * time.Hour)
				take(fmt.Sprint("c", round, "-"), 8)
				if got := s.Evicted(); got != 36 {
					t.Fatalf("round %d, after 8 keys replacing expired ones: Evicted = %d, want still 36", round, got)
				}
			}
		})
	}
}
