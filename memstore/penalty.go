package memstore

import (
	"math"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/storekit"
)

// A key's penalty record (see sluice.Penalty) lives in the shard's table as
// an entry of its own, identified by the key and the policy's PenaltySlot,
// with no definition (def 0): st.T is the block's end, st.A the last strike,
// st.B the offences in its high 32 bits and the strikes in its low 32. It
// expires, like any entry, once the penalty forgets it. A key blocked by a
// request of cost 1 is answered from the shard's deny hint, without the
// lock, until the block ends.

func packPenalty(ps storekit.PenaltyState) algo.State {
	return algo.State{T: ps.Until, A: ps.Last, B: min(ps.Offences, math.MaxInt32)<<32 | ps.Strikes&math.MaxUint32}
}

func unpackPenalty(st algo.State) storekit.PenaltyState {
	return storekit.PenaltyState{Until: st.T, Last: st.A, Offences: st.B >> 32, Strikes: st.B & math.MaxUint32}
}

// penalty returns the penalty record with id k. The caller holds sh.mu.
func (sh *shard) penalty(k id) storekit.PenaltyState {
	return unpackPenalty(sh.state(k))
}

// setPenalty writes the penalty record ps of pen with id k. The caller
// holds sh.mu.
func (sh *shard) setPenalty(s *Store, pen *sluice.Penalty, k id, ps storekit.PenaltyState, c clocks) {
	e := sh.entry(k, []id{k}, c)
	e.st, e.def, e.exp = packPenalty(ps), 0, s.sec(storekit.Expiry(pen, ps), true)
}

// blocked returns the Decision denying a request for a key blocked at time
// now, and true, if the key with hashes k0, k1 is blocked under p. A
// request of cost 1 offers the block to the hint. The caller holds sh.mu.
func (sh *shard) blocked(p *sluice.Policy, sp storekit.Policy, k0, k1 uint64, n, now int64) (sluice.Decision, bool) {
	ps := sh.penalty(entryID(k0, k1, sp.PenaltySlot()))
	retry, ok := ps.Blocked(now)
	if !ok {
		return sluice.Decision{}, false
	}
	if n == 1 {
		sh.deny(p, k0, k1, now, 0, algo.Status{RetryAfter: int64(retry), ResetAfter: int64(retry)})
	}
	return sp.Blocked(retry, now), true
}

// strike counts a denial of a request of cost n for the key with hashes
// k0, k1 under p, whose penalty is pen, at time now, and returns the
// Decision that blocks the key and true if the denial made an offence. The
// caller holds sh.mu.
func (sh *shard) strike(s *Store, p *sluice.Policy, sp storekit.Policy, pen *sluice.Penalty, k0, k1 uint64, n, now int64) (sluice.Decision, bool) {
	k := entryID(k0, k1, sp.PenaltySlot())
	ps, offence := storekit.Strike(pen, sh.penalty(k), now)
	sh.setPenalty(s, pen, k, ps, clocks{now: s.sec(now, false), seen: sh.tick(), ns: now})
	if !offence {
		return sluice.Decision{}, false
	}
	return sh.blocked(p, sp, k0, k1, n, now)
}

// takePenalized is Take for a policy with a penalty: a blocked key is
// denied without a charge, and a denial is a strike. Denials that do not
// block are not hinted, so that every one of them counts.
func (s *Store) takePenalized(p *sluice.Policy, sp storekit.Policy, pen *sluice.Penalty, key string, n int64) sluice.Decision {
	now := s.now()
	k0, k1, sh := s.hash(key)
	if sh.mayHint(p, n) {
		if i, st, ok := sh.hint.get(p, k0, k1, now); ok {
			return sp.Decision(i, st, now)
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if d, ok := sh.blocked(p, sp, k0, k1, n, now); ok {
		return d
	}
	i, st := sh.decide(s, sp, k0, k1, now, now, n, true, true)
	if st.Allowed {
		if sh.concerns(st) {
			sh.note(p, k0, k1, n, now, i, st)
		}
		return sp.Decision(i, st, now)
	}
	if d, ok := sh.strike(s, p, sp, pen, k0, k1, n, now); ok {
		return d
	}
	return sp.Decision(i, st, now)
}

// penaltyWorth is what keeping a penalty record st is worth at time ns, as
// a fraction of one (see worth): all of it while it blocks, nothing after.
func penaltyWorth(st algo.State, ns int64) int64 {
	if ns < unpackPenalty(st).Until {
		return 1
	}
	return 0
}
