package memstore

import (
	"math/bits"

	"github.com/sluicehq/sluice/algo"
)

// id identifies one limit's state for one key: a 96-bit keyed hash of the
// key and the limit's identity (its policy's Slot: the policy name and the
// limit's index). The store keeps no key bytes: an entry costs the same 48
// bytes whatever the key's length, holds no pointer for the garbage
// collector to scan, and a lookup never follows a pointer to compare keys.
// The hash is seeded randomly per store, so clients cannot aim for
// collisions. By accident, with one bit of the 96 fixed, two of 10^6
// entries share an id with a probability of about
// (10^6)^2/2 / 2^95 ≈ 1.3×10^-17, and two of 10^9 entries with about 10^-11.
type id struct {
	a uint64
	b uint32
}

// entryID derives the id of limit slot's state from the key's two hashes.
// The low bit of a is forced so that no id has a == 0, the empty marker.
func entryID(k0, k1 uint64, slot uint32) id {
	return id{fmix(k0^uint64(slot)*0x9e3779b97f4a7c15) | 1, uint32(fmix(k1 ^ uint64(slot)*0xc2b2ae3d27d4eb4f))}
}

// fmix is MurmurHash3's 64-bit finalizer: every input bit affects every
// output bit.
func fmix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// table is an open-addressing hash table with linear probing that holds the
// fixed-size state of one shard. Compared with a Go map it hashes a key once
// per decision, updates entries in place, and lets the janitor sweep it with
// a cursor. Deletion shifts the following entries back, so there are no
// tombstones and lookups do not slow down with churn.
//
// Its size is any number of slots, not only a power of two: an id's home
// slot is its first word scaled to the table's size. It grows by half when
// it would pass 3/4 full, and no larger than limit, the size that holds the
// shard's cap of entries at 3/4 full: a store filled to its cap, as a flood
// of new keys fills it, keeps 64 bytes per entry rather than up to twice
// that.
type table struct {
	slots []entry
	used  int
	limit int    // the size that holds the shard's most entries at 3/4 full
	rng   uint64 // xorshift state for eviction samples
}

// entry is one limit's state for one key: 48 bytes, no pointers. Its id is
// kept as two fields (a, b) rather than an id so that def fills what would
// be the id's padding.
type entry struct {
	a    uint64 // id.a; zero marks an empty slot
	b    uint32 // id.b
	def  uint32 // the definition that wrote st (storekit.Policy.Def)
	st   algo.State
	seen uint32 // the shard's access tick at the last access
	exp  uint32 // when st is fresh again, seconds since the base, rounded up
}

func (e *entry) id() id { return id{e.a, e.b} }

func (e *entry) is(k id) bool { return e.a == k.a && e.b == k.b }

const minSlots = 16

// slotsFor returns the size of a table that holds n entries at 3/4 full.
func slotsFor(n int) int { return max(minSlots, (4*n+2)/3) }

// home returns the slot at which the probe for an id whose first word is a
// starts: a scaled to the table's size, so that every size spreads ids
// evenly.
func (t *table) home(a uint64) uint64 {
	hi, _ := bits.Mul64(a, uint64(len(t.slots)))
	return hi
}

// next returns the slot after i, wrapping around at the end.
func (t *table) next(i uint64) uint64 {
	if i++; i == uint64(len(t.slots)) {
		return 0
	}
	return i
}

// lookup returns the index of the entry with id k and true, or the index of
// the empty slot where it would go and false.
func (t *table) lookup(k id) (uint64, bool) {
	for i := t.home(k.a); ; i = t.next(i) {
		e := &t.slots[i]
		if e.is(k) {
			return i, true
		}
		if e.a == 0 {
			return i, false
		}
	}
}

// insert adds an entry for an id that lookup did not find and returns its
// index. It may grow the table; the caller has made room within its cap.
func (t *table) insert(k id) uint64 {
	if (t.used+1)*4 > len(t.slots)*3 {
		t.resize(t.grown())
	}
	i, _ := t.lookup(k)
	t.used++
	t.slots[i] = entry{a: k.a, b: k.b}
	return i
}

// grown returns the size the table grows to: half as large again, but no
// larger than limit unless it is that large already.
func (t *table) grown() int {
	n := len(t.slots)
	g := n + n/2
	if n < t.limit {
		g = min(g, t.limit)
	}
	return g
}

// resize rehashes the table into n slots.
func (t *table) resize(n int) {
	old := t.slots
	t.slots = make([]entry, n)
	for i := range old {
		if old[i].a == 0 {
			continue
		}
		j := t.home(old[i].a)
		for t.slots[j].a != 0 {
			j = t.next(j)
		}
		t.slots[j] = old[i]
	}
}

// remove deletes the entry at index i, shifting back the entries that
// follow it in its probe run so that every entry stays reachable.
func (t *table) remove(i uint64) {
	t.slots[i] = entry{}
	t.used--
	for j := t.next(i); t.slots[j].a != 0; j = t.next(j) {
		home := t.home(t.slots[j].a)
		// The entry at j stays unless the hole at i lies on its probe
		// path, that is unless its home is cyclically within (i, j].
		if (i <= j && i < home && home <= j) || (i > j && (i < home || home <= j)) {
			continue
		}
		t.slots[i] = t.slots[j]
		t.slots[j] = entry{}
		i = j
	}
}

func (t *table) random() uint64 {
	t.rng ^= t.rng << 13
	t.rng ^= t.rng >> 7
	t.rng ^= t.rng << 17
	return t.rng
}
