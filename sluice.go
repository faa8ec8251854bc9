// Package sluice is a rate limiter for Go APIs: one keyed limiter serves any
// number of clients, IPs, API keys, endpoints or global resources, with the
// classic algorithms computed exactly in integers and a choice of stores.
//
// A Limiter applies a Policy (one or more Limits checked together, such as
// 10 per second AND 1000 per hour) to keys in a Store. Package memstore is
// the embedded in-memory store; package redisstore shares limits between
// processes through Redis.
//
//	store := memstore.New(memstore.Options{})
//	defer store.Close()
//	lim, err := sluice.New(store, "api", sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second})
//	...
//	d, err := lim.Allow(ctx, clientIP)
//	if err == nil && !d.Allowed {
//		// answer 429 with Retry-After: d.RetryAfter
//	}
//
// # Algorithms
//
// TokenBucket and GCRA (the leaky bucket as a meter) admit bursts of up to
// Burst and then Count per Period; they admit exactly the same requests and
// differ only in the state they keep. FixedWindow counts per aligned window
// and can let 2×Count through across a window boundary. SlidingWindow weighs
// the previous window's count by how much of it still overlaps the sliding
// window. SlidingLog keeps one timestamp per request and never admits more
// than Count in any window of one Period. The leaky bucket as a queue, which
// delays requests instead of rejecting them, is Reserve and Wait on a bucket
// policy. See package algo for the arithmetic.
//
// A FixedWindow or SlidingWindow limit with a Calendar is a calendar quota:
// Count per day, week, month or year of a time zone, from a billing anchor
// (10,000 a month renewed on the 15th at 09:00 Berlin time), beside rate
// limits in one policy; Policy.WithAnchor gives a client its own anchor.
//
// # Decisions and errors
//
// A denial is a result, not an error: Allow returns a Decision whose Allowed
// field is false, with RetryAfter and ResetAfter set so that the caller can
// answer 429 with Retry-After and X-RateLimit headers without further
// computation. An error means no decision could be made: an invalid cost,
// or a store that failed.
//
// A Limiter is safe for concurrent use by multiple goroutines. Its zero value
// is not usable; build one with New.
package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/internal/compiled"
)

// Algorithm names a rate-limiting algorithm; see package algo.
type Algorithm = algo.Algorithm

// The algorithms, by their configuration names.
const (
	TokenBucket   = algo.TokenBucket   // "token_bucket"
	GCRA          = algo.GCRA          // "gcra"
	FixedWindow   = algo.FixedWindow   // "fixed_window"
	SlidingWindow = algo.SlidingWindow // "sliding_window"
	SlidingLog    = algo.SlidingLog    // "sliding_log"
)

// ParseAlgorithm returns the algorithm with the given configuration name,
// such as "token_bucket".
func ParseAlgorithm(name string) (Algorithm, error) { return algo.ParseAlgorithm(name) }

// MaxLimits is the most Limits one Policy may hold.
const MaxLimits = 8

// Errors. Match them with errors.Is.
var (
	// ErrInvalidLimit reports a Limit that can never work: a zero or
	// negative count or period, an unknown algorithm, a burst on a window
	// algorithm, or a value beyond the documented bounds of package algo.
	ErrInvalidLimit = errors.New("sluice: invalid limit")
	// ErrInvalidCost reports a cost below 1.
	ErrInvalidCost = algo.ErrInvalidCost
	// ErrCostExceedsCapacity reports a cost that the policy could never
	// admit, however long the caller waited.
	ErrCostExceedsCapacity = algo.ErrCostExceedsCapacity
	// ErrReserveUnsupported reports Reserve or Wait on a policy with a
	// window algorithm; only TokenBucket and GCRA can schedule requests.
	ErrReserveUnsupported = errors.New("sluice: reserve needs token_bucket or gcra limits")
	// ErrInvalidBatch reports a TakeAll batch that cannot be decided: a
	// request without a policy, two requests for one key under policies
	// that share a limit's state, or fewer places for decisions than
	// requests.
	ErrInvalidBatch = errors.New("sluice: invalid batch")
)

// Limit is one rate limit: Count units per Period, computed by Algorithm.
type Limit struct {
	// Algorithm selects the algorithm. Required.
	Algorithm Algorithm
	// Count is the number of units (requests, or their cost) admitted per
	// Period. Required; at most algo.MaxCount, and at most algo.MaxLogCount
	// for SlidingLog.
	Count int64
	// Period is the window or refill period. Required; at most
	// algo.MaxPeriod. Count/Period is at most algo.MaxRate per second.
	Period time.Duration
	// Burst is the most units TokenBucket and GCRA admit at once from a
	// fresh key. Zero means Count. Window algorithms take no Burst.
	Burst int64
	// Calendar, if set, makes a FixedWindow or SlidingWindow limit a
	// calendar quota: Count units per period of the calendar (a day, week,
	// month or year of a time zone, from a billing anchor) instead of per
	// Period-long window aligned to the Unix epoch. Period must then be
	// zero. Decisions' ResetAfter and RetryAfter count to the period's
	// true end, such as the next anchor day. See package calendar, and
	// Policy.WithAnchor for per-client anchors.
	Calendar *calendar.Calendar
}

// String returns a compact form such as "gcra 10/1s burst 20".
func (l Limit) String() string {
	r, err := l.compile()
	if err != nil && l.Calendar != nil {
		return fmt.Sprintf("%s %d/%s (invalid)", l.Algorithm, l.Count, l.Calendar)
	}
	if err != nil {
		return fmt.Sprintf("%s %d/%v burst %d (invalid)", l.Algorithm, l.Count, l.Period, l.Burst)
	}
	return r.String()
}

// Validate reports whether the limit can be used, with an error wrapping
// ErrInvalidLimit that names the offending value.
func (l Limit) Validate() error {
	_, err := l.compile()
	return err
}

func (l Limit) compile() (algo.Rule, error) {
	var r algo.Rule
	var err error
	switch {
	case l.Calendar != nil && l.Period != 0:
		err = fmt.Errorf("%s: period %v: a calendar limit's period is its calendar's (leave Period zero)", l.Algorithm, l.Period)
	case l.Calendar != nil && l.Burst != 0:
		err = fmt.Errorf("%s: burst %d: a calendar limit takes no burst", l.Algorithm, l.Burst)
	case l.Calendar != nil:
		r, err = algo.CompileCalendar(l.Algorithm, l.Count, l.Calendar)
	default:
		r, err = algo.Compile(l.Algorithm, l.Count, l.Period, l.Burst)
	}
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrInvalidLimit, err)
	}
	return r, nil
}

// Policy is a named set of limits applied together to every key: a request
// is admitted only if every limit admits it, and then it is charged to all of
// them; a rejected request is charged to none. The name is the policy's key
// space: a limit's state for a key is identified by the policy's name, the
// limit's index and the key, not by the limit's definition. Two policies
// with the same name share state (give different limits different names),
// and a policy rebuilt with changed limits takes over the counters of the
// one it replaces: stores carry each state to the new definition (see
// package algo, Rule.Carry), so that a reload never hands clients a fresh
// quota. A Policy is immutable and safe for concurrent use.
type Policy struct {
	name   string
	limits []Limit
	c      compiled.Policy // what stores see, through package storekit
	bucket bool            // every rule is a bucket rule
	// capacity is the largest cost every limit can hold: the least Burst.
	capacity int64

	penalty *Penalty // nil for none; also c.Penalty

	sync Sync // see WithSync
}

func init() {
	compiled.Of = func(p any) *compiled.Policy { return &p.(*Policy).c }
}

// NewPolicy validates the limits and returns a policy. The name must be
// non-empty, at most 200 bytes, and free of control characters.
func NewPolicy(name string, limits ...Limit) (*Policy, error) {
	if name == "" || len(name) > 200 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, fmt.Errorf("%w: policy name %q must be 1 to 200 bytes without control characters", ErrInvalidLimit, name)
	}
	if len(limits) == 0 || len(limits) > MaxLimits {
		return nil, fmt.Errorf("%w: policy %q has %d limits, want 1 to %d", ErrInvalidLimit, name, len(limits), MaxLimits)
	}
	p := &Policy{name: name, limits: append([]Limit(nil), limits...), bucket: true}
	for i, l := range limits {
		r, err := l.compile()
		if err != nil {
			return nil, fmt.Errorf("policy %q limit %d: %w", name, i, err)
		}
		id := fmt.Sprintf("%s|%d", name, i)
		p.c.Rules = append(p.c.Rules, r)
		p.c.IDs = append(p.c.IDs, id)
		slot := compiled.SlotOf(id)
		if r.Algorithm() == algo.SlidingLog {
			compiled.MarkLog(slot)
		}
		p.c.Slots = append(p.c.Slots, slot)
		p.c.Defs = append(p.c.Defs, compiled.DefOf(r))
		p.bucket = p.bucket && l.Algorithm.IsBucket()
		if i == 0 || r.Capacity() < p.capacity {
			p.capacity = r.Capacity()
		}
	}
	return p, nil
}

// Name returns the policy's name.
func (p *Policy) Name() string { return p.name }

// WithAnchor returns the policy with a client's own billing anchor applied
// to its calendar limits (see calendar.Calendar.WithAnchor: the time of day
// for every unit, the day for months and years), or p itself when it has
// no calendar limit or the anchor changes none. The result keeps p's name
// and penalty, so it shares p's counters: a key decided only under one
// anchor keeps its state exactly, and a key whose anchor changes has its
// usage carried to the new periods as for any change of definition.
// Policies are cheap but not free to build; callers deciding many requests
// for one client should keep the result.
func (p *Policy) WithAnchor(a calendar.Anchor) *Policy {
	limits, changed := p.Limits(), false
	for i, l := range limits {
		if l.Calendar == nil {
			continue
		}
		if c := l.Calendar.WithAnchor(a); c != l.Calendar {
			limits[i].Calendar, changed = c, true
		}
	}
	if !changed {
		return p
	}
	q, err := NewPolicy(p.name, limits...)
	if err != nil { // unreachable: only valid calendars changed
		return p
	}
	q.penalty, q.c.Penalty, q.c.PenaltySlot = p.penalty, p.c.Penalty, p.c.PenaltySlot
	return q
}

// Limit returns limit i, as given to NewPolicy (or changed by WithAnchor).
func (p *Policy) Limit(i int) Limit { return p.limits[i] }

// Limits returns a copy of the policy's limits.
func (p *Policy) Limits() []Limit { return append([]Limit(nil), p.limits...) }

// Len returns the number of limits.
func (p *Policy) Len() int { return len(p.c.Rules) }

// CanReserve reports whether every limit is a bucket limit, as Reserve and
// Wait require.
func (p *Policy) CanReserve() bool { return p.bucket }

// CheckCost returns an error if n is not a cost that every limit could admit.
func (p *Policy) CheckCost(n int64) error {
	if n >= 1 && n <= p.capacity {
		return nil
	}
	for i := range p.c.Rules {
		if err := p.c.Rules[i].CheckCost(n); err != nil {
			return fmt.Errorf("policy %q limit %d: %w", p.name, i, err)
		}
	}
	return nil
}

// Decision is the answer for one request. It carries what a caller needs to
// answer 429 Too Many Requests and to send rate-limit headers.
type Decision struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Limit is the most units the binding limit can hold, the ceiling of
	// Remaining: its Burst for TokenBucket and GCRA (larger or smaller
	// than its Count), its Count for the window algorithms. The binding
	// limit is, when allowed, the limit with the fewest units remaining;
	// when denied, the denying limit with the longest RetryAfter.
	Limit int64
	// Remaining is how many units the binding limit would still admit now,
	// from 0 to Limit.
	Remaining int64
	// RetryAfter is how long until the same request would be admitted, if
	// nothing else is admitted meanwhile. Zero when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the binding limit is back to full.
	ResetAfter time.Duration
	// Delay is, for Reserve and Wait, how long the caller must wait before
	// acting. Zero otherwise.
	Delay time.Duration
	// Index is the position of the binding limit in the policy.
	Index int
	// Time is the store's time of the decision. RetryAfter, ResetAfter and
	// Delay count from it.
	Time time.Time
	// Degraded reports that the decision did not come from the configured
	// store but from a fallback path (see package redisstore).
	Degraded bool
}

// ResetTime returns the time at which the binding limit is full again.
func (d Decision) ResetTime() time.Time { return d.Time.Add(d.ResetAfter) }

// Store keeps the state of every key and decides atomically. Implementations
// must pass the conformance suite in package storetest. Every method is safe
// for concurrent use; the policy and cost have been validated by the caller.
//
// Stores are written with package storekit, which gives a store's view of
// a policy, and checked with package storetest.
//
// A store keeps each limit's state for a key under the limit's identity
// (the policy's name and the limit's index, storekit.Policy.ID) and records with it
// the definition that wrote it. Take, Reserve and Cancel (and a TakeAll a
// store decides itself) that find a state written under another definition
// first carry it to the current one at the decision's time, as package
// algo's Rule.Carry and its log forms describe, and keep the carried state;
// Peek carries it without writing; Reset removes the state whatever its
// definition.
//
// For a policy with a Penalty, a store keeps each key's penalty record
// (storekit.PenaltyState) under the policy's name and decides it with the
// request, atomically: Take, Peek and Reserve deny a blocked key with
// storekit.Policy.Blocked, charging nothing; a Take its limits deny is a
// strike (storekit.Strike); Reset forgets the record. A store that cannot returns
// an error wrapping ErrPenaltyUnsupported rather than ignore the penalty.
type Store interface {
	// Take decides a request of cost n >= 1 for key under p and charges it
	// to every limit if, and only if, every limit admits it.
	Take(ctx context.Context, p *Policy, key string, n int64) (Decision, error)
	// Peek reports the status of key under p without charging anything:
	// Allowed tells whether one unit would be admitted now.
	Peek(ctx context.Context, p *Policy, key string) (Decision, error)
	// Reserve schedules a request of cost n at the earliest time every
	// limit admits it, if that is at most maxWait away, and charges it as
	// of that time. The Decision's Delay says how long to wait; when the
	// wait would exceed maxWait, nothing is charged and Allowed is false.
	// p holds bucket limits only.
	Reserve(ctx context.Context, p *Policy, key string, n int64, maxWait time.Duration) (Decision, error)
	// Cancel gives back the n units of a reservation due at time at, if
	// that time has not yet come on the store's clock.
	Cancel(ctx context.Context, p *Policy, key string, n int64, at time.Time) error
	// Reset forgets key under p, as if it had never been seen.
	Reset(ctx context.Context, p *Policy, key string) error
}

// ClosedFailer is a store with a failure policy of its own that may refuse
// requests it could not decide (redisstore.Store with OnError Deny): when
// FailsClosed reports true, a denial with Degraded set says nothing about
// the client's use of its quota, and callers answer it as the store
// failing (HTTP 503) rather than as a limit (429). The answer must not
// change over the store's life.
type ClosedFailer interface {
	FailsClosed() bool
}

// Limiter applies one Policy to any number of keys in a Store. It is safe for
// concurrent use.
type Limiter struct {
	store  Store
	policy *Policy
}

// New returns a limiter for the policy built from name and limits; see
// NewPolicy.
func New(store Store, name string, limits ...Limit) (*Limiter, error) {
	p, err := NewPolicy(name, limits...)
	if err != nil {
		return nil, err
	}
	return NewWithPolicy(store, p)
}

// NewWithPolicy returns a limiter for an existing policy.
func NewWithPolicy(store Store, p *Policy) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("sluice: nil store")
	}
	if p == nil {
		return nil, errors.New("sluice: nil policy")
	}
	return &Limiter{store: store, policy: p}, nil
}

// Policy returns the limiter's policy.
func (l *Limiter) Policy() *Policy { return l.policy }

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.store.Take(ctx, l.policy, key, 1)
}

// AllowN decides a request of cost n for key, charging every limit if all
// admit it and none otherwise. A cost no limit could ever admit returns an
// error wrapping ErrCostExceedsCapacity rather than a denial.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	if err := l.policy.CheckCost(n); err != nil {
		return Decision{}, err
	}
	return l.store.Take(ctx, l.policy, key, n)
}

// Peek reports the status of key without charging it.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	return l.store.Peek(ctx, l.policy, key)
}

// Reset forgets key, restoring its full quota.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.store.Reset(ctx, l.policy, key)
}
