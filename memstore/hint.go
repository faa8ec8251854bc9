package memstore

import (
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/storekit"
)

// denyHint remembers a request of cost 1 that a shard denied: its policy
// and key, and until when the denial holds. A client hammering past its
// limit (one noisy client, a flood from one address) is then answered from
// the hint, without the shard's lock: the hint is only read, so on several
// cores its cache line stays shared instead of bouncing between them as a
// lock's does, and the client's flood costs the other keys of the shard
// nothing.
//
// A denial of cost 1 holds until its RetryAfter while time runs forward:
// only admitted requests move a key's state towards admitting more, and none
// can be admitted meanwhile. Every admission of the hinted key, and every
// Reserve, Cancel and Reset on the shard, clears the hint, so that a clock
// stepping back (Options.Clock) after admissions past the hinted time cannot
// bring a stale denial back. Answers from the hint do not refresh the key's
// recency, so eviction spares the hinted key's entries: a flood of new keys
// must not make the store forget a key that is being denied.
//
// A shard has one hint. A denial takes it when it is free (no denial held)
// or when the same key was among the shard's last few denials: a repeat
// offender displaces a key denied once, and a stream of distinct denied keys
// does not rewrite it on every request.
//
// The fields form a seqlock: the writer, holding the shard's lock, makes
// seq odd, writes, and makes it even again; a reader uses the fields only if
// seq was even and unchanged around its reads.
type denyHint struct {
	seq       atomic.Uint64
	policy    atomic.Pointer[sluice.Policy]
	k0, k1    atomic.Uint64 // the key's hashes
	until     atomic.Int64  // store time (ns) at which a request of cost 1 may be admitted
	reset     atomic.Int64  // store time (ns) at which the binding limit is fresh again
	remaining atomic.Int64
	bind      atomic.Int64 // index of the binding limit in its policy
}

// recentDenials is how many of a shard's last denials a repeat is looked
// for in.
const recentDenials = 4

// get returns the hinted denial of a request of cost 1 for the key hashed
// to k0, k1 under p at store time now, if there is one.
func (h *denyHint) get(p *sluice.Policy, k0, k1 uint64, now int64) (int, algo.Status, bool) {
	seq := h.seq.Load()
	if seq&1 != 0 || h.policy.Load() != p || h.k0.Load() != k0 || h.k1.Load() != k1 {
		return 0, algo.Status{}, false
	}
	until, reset, rem, bind := h.until.Load(), h.reset.Load(), h.remaining.Load(), h.bind.Load()
	if h.seq.Load() != seq || now >= until {
		return 0, algo.Status{}, false
	}
	return int(bind), algo.Status{Remaining: rem, RetryAfter: until - now, ResetAfter: max(reset, until) - now}, true
}

// mayHint reports whether the hint can hold a denial of a request of cost n
// under p, so that get is worth calling. It is inlined: nearly always the
// hint holds another policy's denial, or none.
func (sh *shard) mayHint(p *sluice.Policy, n int64) bool {
	return n == 1 && sh.hint.policy.Load() == p
}

// concerns reports whether a decision with status st is any of the hint's
// business (see note). It is inlined: nearly always st admits and the hint
// is empty.
func (sh *shard) concerns(st algo.Status) bool {
	return !st.Allowed || sh.hint.policy.Load() != nil
}

// note updates the hint with a decision on a request of cost n for the key
// hashed to k0, k1 under p, bound by limit bind: an admission clears a hint
// for the key, a denial of cost 1 is offered the hint. The caller holds the
// lock.
func (sh *shard) note(p *sluice.Policy, k0, k1 uint64, n, now int64, bind int, st algo.Status) {
	switch {
	case st.Allowed:
		sh.hint.forget(p, k0, k1)
	case n == 1 && st.RetryAfter > 0:
		sh.deny(p, k0, k1, now, bind, st)
	}
}

// deny offers the shard's hint to the denial st of a request of cost 1 at
// store time now, bound by limit bind of p. The caller holds the lock.
func (sh *shard) deny(p *sluice.Policy, k0, k1 uint64, now int64, bind int, st algo.Status) {
	h := &sh.hint
	take := h.policy.Load() == nil || now >= h.until.Load()
	// The recent denials are known by the key's first hash alone: a
	// coincidence only hands the hint to a key that was just denied.
	for _, r := range sh.recent {
		take = take || r == k0
	}
	if !take {
		sh.recent[sh.nextRecent%recentDenials] = k0
		sh.nextRecent++
		return
	}
	h.seq.Add(1)
	h.policy.Store(p)
	h.k0.Store(k0)
	h.k1.Store(k1)
	h.until.Store(now + st.RetryAfter)
	h.reset.Store(now + st.ResetAfter)
	h.remaining.Store(st.Remaining)
	h.bind.Store(int64(bind))
	h.seq.Add(1)
}

// forget clears the hint if it is for the key hashed to k0, k1 under p. The
// caller holds the shard's lock. It writes nothing otherwise, so that
// admissions of other keys leave the hint's cache line shared.
func (h *denyHint) forget(p *sluice.Policy, k0, k1 uint64) {
	if h.k0.Load() == k0 && h.k1.Load() == k1 && sharesState(h.policy.Load(), p) {
		h.clear()
	}
}

// sharesState reports whether policies a and b keep their state in the same
// entries: policies of the same name share every limit's identity, whatever
// their definitions.
func sharesState(a, b *sluice.Policy) bool {
	return a != nil && b != nil && (a == b || storekit.Of(a).Slot(0) == storekit.Of(b).Slot(0))
}

// clear forgets the hint. The caller holds the shard's lock.
func (h *denyHint) clear() {
	if h.policy.Load() == nil {
		return
	}
	h.seq.Add(1)
	h.policy.Store(nil)
	h.until.Store(0)
	h.seq.Add(1)
}

// spare returns keep with the ids of the hinted key's entries (and its
// penalty record) added, in buf
// when keep fits there. The caller holds the shard's lock.
func (h *denyHint) spare(keep []id, buf *[2*sluice.MaxLimits + 2]id) []id {
	p := h.policy.Load()
	if p == nil {
		return keep
	}
	out := append(buf[:0], keep...)
	k0, k1, sp := h.k0.Load(), h.k1.Load(), storekit.Of(p)
	for i := range sp.Len() {
		out = append(out, entryID(k0, k1, sp.Slot(i)))
	}
	if sp.Penalty() != nil {
		out = append(out, entryID(k0, k1, sp.PenaltySlot()))
	}
	return out
}
