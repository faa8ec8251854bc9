package algo

import (
	"fmt"
	"time"
)

// Calendar places instants in periods of varying length, such as the
// months of a time zone's calendar from a billing anchor (package calendar
// implements it). It must be a pure function of its argument and safe for
// concurrent use.
type Calendar interface {
	// Period returns the period containing t: start <= t < end, all in
	// nanoseconds since the Unix epoch. Consecutive periods share their
	// boundaries.
	Period(t int64) (start, end int64)
	// MaxLength is the longest a period can be.
	MaxLength() time.Duration
	// String identifies the calendar: equal strings, equal periods.
	String() string
}

// CompileCalendar returns a FixedWindow or SlidingWindow rule whose
// windows are the periods of cal instead of Period-long windows aligned to
// the Unix epoch: Count units per period. Period reports cal's MaxLength.
//
// A SlidingWindow rule weighs the previous period's count by the part of
// the current period not yet elapsed, prev×(1−e/L) + cur with L the
// current period's length, so a month of 31 days follows a month of 28
// exactly as equal windows follow each other. Other algorithms return an
// error wrapping ErrInvalidRule: buckets and logs have no windows to align.
func CompileCalendar(alg Algorithm, count int64, cal Calendar) (Rule, error) {
	if alg != FixedWindow && alg != SlidingWindow {
		if !alg.Valid() {
			return Rule{}, fmt.Errorf("%w %d", ErrUnknownAlgorithm, uint8(alg))
		}
		return Rule{}, fmt.Errorf("%w: %s: calendar periods apply only to fixed_window and sliding_window", ErrInvalidRule, alg)
	}
	if cal == nil {
		return Rule{}, fmt.Errorf("%w: %s: no calendar", ErrInvalidRule, alg)
	}
	// A day is at least 22 hours long (a 2-hour daylight-saving jump), so
	// with the shortest period the rate stays within MaxRate.
	r, err := Compile(alg, count, 22*time.Hour, 0)
	if err != nil {
		return Rule{}, err
	}
	r.period = int64(cal.MaxLength())
	r.cal = cal
	return r, nil
}

// Calendar returns the rule's calendar, or nil for a rule of fixed-length
// windows.
func (r *Rule) Calendar() Calendar { return r.cal }

// Window returns the window of a FixedWindow or SlidingWindow rule that
// contains now: [start, end) in nanoseconds since the Unix epoch.
func (r *Rule) Window(now int64) (start, end int64) {
	if r.cal != nil {
		return r.cal.Period(now)
	}
	start = r.windowStart(now)
	return start, start + r.period
}

// span returns the window containing now, skipping work when it starts at
// known (a window start kept in the state) or just after it.
func (r *Rule) span(known, now int64) (start, end int64) {
	if r.cal != nil {
		return r.cal.Period(now)
	}
	start = r.startFor(known, now)
	return start, start + r.period
}

// endOf returns the end of the window that starts at start.
func (r *Rule) endOf(start int64) int64 {
	if r.cal != nil {
		_, end := r.cal.Period(start)
		return end
	}
	return start + r.period
}

// prevOf returns the start of the window before the one starting at start.
func (r *Rule) prevOf(start int64) int64 {
	if r.cal != nil {
		s, _ := r.cal.Period(start - 1)
		return s
	}
	return start - r.period
}

// sameWindows reports whether r and o cut time into the same windows.
func (r *Rule) sameWindows(o *Rule) bool {
	if r.cal == nil || o.cal == nil {
		return r.cal == nil && o.cal == nil && r.period == o.period
	}
	return r.cal.String() == o.cal.String()
}
