package algo

import "iter"

// Log is the state of a SlidingLog rule for one key: the admitted requests
// of the last Period, oldest first, as (time, cost) entries in a ring. Entries
// at the same nanosecond are merged, so a Log never holds more entries than
// the rule's Count. The zero Log is empty and ready to use. A Log is not safe
// for concurrent use; the store serializes access to it.
type Log struct {
	ring []logEntry // len is zero or a power of two
	head int        // index of the oldest entry
	size int        // number of entries
	sum  int64      // total cost of the entries
}

type logEntry struct{ at, n int64 }

// Len returns the number of entries kept.
func (lg *Log) Len() int { return lg.size }

// All yields the log's entries, oldest first: the time of each and its
// cost. It includes entries that no longer count, until a Record drops
// them (see LogUsed for what counts at a time).
func (lg *Log) All() iter.Seq2[int64, int64] {
	return func(yield func(at, n int64) bool) {
		for i := range lg.size {
			if e := lg.at(i); !yield(e.at, e.n) {
				return
			}
		}
	}
}

// Bytes returns the memory held by the log's entries.
func (lg *Log) Bytes() int { return cap(lg.ring) * 16 }

func (lg *Log) at(i int) *logEntry { return &lg.ring[(lg.head+i)&(len(lg.ring)-1)] }

// expire drops the entries that no longer count at now: those at or before
// now−Period. Only Record calls it, so that evaluating (a peek, a denial)
// changes nothing even if the clock later steps back.
func (lg *Log) expire(now, period int64) {
	for lg.size > 0 {
		e := lg.at(0)
		if e.at > now-period {
			break
		}
		lg.sum -= e.n
		*e = logEntry{}
		lg.head = (lg.head + 1) & (len(lg.ring) - 1)
		lg.size--
	}
	if lg.size == 0 {
		lg.head = 0
		if len(lg.ring) > 8 {
			lg.ring = nil
		}
	} else if len(lg.ring) > 8 && lg.size*4 <= len(lg.ring) {
		lg.resize(len(lg.ring) / 2)
	}
}

func (lg *Log) resize(n int) {
	ring := make([]logEntry, n)
	for i := range lg.size {
		ring[i] = *lg.at(i)
	}
	lg.ring, lg.head = ring, 0
}

// EvalLog decides a request of cost n at time now against a SlidingLog rule.
// It changes nothing: call Record when the request is admitted. A cost of 0
// peeks, as for Eval.
func (r *Rule) EvalLog(lg *Log, now, n int64) Status {
	// Entries at or before now−Period no longer count.
	first, sum := 0, lg.sum
	for ; first < lg.size && lg.at(first).at <= now-r.period; first++ {
		sum -= lg.at(first).n
	}
	cost := max(n, 1)
	s := Status{Allowed: sum+cost <= r.count}
	used := sum
	if s.Allowed {
		used += n
	} else {
		// Wait until enough of the oldest entries expire.
		free := sum + cost - r.count
		for i := first; i < lg.size; i++ {
			e := lg.at(i)
			if free -= e.n; free <= 0 {
				s.RetryAfter = e.at + r.period - now
				break
			}
		}
	}
	// A log carried from a rule of a larger Count can hold more than
	// Count (see CarryLog): nothing remains then.
	s.Remaining = max(r.count-used, 0)
	if used > 0 {
		newest := now // the request being admitted
		if first < lg.size {
			last := lg.at(lg.size - 1).at
			if s.Allowed && n > 0 {
				newest = max(newest, last)
			} else {
				newest = last
			}
		}
		s.ResetAfter = newest + r.period - now
	}
	return s
}

// Record adds an admitted request of cost n at time now. A time earlier than
// the newest entry (a clock that stepped back) is recorded at the newest
// entry's time, which keeps the log ordered and can only delay expiry.
func (r *Rule) Record(lg *Log, now, n int64) {
	lg.expire(now, r.period)
	if lg.size > 0 {
		last := lg.at(lg.size - 1)
		if last.at >= now {
			last.n += n
			lg.sum += n
			return
		}
	}
	if lg.size == len(lg.ring) {
		lg.resize(max(2*len(lg.ring), 2))
	}
	*lg.at(lg.size) = logEntry{now, n}
	lg.size++
	lg.sum += n
}

// LogExpiry returns the time at which lg becomes empty.
func (r *Rule) LogExpiry(lg *Log, now int64) int64 {
	if lg.size == 0 {
		return now
	}
	return max(lg.at(lg.size-1).at+r.period, now)
}
