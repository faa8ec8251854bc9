package algo

// The bucket algorithms, TokenBucket and GCRA, share one exact model.
//
// With the rate reduced to l units per p nanoseconds, one unit is worth p
// "ticks" and a tick drains every 1/l ns. The state of a key reduces to its
// debt Δ at time now, in ticks: how far the bucket is from full. A fresh key
// has Δ = 0; debt drains at l ticks per ns; a request of cost n adds n×p and
// is admitted when the result stays within the capacity Burst×p. GCRA keeps
// Δ as a theoretical arrival time (TAT = now + Δ/l, with the sub-nanosecond
// remainder kept exactly); TokenBucket keeps the tokens left at its last
// update (Burst×p − Δ). Both therefore admit exactly the same requests.

// debt returns Δ at time now for st.
func (r *Rule) debt(st State, now int64) u128 {
	if st == (State{}) {
		return u128{}
	}
	if r.alg == GCRA {
		tat, frac := st.T, uint64(st.A)
		if tat < now {
			return u128{}
		}
		return mul(uint64(tat-now), r.l).add(wide(frac))
	}
	last, tokens, frac := st.T, uint64(st.A), uint64(st.B)
	deficit := r.capacity.sub(mul(tokens, r.p).add(wide(frac)))
	if now >= last {
		return deficit.subFloor(mul(uint64(now-last), r.l))
	}
	// The state is anchored in the future (a reservation, or a clock that
	// stepped back): the debt is larger by what drains until then.
	return deficit.add(mul(uint64(last-now), r.l))
}

// state encodes debt Δ at time now as a State of the rule's algorithm.
func (r *Rule) state(debt u128, now int64) State {
	if r.alg == GCRA {
		q, rem := r.divL.divmod(debt)
		return State{T: now + q.int64(), A: int64(rem)}
	}
	if r.capacity.less(debt) {
		// More debt than a bucket holds (reservations queued beyond an
		// empty bucket): anchor the state at the first whole nanosecond
		// at which the debt fits, where it is exactly
		// Δ − shift×l; debt() adds back what drains until then.
		shift := r.divL.divCeil(debt.sub(r.capacity))
		debt = debt.subFloor(mul(uint64(shift), r.l))
		now += shift
	}
	used, rem := r.divP.divmod(debt)
	return r.tokens(used.int64(), rem, now)
}

// tokens returns the TokenBucket state at now for a debt of used whole units
// plus rem ticks: the bucket holds Burst×p − Δ ticks.
func (r *Rule) tokens(used int64, rem uint64, now int64) State {
	if rem == 0 {
		return State{T: now, A: r.burst - used}
	}
	return State{T: now, A: r.burst - used - 1, B: int64(r.p - rem)}
}

func (r *Rule) evalBucket(st State, now, n int64) (State, Status) {
	d := r.debt(st, now)
	cost := n
	if n == 0 {
		cost = 1
	}
	room := r.capacity.sub(mul(uint64(cost), r.p)) // debt allowed before the request
	s := Status{Allowed: !room.less(d)}
	if !s.Allowed {
		s.RetryAfter = r.divL.divCeil(d.sub(room))
	} else if n > 0 {
		d = d.add(mul(uint64(n), r.p))
	}
	// One division by p serves both Remaining and the TokenBucket state.
	used, rem := r.divP.divmod(d)
	usedUnits := used.int64()
	if rem != 0 {
		usedUnits++ // a partly drained unit is not available
	}
	s.Remaining = max(r.burst-usedUnits, 0)
	s.ResetAfter = r.divL.divCeil(d)
	if !s.Allowed || n == 0 {
		return st, s
	}
	if r.alg == GCRA {
		q, frac := r.divL.divmod(d)
		return State{T: now + q.int64(), A: int64(frac)}, s
	}
	return r.tokens(used.int64(), rem, now), s
}

// Wait returns how long from now a request of cost n must wait until st
// admits it: zero if it is admitted now. It applies to bucket rules only.
func (r *Rule) Wait(st State, now, n int64) int64 {
	d := r.debt(st, now)
	room := r.capacity.sub(mul(uint64(n), r.p))
	if !room.less(d) {
		return 0
	}
	return r.divL.divCeil(d.sub(room))
}

// Refund gives n units back to a bucket state at time now, as when a
// reservation is cancelled: the debt shrinks by n units, never below zero.
func (r *Rule) Refund(st State, now, n int64) State {
	d := r.debt(st, now).subFloor(mul(uint64(n), r.p))
	if d.isZero() {
		return State{}
	}
	return r.state(d, now)
}
