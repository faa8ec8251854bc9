package topk

import (
	"slices"
	"strings"
)

// summary is one Space-Saving summary (Metwally, Agrawal and El Abbadi,
// "Efficient computation of frequent and top-k elements in data streams",
// 2005) of Capacity counters over the keys of one interval: the interval's
// live part, written on the decision path. It allocates nothing once built:
// its counters, their min-heap and their hash index are arrays of fixed
// size, and a key is kept as the string given, which the callers never
// change (Go strings are immutable), not copied.
//
// Keys are told apart by a 64-bit hash (hash/maphash), so that two keys
// share a counter only if their hashes collide: with at most a few
// thousand keys alive at once, a chance below 10^-12.
//
// It is not safe for concurrent use: its Sketch locks it.
type summary struct {
	slots [Capacity]counter
	n     int32           // counters in use: slots[:n]
	heap  [Capacity]int32 // slot numbers, a min-heap by count
	pos   [Capacity]int32 // each slot's place in heap
	index [indexSize]int32
	total uint64 // keys added since the last reset: the stream's length
}

// indexSize is the size of the summary's hash index (open addressing,
// linear probing): a power of two, four times Capacity, so that probes
// are short.
const indexSize = 4 * Capacity

type counter struct {
	hash  uint64
	count uint64 // an upper bound of the key's occurrences
	err   uint64 // count-err is a lower bound
	key   string
}

// reset empties the summary.
func (s *summary) reset() {
	s.n, s.total = 0, 0
	s.index = [indexSize]int32{}
	for i := range s.slots {
		s.slots[i].key = "" // let the keys go
	}
}

// add counts one occurrence of key, whose hash is h: the key's counter goes
// up by one; a key without one takes a free counter or, with none free,
// the smallest, whose count it inherits as its error.
func (s *summary) add(h uint64, key string) {
	s.total++
	if i := s.find(h); i >= 0 {
		s.slots[i].count++
		s.down(s.pos[i])
		return
	}
	if s.n < Capacity {
		i := s.n
		s.n++
		c := &s.slots[i]
		c.hash, c.count, c.err, c.key = h, 1, 0, key
		s.heap[i], s.pos[i] = i, i
		s.insert(h, i)
		s.up(i)
		return
	}
	i := s.heap[0]
	c := &s.slots[i]
	s.remove(c.hash)
	c.hash, c.err, c.key = h, c.count, key
	c.count++
	s.insert(h, i)
	s.down(0)
}

// floor is the most a key without a counter can have occurred: the
// smallest count once every counter is in use, else 0 (every key seen has
// one).
func (s *summary) floor() uint64 {
	if s.n < Capacity {
		return 0
	}
	return s.slots[s.heap[0]].count
}

// freeze returns the summary's content, for keeping once its interval
// ends.
func (s *summary) freeze() part {
	p := part{floor: s.floor(), total: s.total, entries: make([]entry, s.n)}
	for i := range s.n {
		c := &s.slots[i]
		p.entries[i] = entry{hash: c.hash, key: c.key, count: c.count, err: c.err}
	}
	return p
}

// find returns the slot of the key whose hash is h, or -1.
func (s *summary) find(h uint64) int32 {
	for i := h & (indexSize - 1); ; i = (i + 1) & (indexSize - 1) {
		v := s.index[i]
		if v == 0 {
			return -1
		}
		if s.slots[v-1].hash == h {
			return v - 1
		}
	}
}

func (s *summary) insert(h uint64, slot int32) {
	for i := h & (indexSize - 1); ; i = (i + 1) & (indexSize - 1) {
		if s.index[i] == 0 {
			s.index[i] = slot + 1
			return
		}
	}
}

// remove takes h out of the index by backward-shift deletion (Knuth,
// TAOCP vol. 3, 6.4, algorithm R), which leaves no tombstones, so that the
// probes stay short however many keys come and go.
func (s *summary) remove(h uint64) {
	const mask = indexSize - 1
	i := h & mask
	for s.slots[s.index[i]-1].hash != h {
		i = (i + 1) & mask
	}
	for j := i; ; {
		s.index[i] = 0
		for {
			j = (j + 1) & mask
			v := s.index[j]
			if v == 0 {
				return
			}
			home := s.slots[v-1].hash & mask
			// v may move to i unless its home lies cyclically in (i, j].
			if (i <= j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
				s.index[i] = v
				i = j
				break
			}
		}
	}
}

func (s *summary) less(a, b int32) bool {
	return s.slots[s.heap[a]].count < s.slots[s.heap[b]].count
}

func (s *summary) swap(a, b int32) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.pos[s.heap[a]], s.pos[s.heap[b]] = a, b
}

func (s *summary) up(i int32) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *summary) down(i int32) {
	for {
		l := 2*i + 1
		if l >= s.n {
			return
		}
		m := l
		if r := l + 1; r < s.n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			return
		}
		s.swap(i, m)
		i = m
	}
}

// entry is one key of a part.
type entry struct {
	hash       uint64
	key        string
	count, err uint64 // count-err <= occurrences <= count
}

// part is a summary of some stretch of time, frozen: every key in entries
// occurred between count-err and count times in it, and every other key at
// most floor times.
type part struct {
	entries []entry
	floor   uint64
	total   uint64
}

// merged is the union of parts being merged, by key.
type merged struct {
	keys  map[uint64]*acc
	floor uint64 // the sum of the parts' floors
	total uint64
}

type acc struct {
	key string
	// upper sums the counts of the parts holding the key, lower their
	// lower bounds, covered their floors.
	upper, lower, covered uint64
}

func newMerged() *merged { return &merged{keys: map[uint64]*acc{}} }

func (m *merged) add(p *part) {
	m.floor += p.floor
	m.total += p.total
	for i := range p.entries {
		e := &p.entries[i]
		a := m.keys[e.hash]
		if a == nil {
			a = &acc{key: e.key}
			m.keys[e.hash] = a
		}
		a.upper += e.count
		a.lower += e.count - e.err
		a.covered += p.floor
	}
}

// bounds returns the key's bounds over every part added: a key absent
// from a part may have occurred there up to that part's floor.
func (m *merged) bounds(a *acc) (upper, lower uint64) {
	return a.upper + m.floor - a.covered, a.lower
}

// part returns the merge as one part of at most Capacity entries, the
// keys with the largest lower bounds. A key dropped had a lower bound of
// at most the total over Capacity+1 (the lower bounds of distinct keys add
// up to at most the total) and so occurred at most that plus the parts'
// floors: the new floor.
func (m *merged) part() part {
	p := part{total: m.total, entries: make([]entry, 0, len(m.keys))}
	for h, a := range m.keys {
		u, l := m.bounds(a)
		p.entries = append(p.entries, entry{hash: h, key: a.key, count: u, err: u - l})
	}
	sortEntries(p.entries, func(e *entry) uint64 { return e.count - e.err })
	var dropped uint64
	if len(p.entries) > Capacity {
		dropped = p.entries[Capacity].count - p.entries[Capacity].err
		p.entries = p.entries[:Capacity:Capacity]
	}
	p.floor = m.floor + dropped
	return p
}

// sortEntries sorts es by by, largest first, then by key.
func sortEntries(es []entry, by func(*entry) uint64) {
	slices.SortFunc(es, func(a, b entry) int {
		x, y := by(&a), by(&b)
		switch {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
}
