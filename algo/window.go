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
	start, end := r.span(st.T, now)
	count := int64(0)
	if st.T >= start { // the same window, or a clock that stepped back
		if st.T != start {
			end = r.endOf(st.T)
		}
		start, count = st.T, st.A
	}
	cost := max(n, 1)
	s := Status{Allowed: count+cost <= r.count}
	next := st
	if s.Allowed && n > 0 {
		count += n
		next = State{T: start, A: count}
	}
	if !s.Allowed {
		s.RetryAfter = end - now
	}
	s.Remaining = r.count - count
	if count > 0 {
		s.ResetAfter = end - now
	}
	return next, s
}

// evalSliding implements SlidingWindow: State{T: current window start, A:
// previous count, B: current count}. The estimate prev×(P−e)/P + cur, with e the time
// elapsed in the current window and P its length, is compared with Count
// after multiplying through by P, so no division rounds it.
func (r *Rule) evalSliding(st State, now, n int64) (State, Status) {
	start, end, prev, cur := r.slidingCounts(st, now)
	p := uint64(end - start)
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
		s.RetryAfter = r.slidingRetry(start, end, now, prev, cur, cost)
	}
	s.Remaining = r.divWindow(limit.subFloor(weighted.add(mul(uint64(cur), p))), p)
	switch {
	case cur > 0:
		s.ResetAfter = r.endOf(end) - now
	case prev > 0:
		s.ResetAfter = end - now
	}
	return next, s
}

// divWindow returns floor(x/p) for a window of p ns: the rule's divider
// for fixed-length windows, a division for calendar periods.
func (r *Rule) divWindow(x u128, p uint64) int64 {
	if r.cal == nil {
		q, _ := r.divPeriod.divmod(x)
		return q.int64()
	}
	return x.div(p)
}

// slidingRetry returns how long until a request of cost n fits, given the
// window [start, end) with counts prev and cur that it did not fit.
func (r *Rule) slidingRetry(start, end, now, prev, cur, n int64) int64 {
	if cur+n > r.count {
		// Only after the window rolls over, when cur becomes the previous
		// count, and once cur×(P'−e) <= (Count−n)×P' in the next window,
		// of length P'.
		next := r.endOf(end)
		keep := mul(uint64(r.count-n), uint64(next-end)).div(uint64(cur)) // < P'
		return next - now - keep
	}
	// Within this window, once prev×(P−e) <= (Count−cur−n)×P.
	keep := mul(uint64(r.count-cur-n), uint64(end-start)).div(uint64(prev))
	return end - keep - now
}
