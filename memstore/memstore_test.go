package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
)

// epoch is a whole number of days since the Unix epoch, so windows start
// there.
var epoch = time.Unix(1_700_006_400, 0)

func newStore(t testing.TB, opts memstore.Options) (*memstore.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	if opts.Clock == nil {
		opts.Clock = clk
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = -1
	}
	s := memstore.New(opts)
	t.Cleanup(func() { s.Close() })
	return s, clk
}

var policySeq atomic.Int64

// newLimiter returns a limiter of a policy under a name no other test uses.
func newLimiter(t testing.TB, s sluice.Store, limits ...sluice.Limit) *sluice.Limiter {
	t.Helper()
	lim, err := sluice.New(s, fmt.Sprintf("%s-%d", t.Name(), policySeq.Add(1)), limits...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func allow(t testing.TB, lim *sluice.Limiter, key string) sluice.Decision {
	t.Helper()
	d, err := lim.Allow(context.Background(), key)
	if err != nil {
		t.Fatalf("Allow(%q): %v", key, err)
	}
	return d
}

// admitted counts how many of tries requests key gets admitted.
func admitted(t testing.TB, lim *sluice.Limiter, key string, tries int) int {
	t.Helper()
	n := 0
	for range tries {
		if allow(t, lim, key).Allowed {
			n++
		}
	}
	return n
}

// floodKeys are 100,000 random keys, made once for every flood test.
var floodKeys = sync.OnceValue(func() []string {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%016x", rng.Uint64())
	}
	return keys
})

func lim(alg sluice.Algorithm, count int64, period time.Duration) sluice.Limit {
	return sluice.Limit{Algorithm: alg, Count: count, Period: period}
}

var algorithms = []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog}

// policies are the shapes of policy the memstore tests run: every
// algorithm alone, and two-limit policies that mix the table and the logs.
var policies = []struct {
	name   string
	limits []sluice.Limit
}{
	{"token_bucket", []sluice.Limit{lim(sluice.TokenBucket, 10, time.Hour)}},
	{"gcra", []sluice.Limit{lim(sluice.GCRA, 10, time.Hour)}},
	{"fixed_window", []sluice.Limit{lim(sluice.FixedWindow, 10, time.Hour)}},
	{"sliding_window", []sluice.Limit{lim(sluice.SlidingWindow, 10, time.Hour)}},
	{"sliding_log", []sluice.Limit{lim(sluice.SlidingLog, 10, time.Hour)}},
	{"gcra+fixed_window", []sluice.Limit{lim(sluice.GCRA, 10, time.Hour), lim(sluice.FixedWindow, 100, 24*time.Hour)}},
	{"gcra+sliding_log", []sluice.Limit{lim(sluice.GCRA, 10, time.Hour), lim(sluice.SlidingLog, 100, 24*time.Hour)}},
}

// TestEvictionCapsEntries floods a store capped at 1000 entries with
// 100,000 random keys: Len never exceeds the cap. The package documents an
// overshoot of at most one policy's entries per shard, when a shard holds
// nothing but the entries of the decision being made; a shard of 250 never
// does, so the cap holds exactly.
func TestEvictionCapsEntries(t *testing.T) {
	const maxKeys, shards, flood = 1000, 4, 100_000
	// Every algorithm but sliding_log keeps its state in the same table:
	// one of them stands for all.
	for _, pc := range []struct {
		name   string
		limits []sluice.Limit
	}{policies[1], policies[4], policies[5], policies[6]} {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			s, clk := newStore(t, memstore.Options{MaxKeys: maxKeys, Shards: shards})
			l := newLimiter(t, s, pc.limits...)
			most := 0
			for i, k := range floodKeys()[:flood] {
				if i%1000 == 0 {
					clk.Advance(time.Millisecond)
				}
				allow(t, l, k)
				if i%97 == 0 {
					most = max(most, s.Len())
				}
			}
			most = max(most, s.Len())
			if most > maxKeys {
				t.Errorf("Len reached %d during a flood of %d keys, want at most MaxKeys %d", most, flood, maxKeys)
			}
			// The store is full, not over-evicting: every shard is at
			// its cap, less at most one entry per limit.
			if n := s.Len(); n < maxKeys-shards*len(pc.limits) {
				t.Errorf("Len after the flood = %d, want about %d: a full store", n, maxKeys)
			}
		})
	}
}

// TestFloodCannotResetHotKey checks the promise an attacker tests: flooding
// the store with random keys must not make it forget the state of a key
// that is in active use, or the attacker resets his own limit. A hot key
// that has used up its 10 per hour asks again after every 10 flood keys; a
// reference store that is never full answers the same requests at the
// same times, and the two must agree.
//
// The store holds at most 1000 entries in 4 shards. The hot key, at its
// limit, is worth the most to keep, and the flood's keys, one request of
// 10 each, little: eviction takes the least valuable entry of a sample, so
// the hot key keeps its state at every flood rate.
func TestFloodCannotResetHotKey(t *testing.T) {
	const flood, every = 50_000, 10
	for _, pc := range []struct {
		name   string
		limits []sluice.Limit
	}{policies[1], policies[5]} {
		for _, step := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%v_per_key", pc.name, step), func(t *testing.T) {
				t.Parallel()
				s, clk := newStore(t, memstore.Options{MaxKeys: 1000, Shards: 4})
				ref := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
				defer ref.Close()
				l := newLimiter(t, s, pc.limits...)
				r, err := sluice.NewWithPolicy(ref, l.Policy())
				if err != nil {
					t.Fatal(err)
				}
				admitted(t, l, "hot", 10)
				admitted(t, r, "hot", 10)
				got, want, tries, lost := 0, 0, 0, 0
				denied := true
				for i, k := range floodKeys()[:flood] {
					clk.Advance(step)
					allow(t, l, k)
					if i%every != 0 {
						continue
					}
					tries++
					d, w := allow(t, l, "hot"), allow(t, r, "hot")
					if d.Allowed {
						got++
					}
					if w.Allowed {
						want++
					}
					if d.Allowed && !w.Allowed && denied {
						lost++ // the first admission after the state was lost
					}
					denied = !d.Allowed
				}
				t.Logf("flood of %d keys %v apart: the hot key lost its state at least %d times and was admitted %d times in %d tries (%d by a store that is never full)",
					flood, step, lost, got, tries, want)
				if got != want {
					t.Errorf("the hot key was admitted %d times during the flood, want %d: the flood reset its limit", got, want)
				}
			})
		}
	}
}

// TestEvictionPrefersIdleKeys measures what the flood tests are about: of
// 100 keys used once before a flood of 2,000 keys (twice the cap), how many
// keep their state, against a key used after every 10 flood keys
// throughout, at three flood rates. It only logs; TestFloodCannotResetHotKey
// holds the promise.
func TestEvictionPrefersIdleKeys(t *testing.T) {
	for _, step := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond} {
		s, clk := newStore(t, memstore.Options{MaxKeys: 1000, Shards: 4})
		l := newLimiter(t, s, lim(sluice.GCRA, 1, time.Hour))
		for i := range 100 {
			allow(t, l, fmt.Sprint("idle-", i))
		}
		allow(t, l, "hot")
		resets := 0
		for i, k := range floodKeys()[:2000] {
			clk.Advance(step)
			allow(t, l, k)
			if i%10 == 0 && allow(t, l, "hot").Allowed {
				resets++ // 1 per hour: every admission is a lost state
			}
		}
		kept := 0
		for i := range 100 {
			d, err := l.Peek(context.Background(), fmt.Sprint("idle-", i))
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				kept++
			}
		}
		t.Logf("2000 flood keys %v apart: %d of 100 idle keys kept their state; the hot key lost its state %d times in 200 tries", step, kept, resets)
	}
}
