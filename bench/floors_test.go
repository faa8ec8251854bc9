package bench

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// floors are not rate limiters. They do a strict subset of what any keyed
// limiter must do per decision, and nothing else, so that their ns/op bound
// from below what any limiter can take on the same workload on the same
// machine. A goal stated against a peer can then be read against what the
// hardware allows: if a floor alone takes more than the goal allows, the
// goal is out of reach for every design that does at least that much.
var floors = []struct {
	contender
	hotOnly bool // the floor does not read the key
}{
	{contender{"floor-table", newFloorTable}, false},
	{contender{"floor-atomic", newFloorAtomic}, true},
}

// BenchmarkFloor runs the floors on the workloads of BenchmarkAllow, with
// the same harness.
func BenchmarkFloor(b *testing.B) {
	for _, workload := range []string{"hot", "keys100k"} {
		for _, f := range floors {
			if f.hotOnly && workload != "hot" {
				continue
			}
			b.Run("workload="+workload+"/limiter="+f.name, func(b *testing.B) {
				benchAllow(b, f.contender, quotas[0], workload == "hot")
			})
		}
	}
}

// floorAtomic adds one to a single shared counter per decision, whatever the
// key: the least an exact limiter must write when it admits a request on one
// hot key (some shared word has to change, or two cores could both admit the
// last unit). It does not read the key, so it runs on the hot workload only.
type floorAtomic struct{ n atomic.Int64 }

func newFloorAtomic(quota) (decider, error) { return new(floorAtomic), nil }

func (f *floorAtomic) allow(context.Context, string) (bool, error) {
	return f.n.Add(1) > 0, nil
}

func (*floorAtomic) close() {}

// floorTable is the least a keyed store with a lock per shard does: hash the
// key once, lock one of 64 shards, find the key's slot by linear probing in
// a pre-sized open-addressing table, increment a counter in it, unlock. Its
// slots are 48 bytes, as memstore's entries, and its tables hold 4,096
// slots per shard, more than memstore's for 100,000 keys (2,053 or 3,079),
// so that it touches no less memory; it has no algorithm, clock, expiry,
// eviction, growth or decision to return.
type floorTable struct {
	seed   maphash.Seed
	shards [64]floorShard
}

type floorShard struct {
	mu    sync.Mutex
	slots []floorSlot
	_     [32]byte // one shard per cache line
}

type floorSlot struct {
	id    uint64 // the key's hash, never 0; 0 marks a free slot
	count uint64
	_     [32]byte // 48 bytes, as a memstore entry
}

const floorSlots = 4096

func newFloorTable(quota) (decider, error) {
	f := &floorTable{seed: maphash.MakeSeed()}
	for i := range f.shards {
		f.shards[i].slots = make([]floorSlot, floorSlots)
	}
	return f, nil
}

// allow admits every request; it reports false only when the key's shard is
// full, which 100,000 keys over 64 × 4,096 slots cannot make happen.
func (f *floorTable) allow(_ context.Context, key string) (bool, error) {
	h := maphash.String(f.seed, key) | 1
	sh := &f.shards[h>>58]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i, n := h, 0; n < floorSlots; i, n = i+1, n+1 {
		s := &sh.slots[i&(floorSlots-1)]
		if s.id == 0 {
			s.id = h
		}
		if s.id == h {
			s.count++
			return true, nil
		}
	}
	return false, nil
}

func (*floorTable) close() {}

// TestFloorTable checks that the floor table does what its ns/op claims to
// measure: it keeps one counter per key and admits every key of the
// workload.
func TestFloorTable(t *testing.T) {
	d, _ := newFloorTable(quotas[0])
	f := d.(*floorTable)
	for range 2 {
		for _, k := range keys {
			if ok, _ := d.allow(context.Background(), k); !ok {
				t.Fatalf("floor table refused %q", k)
			}
		}
	}
	var used, total uint64
	for i := range f.shards {
		for _, s := range f.shards[i].slots {
			if s.id != 0 {
				used++
				total += s.count
			}
		}
	}
	if used != numKeys || total != 2*numKeys {
		t.Fatalf("floor table holds %d slots counting %d, want %d and %d", used, total, numKeys, 2*numKeys)
	}
}

// BenchmarkLoadLatency measures the latency of one load from memory on this
// machine: a chase through a random cyclic order of the cache lines of a
// buffer, each load's address coming from the one before, so that no two
// loads overlap. ns/op is one load. Where the buffer outgrows the caches the
// latency jumps; a keyed store whose tables are past that point pays it at
// least once per decision on keys picked at random (Sluice's tables for
// 100,000 keys take about 9 MB).
func BenchmarkLoadLatency(b *testing.B) {
	for _, mb := range []float64{0.25, 1, 2, 4, 8, 16, 32} {
		b.Run(fmt.Sprintf("MB=%g", mb), func(b *testing.B) {
			const line = 64 / 8 // uint64s per cache line
			buf := make([]uint64, int(mb*(1<<20))/8)
			lines := len(buf) / line
			order := rand.New(rand.NewPCG(3, 4)).Perm(lines)
			for i, l := range order {
				buf[l*line] = uint64(order[(i+1)%lines] * line)
			}
			p := uint64(0)
			b.ResetTimer()
			for range b.N {
				p = buf[p]
			}
			sinkLoad = p
		})
	}
}

var sinkLoad uint64
