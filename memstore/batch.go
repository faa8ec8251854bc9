package memstore

import (
	"context"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
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
	var (
		hs    [maxBatch]hashed
		order [maxBatch]uint32
		cbuf  [maxBatch]charge
	)
	h, shards, chs := hs[:0], order[:0], cbuf[:0]
	if len(reqs) > maxBatch {
		h, shards = make([]hashed, 0, len(reqs)), make([]uint32, 0, len(reqs))
	}
	if err := sluice.CheckBatch(reqs, out); err != nil {
		return false, err
	}
	for _, r := range reqs {
		k0, k1, sh := s.hash(r.Key)
		h = append(h, hashed{k0, k1, sh})
		idx := uint32(s.shardOf(k0))
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
	// Every request is evaluated once, appending one charge per limit to
	// chs; if all are admitted, each is charged what its evaluation
	// computed. No two requests share a limit's state (CheckBatch), so
	// charging one cannot change another's evaluation.
	ok := true
	sec := s.sec(now, false)
	for i, r := range reqs {
		sh := h[i].sh
		if r.Policy.PenaltyRef() != nil {
			if d, blocked := sh.blocked(r.Policy, h[i].k0, h[i].k1, r.N, now); blocked {
				// Evaluated all the same, so that the charges stay
				// aligned with the requests; the batch is denied.
				_, _, chs = sh.evaluate(s, r.Policy, h[i].k0, h[i].k1, clocks{now: sec, seen: sh.tick(), ns: now}, now, r.N, true, chs)
				out[i], ok = d, false
				continue
			}
		}
		var (
			b  int
			st algo.Status
		)
		b, st, chs = sh.evaluate(s, r.Policy, h[i].k0, h[i].k1, clocks{now: sec, seen: sh.tick(), ns: now}, now, r.N, true, chs)
		out[i] = sluice.MakeDecision(r.Policy, b, st, now)
		ok = ok && st.Allowed
		if !st.Allowed {
			if pen := r.Policy.PenaltyRef(); pen != nil {
				if d, blocked := sh.strike(s, r.Policy, pen, h[i].k0, h[i].k1, r.N, now); blocked {
					out[i] = d
				}
			} else {
				sh.note(r.Policy, h[i].k0, h[i].k1, r.N, now, b, st)
			}
		}
	}
	if ok {
		from := 0
		for i, r := range reqs {
			sh, to := h[i].sh, from+r.Policy.Len()
			sh.charge(s, r.Policy, chs[from:to], clocks{now: sec, seen: sh.tick(), ns: now}, now, r.N)
			from = to
			if admitted := (algo.Status{Allowed: true}); sh.concerns(admitted) {
				sh.note(r.Policy, h[i].k0, h[i].k1, r.N, now, 0, admitted) // clears a hint for the key
			}
		}
	}
	for _, i := range shards {
		s.shards[i].mu.Unlock()
	}
	return ok, nil
}
