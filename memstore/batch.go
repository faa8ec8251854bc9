package memstore

import (
	"context"
	"slices"

	"github.com/sluicehq/sluice"
)

// maxBatch is the largest batch TakeAll decides without allocating.
const maxBatch = 16

// TakeAll decides a batch of requests atomically, as sluice.TakeAll
// describes: every shard the batch touches is locked (in ascending order, so
// that concurrent batches cannot deadlock), every request is evaluated, and
// all are charged only if all are admitted. The requests must be for
// distinct (policy, key) pairs, as sluice.CheckBatch checks. A request of
// cost 1 whose key its shard has just denied (see Take) denies the batch
// without taking any lock; the other requests' Decisions are then zero.
func (s *Store) TakeAll(_ context.Context, reqs []sluice.Request, out []sluice.Decision) (bool, error) {
	type hashed struct {
		k0, k1 uint64
		sh     *shard
	}
	var hs [maxBatch]hashed
	var order [maxBatch]uint32
	h, shards := hs[:0], order[:0]
	if len(reqs) > maxBatch {
		h, shards = make([]hashed, 0, len(reqs)), make([]uint32, 0, len(reqs))
	}
	if err := sluice.CheckBatch(reqs); err != nil {
		return false, err
	}
	for _, r := range reqs {
		k0, k1, sh := s.hash(r.Key)
		h = append(h, hashed{k0, k1, sh})
		idx := uint32((k0 >> 32) & s.mask)
		if !slices.Contains(shards, idx) {
			shards = append(shards, idx)
		}
	}
	slices.Sort(shards)
	now := s.now()
	// A request its shard's hint denies denies the batch without a lock;
	// the other requests are left undecided.
	for i, r := range reqs {
		if !h[i].sh.mayHint(r.Policy, r.N) {
			continue
		}
		if b, st, hit := h[i].sh.hint.get(r.Policy, h[i].k0, h[i].k1, now); hit {
			clear(out[:len(reqs)])
			out[i] = sluice.MakeDecision(r.Policy, b, st, now)
			return false, nil
		}
	}
	for _, i := range shards {
		s.shards[i].mu.Lock()
	}
	ok := true
	for i, r := range reqs {
		b, st := h[i].sh.decide(s, r.Policy, h[i].k0, h[i].k1, now, now, r.N, false)
		out[i] = sluice.MakeDecision(r.Policy, b, st, now)
		ok = ok && st.Allowed
		if !st.Allowed {
			h[i].sh.note(r.Policy, h[i].k0, h[i].k1, r.N, now, b, st)
		}
	}
	if ok {
		for i, r := range reqs {
			b, st := h[i].sh.decide(s, r.Policy, h[i].k0, h[i].k1, now, now, r.N, true)
			out[i] = sluice.MakeDecision(r.Policy, b, st, now)
			if h[i].sh.concerns(st) {
				h[i].sh.note(r.Policy, h[i].k0, h[i].k1, r.N, now, b, st)
			}
		}
	}
	for _, i := range shards {
		s.shards[i].mu.Unlock()
	}
	return ok, nil
}
