// Package accesslist holds the sets that allow and deny lists are made of:
// IPSet, a set of IPv4 and IPv6 networks, and KeySet, a set of strings
// (API keys, user IDs), with a parser for list files of one entry a line.
//
// Lookups take O(log n) (IPSet: a binary search over sorted, merged
// address ranges) or O(1) (KeySet: a map) whatever the list's size, and
// never allocate. Both are immutable once built and safe for concurrent
// use.
package accesslist

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	v6 []range6
	n  int // networks given
}

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
}

// NewKeySet returns the set of keys; duplicates are kept once.
func NewKeySet(keys []string) *KeySet {
	m := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return &KeySet{m: m}
}

// Contains reports whether k is in the set. A nil set holds nothing. It
// does not allocate.
func (s *KeySet) Contains(k string) bool {
	if s == nil {
		return false
	}
	_, ok := s.m[k]
	return ok
}

// Len returns the number of distinct keys.
func (s *KeySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.m)
}
