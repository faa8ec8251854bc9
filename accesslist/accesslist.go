// Package accesslist holds the sets that allow and deny lists are made of:
// IPSet, a set of IPv4 and IPv6 networks, and KeySet, a set of strings
// (API keys, user IDs), with a parser for list files of one entry a line.
//
// Lookups take O(log n) (IPSet: a binary search over sorted, merged
// address ranges) or O(1) (KeySet: a map, behind a Bloom filter for large
// sets that rules out most absent keys in one cache line) whatever the
// list's size, and never allocate. Both are immutable once built and safe for concurrent
// use.
package accesslist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"net/netip"
	"slices"
)

// ErrEmpty is returned for a list with no entries: an empty allow or deny
// list is almost always a mistake (a truncated file, a wrong path).
var ErrEmpty = errors.New("accesslist: the list has no entries")

// IPSet is a set of IPv4 and IPv6 networks. IPv4-mapped IPv6 networks
// (::ffff:192.0.2.0/120) and addresses count as IPv4; ::/0 holds every
// IPv6 address and no IPv4 one, as 0.0.0.0/0 holds every IPv4 address.
type IPSet struct {
	v4 []range4 // sorted by lo, disjoint and not adjacent
	// v4top is the lo of every v4Block-th range of v4, for large sets: a
	// lookup searches it (small enough to stay in the cache) and then one
	// block of v4 (a cache line), where a binary search over all of v4
	// would miss the cache at most of its steps.
	v4top []uint32
	v6    []range6
	n     int // networks given
}

// v4Block is how many IPv4 ranges (8 bytes each) a cache line holds.
const v4Block = 8

type range4 struct{ lo, hi uint32 }

type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

func (a u128) inc() (u128, bool) {
	if a.lo != ^uint64(0) {
		return u128{a.hi, a.lo + 1}, true
	}
	if a.hi != ^uint64(0) {
		return u128{a.hi + 1, 0}, true
	}
	return a, false
}

type range6 struct{ lo, hi u128 }

// NewIPSet returns the set of the given networks, which may overlap and
// be in any order. Bits of an address beyond its prefix length are
// ignored (10.1.2.3/8 is 10.0.0.0/8).
func NewIPSet(prefixes []netip.Prefix) (*IPSet, error) {
	s := &IPSet{n: len(prefixes)}
	for _, p := range prefixes {
		if !p.IsValid() {
			return nil, fmt.Errorf("accesslist: invalid network %v", p)
		}
		p = unmap(p).Masked()
		a := p.Addr().WithZone("")
		if a.Is4() {
			b := a.As4()
			lo := binary.BigEndian.Uint32(b[:])
			hi := lo | uint32(uint64(1)<<(32-p.Bits())-1)
			s.v4 = append(s.v4, range4{lo, hi})
			continue
		}
		lo := to128(a)
		hi := lo
		if host := 128 - p.Bits(); host >= 64 {
			hi.lo = ^uint64(0)
			if host == 128 {
				hi.hi = ^uint64(0)
			} else {
				hi.hi |= uint64(1)<<(host-64) - 1
			}
		} else if host > 0 {
			hi.lo |= uint64(1)<<host - 1
		}
		s.v6 = append(s.v6, range6{lo, hi})
	}
	s.v4 = merge4(s.v4)
	s.v6 = merge6(s.v6)
	if len(s.v4) > 8*v4Block {
		s.v4top = make([]uint32, 0, (len(s.v4)+v4Block-1)/v4Block)
		for i := 0; i < len(s.v4); i += v4Block {
			s.v4top = append(s.v4top, s.v4[i].lo)
		}
	}
	return s, nil
}

// unmap turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96).
func unmap(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

func to128(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func merge4(rs []range4) []range4 {
	slices.SortFunc(rs, func(a, b range4) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && (out[n-1].hi == ^uint32(0) || r.lo <= out[n-1].hi+1) {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return slices.Clip(out)
}

func merge6(rs []range6) []range6 {
	slices.SortFunc(rs, func(a, b range6) int {
		switch {
		case a.lo.less(b.lo):
			return -1
		case b.lo.less(a.lo):
			return 1
		}
		return 0
	})
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 {
			next, ok := out[n-1].hi.inc()
			if !ok || !next.less(r.lo) { // overlapping or adjacent
				if out[n-1].hi.less(r.hi) {
					out[n-1].hi = r.hi
				}
				continue
			}
		}
		out = append(out, r)
	}
	return slices.Clip(out)
}

// Contains reports whether a is in one of the set's networks. A nil set
// holds nothing. It does not allocate.
func (s *IPSet) Contains(a netip.Addr) bool {
	if s == nil || !a.IsValid() {
		return false
	}
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		x := binary.BigEndian.Uint32(b[:])
		rs := s.v4
		if top := s.v4top; top != nil {
			// The last block starting at or below x holds the candidate.
			i, j := 0, len(top)
			for i < j {
				h := int(uint(i+j) >> 1)
				if top[h] <= x {
					i = h + 1
				} else {
					j = h
				}
			}
			if i == 0 {
				return false
			}
			rs = rs[(i-1)*v4Block : min(i*v4Block, len(rs))]
		}
		// The last range starting at or below x is the only candidate.
		i, j := 0, len(rs)
		for i < j {
			h := int(uint(i+j) >> 1)
			if rs[h].lo <= x {
				i = h + 1
			} else {
				j = h
			}
		}
		return i > 0 && x <= rs[i-1].hi
	}
	x := to128(a)
	rs := s.v6
	i, j := 0, len(rs)
	for i < j {
		h := int(uint(i+j) >> 1)
		if !x.less(rs[h].lo) {
			i = h + 1
		} else {
			j = h
		}
	}
	return i > 0 && !rs[i-1].hi.less(x)
}

// Len returns the number of networks the set was built from (before
// overlapping ones were merged).
func (s *IPSet) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Ranges returns the number of disjoint address ranges the set holds
// after merging, the size its lookups search.
func (s *IPSet) Ranges() int {
	if s == nil {
		return 0
	}
	return len(s.v4) + len(s.v6)
}

// KeySet is a set of strings, compared exactly (case-sensitively).
type KeySet struct {
	m map[string]struct{}
	// absent, for large sets, answers most lookups of keys not in the set
	// from one cache line, where the map would miss the cache: requests
	// from clients on no list are the common case.
	absent *bloom
}

// bloomMin is the smallest set that gets a filter: smaller maps stay in
// the cache.
const bloomMin = 4096

// NewKeySet returns the set of keys; duplicates are kept once.
func NewKeySet(keys []string) *KeySet {
	m := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	s := &KeySet{m: m}
	if len(m) >= bloomMin {
		s.absent = newBloom(len(m))
		for k := range m {
			s.absent.add(k)
		}
	}
	return s
}

// Contains reports whether k is in the set. A nil set holds nothing. It
// does not allocate.
func (s *KeySet) Contains(k string) bool {
	if s == nil {
		return false
	}
	if s.absent != nil && !s.absent.mayContain(k) {
		return false
	}
	_, ok := s.m[k]
	return ok
}

// bloom is a blocked Bloom filter: each key sets bloomBits bits within one
// 512-bit block (a cache line), about 10 bits per key, so that a key not
// added is told apart in one cache line about 99 times in 100. It never
// says no to a key that was added.
type bloom struct {
	seed   maphash.Seed
	blocks [][8]uint64
}

const bloomBits = 6

func newBloom(n int) *bloom {
	nb := max((n*10+511)/512, 1)
	return &bloom{seed: maphash.MakeSeed(), blocks: make([][8]uint64, nb)}
}

// locate returns k's block and the hash whose bits choose its bits.
func (b *bloom) locate(k string) (*[8]uint64, uint64) {
	h := maphash.String(b.seed, k)
	blk := &b.blocks[(h>>32)*uint64(len(b.blocks))>>32]
	return blk, h * 0x9e3779b97f4a7c15 // mix the bits the block did not use
}

func (b *bloom) add(k string) {
	blk, h := b.locate(k)
	for i := range bloomBits {
		bit := h >> (9 * i) & 511
		blk[bit>>6] |= 1 << (bit & 63)
	}
}

func (b *bloom) mayContain(k string) bool {
	blk, h := b.locate(k)
	for i := range bloomBits {
		bit := h >> (9 * i) & 511
		if blk[bit>>6]&(1<<(bit&63)) == 0 {
			return false
		}
	}
	return true
}

// Len returns the number of distinct keys.
func (s *KeySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.m)
}
