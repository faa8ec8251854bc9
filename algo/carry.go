package algo

// Carrying state from one rule to another.
//
// A store keeps a limit's state under the limit's identity (policy name and
// index) and records the definition that wrote it. When the definition
// changes (a reload raises a limit, or changes its algorithm or period), a
// decision first carries the state to the new rule at the decision's time:
//
//  1. The usage U is the units the state holds against the old rule at now,
//     a partly used unit counting as used (see Used and LogUsed).
//  2. It is capped at the new rule's Capacity: a client who used more than
//     the new limit is treated as having used all of it.
//  3. The new rule's state holds U at now: a bucket in debt of U units, a
//     fixed window counting U in the window containing now, a sliding
//     window with U in its current window, a log with one entry of U at now.
//
// Three cases keep more than U, exactly: a bucket rule to a bucket rule with
// the same Count and Period (only Burst or the bucket algorithm changed)
// keeps its debt, capped at the new capacity; a sliding window to a sliding
// window of the same Period keeps both counts, each capped at the new Count;
// a log to a log of the same Period keeps its entries. Carrying to an equal
// rule changes nothing.
//
// So raising a limit lets a denied client through at once (its usage stays,
// the room grows); lowering it makes a client over the new limit wait until
// the new limit frees room, never longer; and no change gives a client a
// fresh quota, except for usage the old state no longer holds.

// Equal reports whether r and o have the same definition: algorithm, Count,
// Period and Burst, and the same calendar.
func (r *Rule) Equal(o *Rule) bool {
	return r.alg == o.alg && r.count == o.count && r.period == o.period && r.burst == o.burst && r.sameWindows(o)
}

// Used returns the units st holds against r at time now, a partly used unit
// counting as used: for bucket rules the debt in whole units rounded up
// (which can exceed Burst when reservations are queued), for FixedWindow
// the count of the window if it is still current, for SlidingWindow the
// weighted estimate rounded up. A state that is equivalent to a fresh key's
// at now has a usage of zero, and only such a state. Used must not be
// called for SlidingLog rules: see LogUsed.
func (r *Rule) Used(st State, now int64) int64 {
	if st == (State{}) {
		return 0
	}
	switch r.alg {
	case TokenBucket, GCRA:
		return r.divP.divCeil(r.debt(st, now))
	case FixedWindow:
		if start, _ := r.span(st.T, now); st.T >= start {
			return st.A
		}
		return 0
	case SlidingWindow:
		start, end, prev, cur := r.slidingCounts(st, now)
		p := uint64(end - start)
		e := uint64(max(now-start, 0))
		x := mul(uint64(prev), p-e).add(mul(uint64(cur), p))
		if r.cal == nil {
			return r.divPeriod.divCeil(x)
		}
		q, rem := x.divmod(p)
		if rem != 0 {
			return q.int64() + 1
		}
		return q.int64()
	}
	return 0
}

// slidingCounts returns the window [start, end) and the previous and
// current counts of a SlidingWindow state at now, rolling the window over.
func (r *Rule) slidingCounts(st State, now int64) (start, end, prev, cur int64) {
	start, end = r.span(st.T, now)
	switch {
	case st.T >= start: // the same window, or a clock that stepped back
		if st.T != start {
			end = r.endOf(st.T)
		}
		return st.T, end, st.A, st.B
	case st.T != 0 && st.T == r.prevOf(start):
		return start, end, st.B, 0
	}
	return start, end, 0, 0
}

// LogUsed returns the units lg holds against the SlidingLog rule r at time
// now: the total cost of the entries that still count (at > now − Period).
func (r *Rule) LogUsed(lg *Log, now int64) int64 {
	sum := lg.sum
	for i := 0; i < lg.size && lg.at(i).at <= now-r.period; i++ {
		sum -= lg.at(i).n
	}
	return sum
}

// Carry returns st, the state of a key written under rule from, carried to
// r at time now (see the top of this file). Neither rule may be SlidingLog:
// see CarryFromLog, CarryToLog and CarryLog; for such a call Carry returns
// the zero State.
func (r *Rule) Carry(from *Rule, st State, now int64) State {
	if r.alg == SlidingLog || from.alg == SlidingLog {
		return State{}
	}
	if r.Equal(from) {
		return st
	}
	switch {
	case r.alg.IsBucket() && from.alg.IsBucket() && r.count == from.count && r.period == from.period:
		d := from.debt(st, now)
		if r.capacity.less(d) {
			d = r.capacity
		}
		if d.isZero() {
			return State{}
		}
		return r.state(d, now)
	case r.alg == SlidingWindow && from.alg == SlidingWindow && r.sameWindows(from):
		if st == (State{}) {
			return st
		}
		return State{T: st.T, A: min(st.A, r.count), B: min(st.B, r.count)}
	}
	return r.holding(from.Used(st, now), now)
}

// holding returns the state of r that holds u units at now, u capped at the
// rule's Capacity: step 3 of carrying.
func (r *Rule) holding(u, now int64) State {
	u = min(u, r.burst)
	if u <= 0 {
		return State{}
	}
	switch r.alg {
	case TokenBucket, GCRA:
		return r.state(mul(uint64(u), r.p), now)
	case FixedWindow:
		start, _ := r.Window(now)
		return State{T: start, A: u}
	case SlidingWindow:
		start, _ := r.Window(now)
		return State{T: start, B: u}
	}
	return State{}
}

// CarryFromLog returns the state of r that carries the log lg of the
// SlidingLog rule from at time now. r must not be SlidingLog (see CarryLog);
// for such a call it returns the zero State. lg is left as it was.
func (r *Rule) CarryFromLog(from *Rule, lg *Log, now int64) State {
	if r.alg == SlidingLog || from.alg != SlidingLog {
		return State{}
	}
	return r.holding(from.LogUsed(lg, now), now)
}

// CarryToLog replaces the contents of lg with the log of the SlidingLog rule
// r that carries st, a state written under rule from, at time now: one
// entry of the usage at now, or none. from must not be SlidingLog (see
// CarryLog); for such a call lg is emptied. The log's memory is reused.
func (r *Rule) CarryToLog(from *Rule, st State, now int64, lg *Log) {
	u := int64(0)
	if from.alg != SlidingLog && r.alg == SlidingLog {
		u = min(from.Used(st, now), r.count)
	}
	lg.set(now, u)
}

// CarryLog carries lg, the log of a key under the SlidingLog rule from, to
// the SlidingLog rule r at time now, in place: with the same Period the
// entries are kept as they are; otherwise lg is replaced by one entry of its
// usage at now, capped at r's Count. If either rule is not SlidingLog, lg
// is left as it was.
func (r *Rule) CarryLog(from *Rule, lg *Log, now int64) {
	if r.alg != SlidingLog || from.alg != SlidingLog || r.period == from.period {
		return
	}
	lg.set(now, min(from.LogUsed(lg, now), r.count))
}

// set replaces the log's entries with one entry of cost n at time at, or
// none when n is zero, reusing the ring.
func (lg *Log) set(at, n int64) {
	clear(lg.ring)
	lg.head, lg.size, lg.sum = 0, 0, 0
	if n <= 0 {
		if len(lg.ring) > 8 {
			lg.ring = nil
		}
		return
	}
	if len(lg.ring) == 0 {
		lg.ring = make([]logEntry, 2)
	}
	lg.ring[0] = logEntry{at, n}
	lg.size, lg.sum = 1, n
}

// Clone returns a copy of lg that shares no memory with it, for carrying or
// evaluating a log without changing the original.
func (lg *Log) Clone() *Log {
	c := *lg
	c.ring = append([]logEntry(nil), lg.ring...)
	return &c
}
