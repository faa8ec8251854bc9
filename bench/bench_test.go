package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clock"
)

const (
	// numKeys is the size of the random-key workload's key space.
	numKeys = 100_000
	// hotKey is the single key of the hot workload.
	hotKey = "203.0.113.7"
	// seqLen is the length of the pre-drawn index sequence (a power of two,
	// so wrapping is a mask); 4 MiB of indices, each key drawn about ten
	// times per lap.
	seqLen = 1 << 20
)

// keys are distinct IPv4 addresses in text form, as a middleware keying by
// client address would pass them; seq is a random walk over them. Both are
// drawn once, from a fixed seed, so that every limiter sees the same keys in
// the same order and the generator's cost is not measured.
var keys, seq = func() ([]string, []uint32) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := make(map[uint32]bool, numKeys)
	keys := make([]string, 0, numKeys)
	for len(keys) < numKeys {
		a := rng.Uint32()
		if seen[a] || a>>24 == 0 || a>>24 >= 224 { // skip 0.x.x.x and multicast/reserved
			continue
		}
		seen[a] = true
		keys = append(keys, netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}).String())
	}
	seq := make([]uint32, seqLen)
	for i := range seq {
		seq[i] = uint32(rng.IntN(numKeys))
	}
	return keys, seq
}()

// BenchmarkAllow measures one decision on an existing key, for every
// contender side by side: hot is one key asked from every goroutine (the
// worst case for a lock per key or per shard); keys100k is keys drawn at
// random from 100,000 already-seen keys. Besides time and allocations it
// reports admitted/op, the fraction of decisions that admitted, to show
// which path each quota exercised, and errors/op when a limiter could not
// decide.
func BenchmarkAllow(b *testing.B) {
	for _, q := range quotas {
		for _, workload := range []string{"hot", "keys100k"} {
			for _, c := range contenders {
				name := fmt.Sprintf("quota=%s/workload=%s/limiter=%s", q.name, workload, c.name)
				b.Run(name, func(b *testing.B) { benchAllow(b, c, q, workload == "hot") })
			}
		}
	}
}

func benchAllow(b *testing.B, c contender, q quota, hot bool) {
	ctx := context.Background()
	d, err := c.new(q)
	if err != nil {
		b.Fatal(err)
	}
	defer d.close()
	// Warm up: every key of the workload exists before the clock starts,
	// so the loop measures decisions on existing keys, not insertions.
	warm := keys
	if hot {
		warm = []string{hotKey}
	}
	for _, k := range warm {
		if _, err := d.allow(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	// Collect the warm-up's garbage (and earlier runs' limiters) now, so
	// that the timed loop does not pay for it.
	runtime.GC()
	var (
		goroutine          atomic.Uint32
		admitted, failures atomic.Int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine walks the sequence from its own offset, so that
		// goroutines do not ask for the same keys in lockstep.
		i := int(goroutine.Add(1)*(seqLen/8+12345)) & (seqLen - 1)
		var ok, failed int64
		for pb.Next() {
			k := hotKey
			if !hot {
				k = keys[seq[i]]
				i = (i + 1) & (seqLen - 1)
			}
			allowed, err := d.allow(ctx, k)
			if err != nil {
				failed++
			} else if allowed {
				ok++
			}
		}
		admitted.Add(ok)
		failures.Add(failed)
	})
	b.StopTimer()
	b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
	// A limiter that gives up under contention (throttled returns an error
	// after ten failed compare-and-swaps) is not a failure of the
	// benchmark; it is reported, and counted as not admitted.
	if n := failures.Load(); n > 0 {
		b.ReportMetric(float64(n)/float64(b.N), "errors/op")
	}
}

// BenchmarkMemory measures the heap that each contender keeps for 100,000
// keys: the live heap after a full GC, before and after deciding once for
// each new key, divided by the number of keys and reported as B/key. The
// key strings exist before the first reading, so a store that keeps the
// caller's string counts its 16-byte header but not the key's bytes; a
// store that builds its own copy of the key (ulule prefixes it) counts the
// copy. ns/key and allocs/key are the cost of inserting a new key; ns/op is
// the time to build the limiter and insert all the keys once.
func BenchmarkMemory(b *testing.B) {
	q := quotas[0]
	for _, c := range contenders {
		b.Run("limiter="+c.name, func(b *testing.B) {
			ctx := context.Background()
			var bytes, allocs, ns float64
			for range b.N {
				b.StopTimer()
				var before, after runtime.MemStats
				settle()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				start := time.Now()
				d, err := c.new(q)
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range keys {
					if _, err := d.allow(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
				ns += float64(time.Since(start))
				b.StopTimer()
				runtime.ReadMemStats(&after)
				allocs += float64(after.Mallocs - before.Mallocs)
				settle()
				runtime.ReadMemStats(&after)
				bytes += float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
				if s, ok := d.(*sluiceDecider); ok {
					// Sluice forgets idle keys; make sure none was
					// forgotten before the reading.
					if n := s.store.Len(); n != numKeys {
						b.Fatalf("store holds %d keys after the reading, want %d", n, numKeys)
					}
				}
				runtime.KeepAlive(d)
				d.close()
				b.StartTimer()
			}
			per := float64(b.N) * numKeys
			b.ReportMetric(bytes/per, "B/key")
			b.ReportMetric(allocs/per, "allocs/key")
			b.ReportMetric(ns/per, "ns/key")
		})
	}
}

// settle collects garbage until the live heap stops shrinking: objects with
// finalizers (ulule's cache has one) are freed only by the cycle after the
// one that finds them unreachable.
func settle() {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	for range 5 {
		last := m.HeapAlloc
		runtime.GC()
		runtime.ReadMemStats(&m)
		if m.HeapAlloc >= last {
			return
		}
	}
}

var sinkTime time.Time
var sinkNano int64

// BenchmarkTimeNow measures time.Now on this machine: most peers read it
// once or more per decision, so it puts a floor under their ns/op. It runs
// in parallel like the decisions, so that a clock source whose reads
// contend shows it.
func BenchmarkTimeNow(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var t time.Time
		for pb.Next() {
			t = time.Now()
		}
		sinkTime = t
	})
}

// BenchmarkCoarseClock measures a read of Sluice's default clock, the
// coarse clock memstore uses instead of time.Now.
func BenchmarkCoarseClock(b *testing.B) {
	c := clock.Default()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var t int64
		for pb.Next() {
			t = c.UnixNano()
		}
		atomic.StoreInt64(&sinkNano, t)
	})
}
