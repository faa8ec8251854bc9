package redisstore

import (
	"hash/maphash"
	"sync"
)

// denyCache remembers keys that Redis has just denied, until the time Redis
// said they may retry, so that a client hammering past its limit is answered
// locally instead of costing Redis a call per request: the trick that keeps
// Redis alive during an attack. It only ever denies, and only a request at
// least as costly as the one Redis denied before the retry time Redis gave,
// so it never admits a request that Redis would reject. It can deny a
// request that Redis would have admitted only if another process resets the
// key or cancels a reservation in the meantime.
//
// It is direct-mapped and lossy: a fixed array of slots, each holding the
// last denial that hashed to it. Memory is fixed at creation, whatever the
// number of keys an attacker invents.
type denyCache struct {
	slots []denySlot
	mask  uint64
	seed  maphash.Seed
}

type denySlot struct {
	mu   sync.Mutex
	id   [2]uint64
	cost int64
	denial
}

// denial is what the cache remembers of a denied decision. Times are the
// local monotonic clock's, in ns.
type denial struct {
	until int64 // when a request of the same cost may be admitted
	reset int64 // when the binding limit is full again
	limit int64 // the binding limit's Count
	index int   // the binding limit's position in its policy
}

func newDenyCache(size int) *denyCache {
	n := 1
	for n < size {
		n <<= 1
	}
	return &denyCache{slots: make([]denySlot, n), mask: uint64(n - 1), seed: maphash.MakeSeed()}
}

// id hashes a policy (by its limit slots) and a key.
func (c *denyCache) id(slots []uint32, key string) [2]uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	for _, s := range slots {
		h.WriteByte(byte(s))
		h.WriteByte(byte(s >> 8))
		h.WriteByte(byte(s >> 16))
		h.WriteByte(byte(s >> 24))
	}
	h.WriteString(key)
	a := h.Sum64()
	h.WriteByte(0xff)
	return [2]uint64{a, h.Sum64()}
}

// get returns the cached denial for id at time now, if a request of cost n
// is still sure to be denied.
func (c *denyCache) get(id [2]uint64, now, n int64) (denial, bool) {
	s := &c.slots[id[0]&c.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != id || now >= s.until || n < s.cost {
		return denial{}, false
	}
	return s.denial, true
}

func (c *denyCache) put(id [2]uint64, cost int64, d denial) {
	s := &c.slots[id[0]&c.mask]
	s.mu.Lock()
	s.id, s.cost, s.denial = id, cost, d
	s.mu.Unlock()
}

func (c *denyCache) forget(id [2]uint64) {
	s := &c.slots[id[0]&c.mask]
	s.mu.Lock()
	if s.id == id {
		s.until = 0
	}
	s.mu.Unlock()
}
