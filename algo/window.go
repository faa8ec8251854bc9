package algo

// windowStart returns the start of the Period-long window, aligned to the
// Unix epoch, that contains now.
func (r *Rule) windowStart(now int64) int64 {
	if now < 0 {
		return floorDiv(now, r.period) * r.period
	}
	return int64(r.divPeriod.div(uint64(now))) * r.period
}

// startFor returns the start of the window containing now, skipping the
// division when now falls in the window starting at known or the next one.
func (r *Rule) startFor(known, now int64) int64 {
	switch {
	case known <= now && now-known < r.period:
		return known
	case known <= now && now-known < 2*r.period:
		return known + r.period
	}
	return r.windowStart(now)
}

// evalFixed implements FixedWindow: State{T: window start, A: count}.
func (r *Rule) evalFixed(st State, now, n int64) (State, Status) {
	start, count := r.startFor(st.T, now), int64(0)
	if st.T >= start { // the same window, or a clock that stepped back
		start, count = st.T, st.A
	}
	cost := max(n, 1)
	s := Status{Allowed: count+cost <= r.count}
	next := st
	if s.Allowed && n > 0 {
		count += n
		next = State{T: start, A: count}
	}
	end := start + r.period - now
	if !s.Allowed {
		s.RetryAfter = end
	}
	s.Remaining = r.count - count
	if count > 0 {
		s.ResetAfter = end
	}
	return next, s
}

// evalSliding implements SlidingWindow: State{T: current window start, A:
// previous count, B: current count}. The estimate prev×(P−e)/P + cur, with e the time
// elapsed in the current window, is compared with Count after multiplying
// through by P, so no division rounds it.
func (r *Rule) evalSliding(st State, now, n int64) (State, Status) {
	start := r.startFor(st.T, now)
	prev, cur := int64(0), int64(0)
	switch {
	case st.T >= start: // the same window, or a clock that stepped back
		start, prev, cur = st.T, st.A, st.B
	case st.T+r.period == start:
		prev = st.B
	}
	p := uint64(r.period)
	e := uint64(max(now-start, 0))
	weighted := mul(uint64(prev), p-e) // prev×(P−e)
	limit := mul(uint64(r.count), p)   // Count×P
	cost := max(n, 1)
	used := weighted.add(mul(uint64(cur+cost), p))
	s := Status{Allowed: !limit.less(used)}
	next := st
	if s.Allowed && n > 0 {
		cur += n
		next = State{T: start, A: prev, B: cur}
	}
	if !s.Allowed {
		s.RetryAfter = r.slidingRetry(start, now, prev, cur, cost)
	}
	rem, _ := r.divPeriod.divmod(limit.subFloor(weighted.add(mul(uint64(cur), p))))
	s.Remaining = rem.int64()
	switch {
	case cur > 0:
		s.ResetAfter = start + 2*r.period - now
	case prev > 0:
		s.ResetAfter = start + r.period - now
	}
	return next, s
}

// slidingRetry returns how long until a request of cost n fits, given the
// window starting at start with counts prev and cur that it did not fit.
func (r *Rule) slidingRetry(start, now, prev, cur, n int64) int64 {
	p := uint64(r.period)
	if cur+n > r.count {
		// Only after the window rolls over, when cur becomes the previous
		// count, and once cur×(P−e) <= (Count−n)×P.
		keep := mul(uint64(r.count-n), p).div(uint64(cur)) // < P
		return start + r.period - now + r.period - keep
	}
	// Within this window, once prev×(P−e) <= (Count−cur−n)×P.
	keep := mul(uint64(r.count-cur-n), p).div(uint64(prev))
	return start + r.period - keep - now
}
