package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestFloodKeepsDeniedClients holds the promise that a denied client keeps
// its state through a flood of new keys, for every algorithm and at several
// flood rates: 100 clients at their limit of 5 per hour sit idle, 100 more
// retry every 20 seconds and are denied, while 20,000 random keys of one
// request each (ten times the store's cap of 2,000) pour in. Afterwards
// every one of the 200 clients must still be denied. A store that evicts
// the least recently used entries fails: the flood keys are always more
// recent than an idle client.
func TestFloodKeepsDeniedClients(t *testing.T) {
	const (
		maxKeys = 2000
		flood   = 10 * maxKeys
		clients = 100
		retry   = 20 * time.Second
	)
	for _, alg := range algorithms {
		for _, rate := range []int{100, 500, 100_000} { // flood keys per second
			t.Run(fmt.Sprintf("%s/%d_per_second", alg, rate), func(t *testing.T) {
				t.Parallel()
				s, clk := newStore(t, memstore.Options{MaxKeys: maxKeys, Shards: 4})
				l := newLimiter(t, s, lim(alg, 5, time.Hour))
				ctx := context.Background()
				idle := func(i int) string { return "idle-" + strconv.Itoa(i) }
				busy := func(i int) string { return "retrying-" + strconv.Itoa(i) }
				for i := range clients {
					for _, k := range []string{idle(i), busy(i)} {
						if d, _ := l.AllowN(ctx, k, 5); !d.Allowed {
							t.Fatalf("%s: the first 5 denied", k)
						}
						if allow(t, l, k).Allowed {
							t.Fatalf("%s: a 6th request within the hour admitted", k)
						}
					}
				}
				rng := rand.New(rand.NewPCG(uint64(rate), uint64(alg)))
				step := time.Second / time.Duration(rate)
				next := clk.Now().Add(retry)
				for range flood {
					clk.Advance(step)
					allow(t, l, strconv.FormatUint(rng.Uint64(), 16))
					if clk.Now().Before(next) {
						continue
					}
					next = next.Add(retry)
					for i := range clients {
						if d := allow(t, l, busy(i)); d.Allowed {
							t.Fatalf("after %v of flood: retrying client %d admitted, want denied", clk.Now().Sub(epoch), i)
						}
					}
				}
				lost := 0
				for i := range clients {
					for _, k := range []string{idle(i), busy(i)} {
						if d, _ := l.Peek(ctx, k); d.Allowed {
							lost++
						}
					}
				}
				t.Logf("flood of %d keys at %d a second (%v): %d of %d denied clients lost their state; %d entries evicted",
					flood, rate, clk.Now().Sub(epoch), lost, 2*clients, s.Evicted())
				if lost > 0 {
					t.Errorf("%d of %d denied clients are admitted again after the flood, want none", lost, 2*clients)
				}
				if s.Evicted() == 0 {
					t.Error("the flood evicted nothing: the test does not exercise eviction")
				}
			})
		}
	}
}

// BenchmarkEvict measures what a new key costs once its shard is full, so
// that every insert evicts: among entries that are fresh again (free to
// drop), among flood keys of one request of 10, and among keys that are all
// at their limit (the worst case, where an eviction widens its sample).
func BenchmarkEvict(b *testing.B) {
	keys := make([]string, 1<<18)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%016x", rand.Uint64())
	}
	for _, c := range []struct {
		name  string
		count int64
		age   time.Duration // how long after filling the inserts start
	}{
		{"fresh", 10, 2 * time.Hour},
		{"flood", 10, 0},
		{"at_limit", 1, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, clk := newStore(b, memstore.Options{MaxKeys: 1 << 14, Shards: 4})
			l := newLimiter(b, s, lim(sluice.GCRA, c.count, time.Hour))
			ctx := context.Background()
			for _, k := range keys[:1<<14] {
				l.Allow(ctx, k)
			}
			clk.Advance(c.age)
			b.ReportAllocs()
			i := 1 << 14
			for b.Loop() {
				l.Allow(ctx, keys[i%len(keys)])
				i++
			}
		})
	}
}
