package memstore

import (
	"context"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/storekit"
)

// maxBatch is the largest batch TakeAll decides without allocating.
const maxBatch = 16

var _ sluice.BatchTaker = (*Store)(nil)

// TakeAll implements sluice.BatchTaker, atomically: every shard the batch
// touches is locked (in ascending order, so that concurrent batches cannot
// deadlock), every request is evaluated, and all are charged only if all
// are admitted. A request of cost 1 whose key its shard has just denied
// (see Take) denies the batch without taking any lock; the other requests'
// Decisions are then zero.
func (s *Store) TakeAll(_ context.Context, reqs []sluice.Request, out []sluice.Decision) (bool, error) {
	type hashed struct {
		k0, k1 uint64
		sh     *shard
		p      storekit.Policy
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
	for i, r := range reqs {
		if i > 0 && r.Key == reqs[i-1].Key {
			// The rules of a request are often keyed alike (by ip, say):
			// the key is hashed once, and its shard is listed already.
			prev := h[i-1]
			h = append(h, hashed{prev.k0, prev.k1, prev.sh, storekit.Of(r.Policy)})
			continue
		}
		k0, k1, sh := s.hash(r.Key)
		h = append(h, hashed{k0, k1, sh, storekit.Of(r.Policy)})
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
			out[i] = h[i].p.Decision(b, st, now)
			return false, nil
		}
	}
	for _, i := range shards {
		s.shards[i].mu.Lock()
	}
	// Every request is evaluated once, appending one charge per limit to
	// chs; if all are admitted, each is charged what its evaluation
	// computed. No two requests share a limit's state (sluice.TakeAll
	// checked), so charging one cannot change another's evaluation.
	ok := true
	sec := s.sec(now, false)
	for i, r := range reqs {
		sh, sp := h[i].sh, h[i].p
		pen := sp.Penalty()
		if pen != nil {
			if d, blocked := sh.blocked(r.Policy, sp, h[i].k0, h[i].k1, r.N, now); blocked {
				// Evaluated all the same, so that the charges stay
				// aligned with the requests; the batch is denied.
				_, _, chs = sh.evaluate(s, sp, h[i].k0, h[i].k1, clocks{now: sec, seen: sh.tick(), ns: now}, now, r.N, true, chs)
				out[i], ok = d, false
				continue
			}
		}
		var (
			b  int
			st algo.Status
		)
		b, st, chs = sh.evaluate(s, sp, h[i].k0, h[i].k1, clocks{now: sec, seen: sh.tick(), ns: now}, now, r.N, true, chs)
		out[i] = sp.Decision(b, st, now)
		ok = ok && st.Allowed
		if !st.Allowed {
			if pen != nil {
				if d, blocked := sh.strike(s, r.Policy, sp, pen, h[i].k0, h[i].k1, r.N, now); blocked {
					out[i] = d
				}
			} else {
				sh.note(r.Policy, h[i].k0, h[i].k1, r.N, now, b, st)
			}
		}
	}
	if !ok {
		// Nothing is charged: an admitted member tells the units it has
		// now, not those it would have had after the charge.
		for i, r := range reqs {
			if out[i].Allowed {
				out[i].Remaining += r.N
			}
		}
	}
	if ok {
		from := 0
		for i, r := range reqs {
			sh, to := h[i].sh, from+r.Policy.Len()
			sh.charge(s, h[i].p, chs[from:to], clocks{now: sec, seen: sh.tick(), ns: now}, now, r.N)
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
