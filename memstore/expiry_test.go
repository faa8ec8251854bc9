package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// bubbleClock reads time.Now, which inside a testing/synctest bubble is the
// bubble's fake time.
type bubbleClock struct{}

func (bubbleClock) Now() time.Time { return time.Now() }

// TestSweepRemovesOnlyExpired fills a store with keys that expire within
// seconds and keys that live for an hour, under every policy shape, and
// sweeps every 100ms of fake time: no sweep ever changes a decision (an
// entry goes only once its state is back to fresh), and once the short
// keys have expired, sweeps remove every one of their entries.
func TestSweepRemovesOnlyExpired(t *testing.T) {
	const keys = 200
	for _, pc := range policies {
		t.Run(pc.name, func(t *testing.T) {
			s, clk := newStore(t, memstore.Options{Shards: 4})
			short := make([]sluice.Limit, len(pc.limits))
			for i, l := range pc.limits {
				short[i] = l
				short[i].Count, short[i].Period = 2, 1500*time.Millisecond
			}
			ls, ll := newLimiter(t, s, short...), newLimiter(t, s, pc.limits...)
			clk.Advance(200 * time.Millisecond) // off the second, so expiry is not aligned
			for i := range keys {
				allow(t, ls, fmt.Sprint(i))
				allow(t, ll, fmt.Sprint(i))
				if i%2 == 0 {
					allow(t, ls, fmt.Sprint(i)) // exhausted
				}
			}
			total := 2 * keys * len(pc.limits)
			if n := s.Len(); n != total {
				t.Fatalf("Len = %d, want %d", n, total)
			}
			peekAll := func() []sluice.Decision {
				var ds []sluice.Decision
				for i := range keys {
					for _, l := range []*sluice.Limiter{ls, ll} {
						d, err := l.Peek(context.Background(), fmt.Sprint(i))
						if err != nil {
							t.Fatal(err)
						}
						ds = append(ds, d)
					}
				}
				return ds
			}
			removed := 0
			for range 40 {
				clk.Advance(100 * time.Millisecond)
				before := peekAll()
				for range 10 {
					removed += s.Sweep()
				}
				for i, d := range peekAll() {
					if d != before[i] {
						t.Fatalf("at +%v, key %d of the %s policy: Peek after sweeping = %+v, want %+v as before",
							clk.Now().Sub(epoch), i/2, []string{"short", "long"}[i%2], d, before[i])
					}
				}
			}
			for pass := 0; s.Len() > total/2; pass++ {
				if pass == 200 {
					t.Fatalf("after 200 more sweeps Len = %d, want %d", s.Len(), total/2)
				}
				removed += s.Sweep()
			}
			if removed != total/2 {
				t.Errorf("sweeps removed %d entries, want %d", removed, total/2)
			}
			for i := range keys {
				if d, _ := ll.Peek(context.Background(), fmt.Sprint(i)); d.Remaining != 9 {
					t.Fatalf("long key %d after the sweeps: Remaining %d, want 9", i, d.Remaining)
				}
			}
		})
	}
}

// TestSweepKeepsStateBeforeCreation steps the clock back to before the
// store was created (a wall clock stepped back by NTP; clock.Coarse never
// does this) and checks that a sweep still keeps live state. It fails:
// Store.sec maps every time at or before the store's creation to second 0
// (memstore.go, "if d <= 0 { return 0 }"), so an entry whose expiry falls
// there is stored with exp 0, and sweep and eviction take exp <= now as
// expired: the key is forgotten while limited and admitted again.
func TestSweepKeepsStateBeforeCreation(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s, clk := newStore(t, memstore.Options{})
			l := newLimiter(t, s, lim(alg, 1, 10*time.Second))
			clk.Advance(-time.Minute)
			if !allow(t, l, "k").Allowed {
				t.Fatal("first request denied")
			}
			s.Sweep()
			if d := allow(t, l, "k"); d.Allowed {
				t.Errorf("a second request 0s after the first, with the clock 1m before the store's creation and a Sweep between: admitted, want denied (1 per 10s)")
			}
		})
	}
}

// TestJanitor runs the janitor in a synctest bubble, where its ticker and
// the store's clock share fake time: it removes idle keys by itself, keeps
// live ones, and stops on Close.
func TestJanitor(t *testing.T) {
	for _, every := range []time.Duration{0, 100 * time.Millisecond} { // 0: the default, 1s
		t.Run(fmt.Sprintf("SweepInterval=%v", every), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := memstore.New(memstore.Options{Clock: bubbleClock{}, SweepInterval: every, Shards: 4})
				short := newLimiter(t, s, lim(sluice.GCRA, 1, time.Second))
				long := newLimiter(t, s, lim(sluice.SlidingLog, 1, time.Hour))
				for i := range 500 {
					allow(t, short, fmt.Sprint(i))
					allow(t, long, fmt.Sprint(i))
				}
				if n := s.Len(); n != 1000 {
					t.Fatalf("Len = %d, want 1000", n)
				}
				time.Sleep(3 * time.Second)
				if n := s.Len(); n != 500 {
					t.Errorf("Len 3s later = %d, want 500: the janitor removes the expired keys", n)
				}
				for i := range 500 {
					if allow(t, long, fmt.Sprint(i)).Allowed {
						t.Fatalf("long key %d lost its state to the janitor", i)
					}
				}
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				if err := s.Close(); err != nil {
					t.Errorf("second Close: %v", err)
				}
				// Stopped: nothing is swept any more, but the store
				// still answers, and Sweep still works by hand.
				for i := range 100 {
					allow(t, short, fmt.Sprint("after-", i))
				}
				time.Sleep(time.Minute)
				if n := s.Len(); n != 600 {
					t.Errorf("Len a minute after Close = %d, want 600: the janitor has stopped", n)
				}
				// A pass looks at a bounded number of slots per shard,
				// and a removal uses one look: a few passes may be
				// needed.
				removed := 0
				for range 10 {
					removed += s.Sweep()
				}
				if removed != 100 {
					t.Errorf("Sweep after Close removed %d, want 100", removed)
				}
				// synctest.Test returns only when every goroutine of the
				// bubble has exited: the janitor must be gone.
			})
		})
	}
}

// TestCloseIsIdempotent closes stores, with and without a janitor, many
// times and from many goroutines at once.
func TestCloseIsIdempotent(t *testing.T) {
	for _, every := range []time.Duration{-1, time.Millisecond} {
		s := memstore.New(memstore.Options{SweepInterval: every})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
		}
		wg.Wait()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		l := newLimiter(t, s, lim(sluice.GCRA, 1, time.Second))
		if d, err := l.Allow(context.Background(), "k"); err != nil || !d.Allowed {
			t.Errorf("Allow after Close = %v, %v; want allowed", d.Allowed, err)
		}
	}
}

// One Sweep covers a shard's whole table (up to its per-pass bound),
// however many entries it removes on the way: removing an entry shifts the
// next one into its slot, and that must not use up the pass.
func TestSweepCoversTableInOnePass(t *testing.T) {
	s, clk := newStore(t, memstore.Options{Shards: 1})
	l := newLimiter(t, s, lim(sluice.GCRA, 1, time.Second))
	for i := range 1000 {
		allow(t, l, fmt.Sprint(i))
	}
	clk.Advance(2 * time.Second)
	if removed := s.Sweep(); removed != 1000 || s.Len() != 0 {
		t.Errorf("one Sweep after every key expired: removed %d, %d left; want 1000 removed, none left", removed, s.Len())
	}
}

// countingClock reads the bubble's time and counts its reads.
type countingClock struct{ reads atomic.Int64 }

func (c *countingClock) Now() time.Time { c.reads.Add(1); return time.Now() }

// TestIdleStoreLeavesClockAlone checks that the janitor of a store holding
// nothing does not read the clock, so that the default clock's goroutine,
// which stops after a second without reads, stops on an idle server; and
// that it reads it again once there is state to expire.
func TestIdleStoreLeavesClockAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := &countingClock{}
		s := memstore.New(memstore.Options{Clock: clk, SweepInterval: 100 * time.Millisecond, Shards: 4})
		defer s.Close()
		start := clk.reads.Load() // New reads it once
		time.Sleep(time.Second)
		if n := clk.reads.Load() - start; n != 0 {
			t.Fatalf("empty store: the janitor read the clock %d times in 10 sweeps, want 0", n)
		}
		l := newLimiter(t, s, lim(sluice.GCRA, 1, time.Second))
		allow(t, l, "k")
		before := clk.reads.Load()
		time.Sleep(time.Second)
		if clk.reads.Load() == before {
			t.Fatal("a store holding a key: the janitor never read the clock, want a read per sweep until the key expires")
		}
		time.Sleep(5 * time.Second) // the key expires and is swept
		if n := s.Len(); n != 0 {
			t.Fatalf("Len = %d after the key expired, want 0", n)
		}
		before = clk.reads.Load()
		time.Sleep(time.Second)
		if n := clk.reads.Load() - before; n != 0 {
			t.Errorf("store emptied by the janitor: %d clock reads in 10 sweeps, want 0", n)
		}
	})
}
