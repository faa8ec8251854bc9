// Package storetest is the conformance suite that every sluice.Store must
// pass, in the spirit of testing/fstest: a store's own tests call Run with a
// factory, and the suite drives the store through sluice.Limiter at exact
// times on a clock.Fake.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clk *clock.Fake) sluice.Store {
//			s := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// # What a store must do to pass
//
// Package algo is the reference: a store must decide exactly as its pure
// functions do, whatever language the store computes in (Redis runs Lua).
// In detail:
//
//   - Read the time from the clock.Fake given to the factory, at every
//     decision, and report it as Decision.Time. The suite sets the clock to
//     whole microseconds at or after the reading it had when the factory was
//     called, and it steps the clock backwards as well as forwards.
//   - Decide every algorithm exactly as algo.Rule.Eval and algo.Rule.EvalLog
//     do: Allowed, Limit, Remaining and Index exactly; RetryAfter, ResetAfter
//     and Delay exactly or rounded up to the store's Resolution (see
//     Options), never down. Fixed and sliding windows are aligned to the
//     Unix epoch, not to the first request.
//   - Decide a policy of several limits atomically: a request is charged to
//     every limit if all admit it and to none otherwise, and the Decision
//     reports the binding limit as algo.Binds chooses it (when allowed, the
//     limit with the fewest units remaining, then the longest ResetAfter;
//     when denied, the denying limit with the longest RetryAfter; any tie
//     left goes to the lowest index).
//   - Stay atomic under concurrency: goroutines hammering one key never get
//     more admitted than a sequential caller would.
//   - Peek charges nothing and reports whether one unit would be admitted.
//   - Reset forgets one key under one policy and nothing else.
//   - Decide sluice.TakeAll batches whole: every request charged, or none.
//     A store may implement TakeAll itself to do so atomically; the suite
//     then also checks that concurrent batches never over-admit.
//   - Keep keys apart: different keys, and the same key under policies of
//     different names, never share state, whatever bytes the keys and names
//     hold (including separators such as ':' and '|').
//   - Keep a limit's state under its identity (the policy's name, the
//     limit's index, the key), not its definition: a policy rebuilt under
//     the same name takes over the state. A decision (Take, TakeAll,
//     Reserve, Cancel) that finds a state written under another
//     definition carries it first, as algo.Rule.Carry and its log forms
//     do, at the decision's time, and keeps the carried state even when
//     it denies; Peek carries without writing.
//   - Reserve and Cancel as the leaky bucket as a queue: see
//     sluice.Store.Reserve and sluice.Store.Cancel. A cancelled reservation
//     gives its units back even when others are queued ahead of it.
//   - Decide calendar limits (sluice.Limit.Calendar) as package algo does:
//     windows are the calendar's periods, which a store computes from
//     the decision's time, and the state of a key lasts until the period
//     (or, for a sliding window, the next one) ends.
//   - Apply a policy's sluice.Penalty: a denial is a strike, After strikes
//     block the key for the next of Blocks (the last one capped), a blocked
//     key is denied with RetryAfter and ResetAfter up to the block's end
//     (Remaining 0, Index 0) and charged nothing, Peek reports the block,
//     strikes and offences are forgotten after Forget without a strike,
//     and Reset lifts the block. A store that returns an error wrapping
//     sluice.ErrPenaltyUnsupported for such a policy skips these cases.
//   - Keep state at least until it is back to fresh. A store may forget it
//     from then on (a TTL, a janitor): once the clock has reached the time
//     a key's state was due to be fresh, the suite never steps the clock
//     back to before that time.
//
// A subtest's name says what failed; its message gives the request, the
// clock's offset from the suite's epoch (2023-11-15 00:00:00 UTC), every
// field that differs as "got X, want Y", and both decisions in full.
//
// The suite never sleeps in real time and finishes each subtest in well
// under a second, so a store that expires state in real time, no sooner
// than the ResetAfter it reported (and at least a millisecond), passes.
// Every subtest calls the factory for a fresh store and its own clock, and
// uses policy names that no other subtest or run uses, so a factory may hand
// out views of one shared backend (such as one Redis server) as long as each
// reads time from its own clock.
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/storekit"
)

// epoch is the clock's reading when the suite creates a store: 2023-11-15
// 00:00:00 UTC, a whole number of days since the Unix epoch, so that windows
// of a second, a minute, an hour or a day start exactly there.
var epoch = time.Unix(1_700_006_400, 0).UTC()

// Options configure RunWith. The zero value is Run's configuration.
type Options struct {
	// Resolution is the finest time step the store distinguishes. The
	// suite only ever sets the clock to whole microseconds, and it accepts
	// a duration d (RetryAfter, ResetAfter, Delay) that the store reports
	// for an exact value want when want <= d < want+Resolution: a store may
	// round durations up to its resolution, never down. Default one
	// nanosecond, which demands exact durations; a store that computes in
	// microseconds, as a Redis store does, passes time.Microsecond. It must
	// be at most one microsecond and divide it.
	Resolution time.Duration
	// BatchesNotAtomic says that the store's TakeAll checks every request
	// before charging any instead of deciding a batch atomically (the
	// Redis store on a Redis Cluster, whose keys lie in different slots):
	// the suite then checks batches for their all-or-none result without
	// concurrency, and skips its concurrent test.
	BatchesNotAtomic bool
}

// Run runs the conformance suite at a resolution of one nanosecond: every
// duration the store reports must be exact. newStore must return a fresh
// store that reads the time from clk; it registers the store's cleanup with
// t.Cleanup. Run calls it once per subtest.
func Run(t *testing.T, newStore func(t *testing.T, clk *clock.Fake) sluice.Store) {
	t.Helper()
	RunWith(t, Options{}, newStore)
}

// RunWith runs the conformance suite with options; see Run.
func RunWith(t *testing.T, opts Options, newStore func(t *testing.T, clk *clock.Fake) sluice.Store) {
	t.Helper()
	if opts.Resolution == 0 {
		opts.Resolution = time.Nanosecond
	}
	if opts.Resolution < 0 || opts.Resolution > time.Microsecond || time.Microsecond%opts.Resolution != 0 {
		t.Fatalf("storetest: Resolution %v must be positive, at most 1µs, and divide 1µs", opts.Resolution)
	}
	if newStore == nil {
		t.Fatal("storetest: nil store factory")
	}
	s := &suite{res: opts.Resolution, batchesNotAtomic: opts.BatchesNotAtomic, newStore: newStore, run: fmt.Sprintf("%08x", rand.Uint32())}
	t.Run("Algorithms", s.testAlgorithms)
	t.Run("Cost", s.testCost)
	t.Run("MultiLimit", s.testMultiLimit)
	t.Run("Peek", s.testPeek)
	t.Run("Reset", s.testReset)
	t.Run("KeyIsolation", s.testKeyIsolation)
	t.Run("Expiry", s.testExpiry)
	t.Run("Reserve", s.testReserve)
	t.Run("Wait", s.testWait)
	t.Run("Concurrency", s.testConcurrency)
	t.Run("ClockBackwards", s.testClockBackwards)
	t.Run("Model", s.testModel)
	t.Run("TakeAll", s.testTakeAll)
	t.Run("Carry", s.testCarry)
	t.Run("Penalty", s.testPenalty)
	t.Run("Calendar", s.testCalendar)
}

type suite struct {
	res              time.Duration
	batchesNotAtomic bool
	newStore         func(*testing.T, *clock.Fake) sluice.Store
	run              string // tells this run's policy names from other runs'
	seq              atomic.Uint64
}

// env is one subtest's store and clock.
type env struct {
	*suite
	t     *testing.T
	clk   *clock.Fake
	store sluice.Store
}

func (s *suite) env(t *testing.T) *env {
	t.Helper()
	clk := clock.NewFake(epoch)
	st := s.newStore(t, clk)
	if st == nil {
		t.Fatal("storetest: the factory returned a nil store")
	}
	return &env{suite: s, t: t, clk: clk, store: st}
}

// policy returns a policy under a name that no other subtest or run uses.
func (e *env) policy(limits ...sluice.Limit) *sluice.Policy {
	e.t.Helper()
	tag := e.t.Name()
	if i := strings.LastIndexByte(tag, '/'); i >= 0 {
		tag = tag[i+1:]
	}
	if len(tag) > 40 {
		tag = tag[:40]
	}
	p, err := sluice.NewPolicy(fmt.Sprintf("storetest-%s-%d-%s", e.run, e.seq.Add(1), tag), limits...)
	if err != nil {
		e.t.Fatalf("storetest: NewPolicy(%v): %v", limits, err)
	}
	return p
}

// limiter returns a limiter of a policy with a fresh name.
func (e *env) limiter(limits ...sluice.Limit) *sluice.Limiter {
	e.t.Helper()
	return e.limiterOf(e.policy(limits...))
}

func (e *env) limiterOf(p *sluice.Policy) *sluice.Limiter {
	e.t.Helper()
	lim, err := sluice.NewWithPolicy(e.store, p)
	if err != nil {
		e.t.Fatalf("storetest: NewWithPolicy: %v", err)
	}
	return lim
}

// at sets the clock to the epoch plus d, a whole number of microseconds.
func (e *env) at(d time.Duration) {
	e.t.Helper()
	if d%time.Microsecond != 0 {
		e.t.Fatalf("storetest bug: clock offset %v is not a whole number of microseconds", d)
	}
	e.clk.Set(epoch.Add(d))
}

// now returns the clock's offset from the epoch, for messages.
func (e *env) now() time.Duration { return e.clk.Now().Sub(epoch) }

// ceil rounds d up to a whole number of microseconds: the earliest time the
// suite can set the clock to that is at least d away.
func ceil(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

func (e *env) take(lim *sluice.Limiter, key string, n int64) sluice.Decision {
	e.t.Helper()
	d, err := lim.AllowN(e.t.Context(), key, n)
	if err != nil {
		e.t.Fatalf("AllowN(%q, %d) at +%v: %v", key, n, e.now(), err)
	}
	return d
}

func (e *env) peek(lim *sluice.Limiter, key string) sluice.Decision {
	e.t.Helper()
	d, err := lim.Peek(e.t.Context(), key)
	if err != nil {
		e.t.Fatalf("Peek(%q) at +%v: %v", key, e.now(), err)
	}
	return d
}

func (e *env) reset(lim *sluice.Limiter, key string) {
	e.t.Helper()
	if err := lim.Reset(e.t.Context(), key); err != nil {
		e.t.Fatalf("Reset(%q) at +%v: %v", key, e.now(), err)
	}
}

func (e *env) reserve(lim *sluice.Limiter, key string, n int64, maxWait time.Duration) sluice.Reservation {
	e.t.Helper()
	r, err := lim.Reserve(e.t.Context(), key, n, maxWait)
	if err != nil {
		e.t.Fatalf("Reserve(%q, %d, %v) at +%v: %v", key, n, maxWait, e.now(), err)
	}
	return r
}

// admitted counts how many of tries requests of cost n are admitted.
func (e *env) admitted(lim *sluice.Limiter, key string, n int64, tries int) int {
	e.t.Helper()
	c := 0
	for range tries {
		if e.take(lim, key, n).Allowed {
			c++
		}
	}
	return c
}

// outcome is what the suite expects of a Decision.
type outcome struct {
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
	delay      time.Duration
	index      int
	limit      int64 // zero: the Burst of the policy's limit index (sluice.Decision.Limit)
}

func allow(remaining int64, resetAfter time.Duration) outcome {
	return outcome{allowed: true, remaining: remaining, resetAfter: resetAfter}
}

func deny(remaining int64, retryAfter, resetAfter time.Duration) outcome {
	return outcome{remaining: remaining, retryAfter: retryAfter, resetAfter: resetAfter}
}

// by sets the binding limit's index and its Burst (its Count for a
// window), which Decision.Limit reports.
func (o outcome) by(index int, limit int64) outcome {
	o.index, o.limit = index, limit
	return o
}

func (o outcome) String() string {
	s := "denied"
	if o.allowed {
		s = "allowed"
	}
	return fmt.Sprintf("%s remaining=%d retry_after=%v reset_after=%v delay=%v index=%d limit=%d",
		s, o.remaining, o.retryAfter, o.resetAfter, o.delay, o.index, o.limit)
}

func describe(d sluice.Decision) string {
	s := "denied"
	if d.Allowed {
		s = "allowed"
	}
	return fmt.Sprintf("%s remaining=%d retry_after=%v reset_after=%v delay=%v index=%d limit=%d",
		s, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, d.Index, d.Limit)
}

// within reports whether the store's duration got stands for the exact
// duration want: equal, or rounded up by less than the resolution.
func (s *suite) within(got, want time.Duration) bool {
	return want <= got && got < want+s.res
}

// check compares a decision of lim's policy with the outcome wanted and
// reports every field that differs, in the form "got X, want Y". It returns
// whether the decision matched.
func (e *env) check(what string, p *sluice.Policy, d sluice.Decision, w outcome) bool {
	e.t.Helper()
	if w.limit == 0 && w.index < p.Len() {
		w.limit = storekit.Of(p).Rule(w.index).Burst()
	}
	var diffs []string
	field := func(name string, ok bool, got, want any) {
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s: got %v, want %v", name, got, want))
		}
	}
	dur := func(name string, got, want time.Duration) {
		if !e.within(got, want) {
			if e.res > time.Nanosecond {
				diffs = append(diffs, fmt.Sprintf("%s: got %v, want %v (or up to %v more)", name, got, want, e.res-1))
			} else {
				diffs = append(diffs, fmt.Sprintf("%s: got %v, want %v", name, got, want))
			}
		}
	}
	field("Allowed", d.Allowed == w.allowed, d.Allowed, w.allowed)
	field("Remaining", d.Remaining == w.remaining, d.Remaining, w.remaining)
	dur("RetryAfter", d.RetryAfter, w.retryAfter)
	dur("ResetAfter", d.ResetAfter, w.resetAfter)
	dur("Delay", d.Delay, w.delay)
	field("Index", d.Index == w.index, d.Index, w.index)
	field("Limit", d.Limit == w.limit, d.Limit, w.limit)
	field("Time", d.Time.Equal(e.clk.Now()), d.Time, e.clk.Now())
	field("Degraded", !d.Degraded, d.Degraded, false)
	if len(diffs) == 0 {
		return true
	}
	e.t.Errorf("%s at +%v:\n\t%s\n\tgot  %s\n\twant %s", what, e.now(), strings.Join(diffs, "\n\t"), describe(d), w)
	return false
}

// same reports whether two decisions taken at the same time say the same,
// allowing each duration to differ by rounding.
func (s *suite) same(a, b sluice.Decision) bool {
	dur := func(x, y time.Duration) bool { return x-y < s.res && y-x < s.res }
	return a.Allowed == b.Allowed && a.Remaining == b.Remaining && a.Index == b.Index && a.Limit == b.Limit &&
		dur(a.RetryAfter, b.RetryAfter) && dur(a.ResetAfter, b.ResetAfter) && dur(a.Delay, b.Delay) &&
		a.Time.Equal(b.Time)
}

// op is one request in a scripted sequence.
type op uint8

const (
	take op = iota
	peek
	reset
)

// step sets the clock to at, performs op (with cost n for take) and expects
// want of the decision.
type step struct {
	at   time.Duration
	op   op
	n    int64
	want outcome
}

// script runs steps on key and stops at the first decision that differs
// from the one wanted, since the later steps build on it.
func (e *env) script(lim *sluice.Limiter, key string, steps []step) {
	e.t.Helper()
	for i, st := range steps {
		e.at(st.at)
		var d sluice.Decision
		var what string
		switch st.op {
		case take:
			what = fmt.Sprintf("step %d: AllowN(%q, %d)", i, key, st.n)
			d = e.take(lim, key, st.n)
		case peek:
			what = fmt.Sprintf("step %d: Peek(%q)", i, key)
			d = e.peek(lim, key)
		case reset:
			e.reset(lim, key)
			continue
		}
		if !e.check(what, lim.Policy(), d, st.want) {
			return
		}
	}
}

// ctx returns the subtest's context.
func (e *env) ctx() context.Context { return e.t.Context() }

// The limits the suite uses most, by algorithm.
func limit(alg sluice.Algorithm, count int64, period time.Duration) sluice.Limit {
	return sluice.Limit{Algorithm: alg, Count: count, Period: period}
}

func bucket(alg sluice.Algorithm, count int64, period time.Duration, burst int64) sluice.Limit {
	return sluice.Limit{Algorithm: alg, Count: count, Period: period, Burst: burst}
}

var (
	algorithms = []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog}
	buckets    = []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA}
	windows    = []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog}
)

const (
	ns = time.Nanosecond
	us = time.Microsecond
	ms = time.Millisecond
	s1 = time.Second
)
