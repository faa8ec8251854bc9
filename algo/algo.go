// Package algo holds the arithmetic of every Sluice rate-limiting algorithm
// as pure functions: a state, a rule, the time and a cost go in; a new state
// and a Status come out. Nothing here reads the clock, locks or allocates on
// the decision path. Stores (package memstore, package redisstore) own
// storage and atomicity and call into this package; applications use
// package sluice and never need it directly.
//
// # Units and exactness
//
// Time is an int64 count of nanoseconds since the Unix epoch and must be
// positive. Every computation is exact integer arithmetic: rates are kept as
// the reduced fraction count/period, products are formed in 128 bits, and the
// only rounding is of waiting times, which are rounded up to the next whole
// nanosecond so that a caller who waits as told is never turned away for a
// fraction of a nanosecond. There is no floating point and no drift: a rule
// of 3 per second admits exactly 3 per second forever.
//
// # Algorithms
//
//   - TokenBucket: a bucket of Burst tokens refilled continuously at
//     Count per Period; a request of cost n takes n tokens.
//   - GCRA: the generic cell rate algorithm, the leaky bucket as a meter.
//     It keeps one timestamp (the theoretical arrival time) and admits
//     exactly the same requests as TokenBucket with the same Count, Period
//     and Burst; the two differ only in the state they keep.
//   - FixedWindow: a counter per window of Period aligned to the Unix epoch.
//     Up to 2×Count can pass in one Period that straddles a boundary.
//   - SlidingWindow: the weighted two-window counter, prev×(1−elapsed/Period)
//   - cur, compared exactly in integers.
//   - SlidingLog: one timestamp per admitted request; never more than Count
//     in any window of one Period.
//
// FixedWindow and SlidingWindow rules built with CompileCalendar count per
// period of a Calendar (such as the months of a time zone from a billing
// anchor) instead of per Period-long window aligned to the epoch.
//
// # Changing a rule
//
// A store keeps a key's state when its limit's definition changes, and
// carries it to the new rule at the next decision: Rule.Carry (and
// CarryFromLog, CarryToLog and CarryLog when either rule is SlidingLog)
// charge the new rule with the units the state used under the old one at
// that time (Used, LogUsed), a partly used unit counting as used, capped at
// the new Capacity. A bucket whose Burst alone changed, and a sliding
// window or log whose Period did not change, keep their state exactly.
//
// All Rule methods are safe for concurrent use: a Rule is immutable. State and
// Log values are not synchronized; the store serializes access to them.
package algo

import (
	"errors"
	"fmt"
	"time"
)

// Algorithm names a rate-limiting algorithm. The zero value is invalid.
type Algorithm uint8

// The algorithms. Their String forms are the public vocabulary used in
// configuration files and APIs.
const (
	TokenBucket Algorithm = iota + 1
	GCRA
	FixedWindow
	SlidingWindow
	SlidingLog
)

var algorithmNames = [...]string{
	TokenBucket:   "token_bucket",
	GCRA:          "gcra",
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
}

// Algorithms lists every algorithm in a stable order.
func Algorithms() []Algorithm {
	return []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow, SlidingLog}
}

// String returns the algorithm's configuration name, such as "gcra".
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a names a known algorithm.
func (a Algorithm) Valid() bool { return a >= TokenBucket && a <= SlidingLog }

// IsBucket reports whether a is TokenBucket or GCRA: the algorithms that
// accept a Burst and support reservations.
func (a Algorithm) IsBucket() bool { return a == TokenBucket || a == GCRA }

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("algo: invalid algorithm %d", uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; it accepts the names
// returned by String.
func (a *Algorithm) UnmarshalText(text []byte) error {
	p, err := ParseAlgorithm(string(text))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

// ParseAlgorithm returns the algorithm with the given configuration name.
func ParseAlgorithm(name string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if algorithmNames[a] == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w %q: want one of token_bucket, gcra, fixed_window, sliding_window, sliding_log", ErrUnknownAlgorithm, name)
}

// Bounds on rules. They keep every intermediate value of every algorithm
// within its integer type, and reject configurations that can only be
// mistakes.
const (
	// MaxCount is the largest Count or Burst.
	MaxCount = 1_000_000_000_000
	// MaxPeriod is the longest Period: a year of 365 days.
	MaxPeriod = 365 * 24 * time.Hour
	// MaxRate is the highest rate, in units per second.
	MaxRate = 1_000_000_000
	// MaxLogCount is the largest Count of a SlidingLog rule, which keeps
	// one timestamp per admitted request.
	MaxLogCount = 100_000
	// MaxDrain bounds Burst×Period/Count: how long a full bucket takes to
	// refill.
	MaxDrain = 50 * MaxPeriod
)

// Errors returned by Compile and by the decision functions. Match them with
// errors.Is; the messages carry the offending values.
var (
	ErrUnknownAlgorithm = errors.New("algo: unknown algorithm")
	ErrInvalidRule      = errors.New("algo: invalid rule")
	// ErrCostExceedsCapacity reports a cost that no state could ever admit:
	// more than Burst for bucket rules, more than Count for window rules.
	ErrCostExceedsCapacity = errors.New("algo: cost exceeds capacity")
	ErrInvalidCost         = errors.New("algo: invalid cost")
)

// Rule is a compiled, validated rate limit. Build one with Compile. The zero
// Rule is invalid.
type Rule struct {
	alg    Algorithm
	count  int64 // units per period
	period int64 // nanoseconds
	burst  int64 // bucket capacity; equals count for window rules

	// The rate count/period reduced to lowest terms: l units per p ns.
	l, p uint64
	// capacity = burst×p: a full bucket in units of 1/l ns (see bucket.go).
	capacity u128
	// Dividers for the divisors of every decision.
	divL, divP, divPeriod divider
	// cal, if not nil, gives the windows of a window rule instead of
	// period (see CompileCalendar).
	cal Calendar
}

// Compile validates a rule and precomputes what the algorithms need. Burst
// applies to TokenBucket and GCRA only; zero means Count. Invalid rules
// return an error wrapping ErrInvalidRule or ErrUnknownAlgorithm that names
// the offending value.
func Compile(alg Algorithm, count int64, period time.Duration, burst int64) (Rule, error) {
	if !alg.Valid() {
		return Rule{}, fmt.Errorf("%w %d", ErrUnknownAlgorithm, uint8(alg))
	}
	switch {
	case count <= 0:
		return Rule{}, fmt.Errorf("%w: %s: limit %d must be positive", ErrInvalidRule, alg, count)
	case count > MaxCount:
		return Rule{}, fmt.Errorf("%w: %s: limit %d exceeds %d", ErrInvalidRule, alg, count, int64(MaxCount))
	case period <= 0:
		return Rule{}, fmt.Errorf("%w: %s: period %v must be positive", ErrInvalidRule, alg, period)
	case period > MaxPeriod:
		return Rule{}, fmt.Errorf("%w: %s: period %v exceeds %v", ErrInvalidRule, alg, period, MaxPeriod)
	case burst < 0:
		return Rule{}, fmt.Errorf("%w: %s: burst %d must not be negative", ErrInvalidRule, alg, burst)
	case alg == SlidingLog && count > MaxLogCount:
		return Rule{}, fmt.Errorf("%w: sliding_log keeps one timestamp per request: limit %d exceeds %d; use sliding_window or gcra for large limits", ErrInvalidRule, count, MaxLogCount)
	}
	// count/period <= MaxRate per second, compared without overflow:
	// count×1e9 <= MaxRate×period.
	if mul(uint64(MaxRate), uint64(period)).less(mul(uint64(count), uint64(time.Second))) {
		return Rule{}, fmt.Errorf("%w: %s: rate %d per %v exceeds %d per second", ErrInvalidRule, alg, count, period, int64(MaxRate))
	}
	if burst == 0 {
		burst = count
	}
	if !alg.IsBucket() && burst != count {
		return Rule{}, fmt.Errorf("%w: %s: burst %d: burst applies only to token_bucket and gcra", ErrInvalidRule, alg, burst)
	}
	if burst > MaxCount {
		return Rule{}, fmt.Errorf("%w: %s: burst %d exceeds %d", ErrInvalidRule, alg, burst, int64(MaxCount))
	}
	g := gcd(uint64(count), uint64(period))
	r := Rule{
		alg:    alg,
		count:  count,
		period: int64(period),
		burst:  burst,
		l:      uint64(count) / g,
		p:      uint64(period) / g,
	}
	r.capacity = mul(uint64(burst), r.p)
	r.divL, r.divP, r.divPeriod = newDivider(r.l), newDivider(r.p), newDivider(uint64(period))
	if drain := r.capacity.divCeil(r.l); drain > int64(MaxDrain) {
		return Rule{}, fmt.Errorf("%w: %s: burst %d takes %v to refill at %d per %v, more than %v", ErrInvalidRule, alg, burst, time.Duration(drain), count, period, time.Duration(MaxDrain))
	}
	return r, nil
}

// Algorithm returns the rule's algorithm.
func (r *Rule) Algorithm() Algorithm { return r.alg }

// Count returns the number of units admitted per Period.
func (r *Rule) Count() int64 { return r.count }

// Period returns the rule's period.
func (r *Rule) Period() time.Duration { return time.Duration(r.period) }

// Burst returns the most units admitted at once: Burst for bucket rules,
// Count for window rules.
func (r *Rule) Burst() int64 { return r.burst }

// Capacity returns the largest cost a single request may have.
func (r *Rule) Capacity() int64 { return r.burst }

// String returns a compact form such as "gcra 10/1s burst 20", or
// "fixed_window 1000/month anchor=15" for a calendar rule.
func (r *Rule) String() string {
	if r.cal != nil {
		return fmt.Sprintf("%s %d/%s", r.alg, r.count, r.cal)
	}
	s := fmt.Sprintf("%s %d/%v", r.alg, r.count, time.Duration(r.period))
	if r.alg.IsBucket() && r.burst != r.count {
		s += fmt.Sprintf(" burst %d", r.burst)
	}
	return s
}

// CheckCost reports whether n is a valid cost for the rule: at least 1 and
// at most Capacity.
func (r *Rule) CheckCost(n int64) error {
	if n < 1 {
		return fmt.Errorf("%w: %d must be at least 1", ErrInvalidCost, n)
	}
	if n > r.burst {
		return fmt.Errorf("%w: cost %d can never fit %s", ErrCostExceedsCapacity, n, r)
	}
	return nil
}

// State is the per-key state of a rule of any algorithm but SlidingLog. The
// zero State is a key that has never been seen. Its fields mean:
//
//	              T                          A                 B
//	TokenBucket:   last update time           whole tokens      fraction of a token ×p
//	GCRA:          theoretical arrival time   fraction of a ns ×l
//	FixedWindow:   window start               count
//	SlidingWindow: current window start       previous count    current count
//
// It is a struct of three words rather than an array so that it travels in
// registers.
type State struct{ T, A, B int64 }

// Status is the outcome of one rule for one request. Durations are in
// nanoseconds. It has four fields so that the compiler keeps it in
// registers; the rule's Count and its position in a policy are the caller's.
type Status struct {
	// Allowed reports whether the request is admitted.
	Allowed bool
	// Remaining is how many units would still be admitted now, after this
	// request if it was admitted. It can exceed Count when Burst does.
	Remaining int64
	// RetryAfter is how long until a request of the same cost would be
	// admitted, if nothing else is admitted meanwhile; zero when allowed.
	RetryAfter int64
	// ResetAfter is how long until the key is back to its fresh state.
	ResetAfter int64
}

// Binds reports whether status s, of a rule charged together with others,
// should replace acc as the status that binds the combined decision: when
// all allow, the one with the fewest units remaining (ties: the longest
// reset); otherwise the denying rule with the longest RetryAfter. Callers
// start from the first rule's status.
func Binds(acc, s Status) bool {
	switch {
	case acc.Allowed && s.Allowed:
		return s.Remaining < acc.Remaining || (s.Remaining == acc.Remaining && s.ResetAfter > acc.ResetAfter)
	case acc.Allowed:
		return true
	case s.Allowed:
		return false
	}
	return s.RetryAfter > acc.RetryAfter
}

// Eval decides a request of cost n at time now against state st. It returns
// the state to keep if the request is admitted (st itself when it is not) and
// the status. A cost of 0 peeks: Allowed then says whether one unit would be
// admitted, Remaining counts what is left, and the returned state is st.
// The caller validates n with CheckCost. Eval must not be called for
// SlidingLog rules: see Log.
func (r *Rule) Eval(st State, now, n int64) (State, Status) {
	switch r.alg {
	case TokenBucket, GCRA:
		return r.evalBucket(st, now, n)
	case FixedWindow:
		return r.evalFixed(st, now, n)
	case SlidingWindow:
		return r.evalSliding(st, now, n)
	}
	panic("algo: Eval called on " + r.alg.String())
}

// Expiry returns the time at which st becomes equivalent to the zero State,
// after which a store may forget it.
func (r *Rule) Expiry(st State, now int64) int64 {
	if st == (State{}) {
		return now
	}
	_, s := r.Eval(st, now, 0)
	return now + s.ResetAfter
}
