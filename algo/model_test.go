package algo_test

import (
	"flag"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

var seed = flag.Uint64("seed", 20261122, "seed of the random rules and traffic of the model, accuracy and extreme tests")

// The reference models below state each algorithm the way a textbook does,
// in exact rational arithmetic with math/big, sharing no code and no state
// representation with package algo: a token bucket holds a rational number
// of tokens, GCRA a rational theoretical arrival time, the window
// algorithms a count per aligned window, the sliding log every admitted
// request. Each answers with the Status package algo documents.
type model interface {
	// decide returns the status of a request of cost n (0 peeks) at now,
	// changing nothing.
	decide(now, n int64) algo.Status
	// commit charges an admitted request of cost n >= 1 at now.
	commit(now, n int64)
}

// bucketModel is a token bucket with a rational token count, refilled
// continuously at Count/Period tokens per nanosecond up to Burst. A time
// earlier than the last update (a reservation charged in the future, or a
// clock that stepped back) sees the tokens of that earlier time: fewer, never
// more.
type bucketModel struct {
	count, period, burst int64
	fresh                bool
	tokens               *big.Rat // at last
	last                 int64
}

func newBucketModel(count, period, burst int64) *bucketModel {
	return &bucketModel{count: count, period: period, burst: burst, fresh: true}
}

func (b *bucketModel) rate() *big.Rat { return big.NewRat(b.count, b.period) }

func (b *bucketModel) at(now int64) *big.Rat {
	full := ratInt(b.burst)
	if b.fresh {
		return full
	}
	tk := new(big.Rat).Mul(b.rate(), ratInt(now-b.last))
	tk.Add(tk, b.tokens)
	if tk.Cmp(full) > 0 {
		return full
	}
	return tk
}

func (b *bucketModel) decide(now, n int64) algo.Status {
	tk, c := b.at(now), max(n, 1)
	s := algo.Status{Allowed: tk.Cmp(ratInt(c)) >= 0}
	after := tk
	if s.Allowed && n > 0 {
		after = new(big.Rat).Sub(tk, ratInt(n))
	}
	if !s.Allowed {
		// (c − tokens) / rate, rounded up
		s.RetryAfter = ceilRat(new(big.Rat).Quo(new(big.Rat).Sub(ratInt(c), tk), b.rate()))
	}
	s.Remaining = max(floorRat(after), 0)
	s.ResetAfter = ceilRat(new(big.Rat).Quo(new(big.Rat).Sub(ratInt(b.burst), after), b.rate()))
	return s
}

func (b *bucketModel) commit(now, n int64) {
	b.tokens = new(big.Rat).Sub(b.at(now), ratInt(n))
	b.last, b.fresh = now, false
}

// refund gives n tokens back at now, never beyond Burst.
func (b *bucketModel) refund(now, n int64) {
	tk := new(big.Rat).Add(b.at(now), ratInt(n))
	if tk.Cmp(ratInt(b.burst)) > 0 {
		tk = ratInt(b.burst)
	}
	b.tokens, b.last, b.fresh = tk, now, false
}

// gcraModel is the generic cell rate algorithm as in ITU-T I.371, with a
// rational emission interval T = Period/Count and tolerance Burst×T: a
// request of n cells at now is conforming when max(TAT, now) + n×T − now <=
// Burst×T.
type gcraModel struct {
	count int64
	t     *big.Rat // emission interval
	tau   *big.Rat // tolerance
	tat   *big.Rat // nil for a fresh key
}

func newGCRAModel(count, period, burst int64) *gcraModel {
	t := big.NewRat(period, count)
	return &gcraModel{count: count, t: t, tau: new(big.Rat).Mul(t, ratInt(burst))}
}

func (g *gcraModel) base(now int64) *big.Rat {
	if g.tat == nil || g.tat.Cmp(ratInt(now)) < 0 {
		return ratInt(now)
	}
	return g.tat
}

func (g *gcraModel) decide(now, n int64) algo.Status {
	base, c := g.base(now), max(n, 1)
	ahead := new(big.Rat).Sub(new(big.Rat).Add(base, new(big.Rat).Mul(ratInt(c), g.t)), ratInt(now))
	s := algo.Status{Allowed: ahead.Cmp(g.tau) <= 0}
	after := base
	if s.Allowed && n > 0 {
		after = new(big.Rat).Add(base, new(big.Rat).Mul(ratInt(n), g.t))
	}
	if !s.Allowed {
		s.RetryAfter = ceilRat(new(big.Rat).Sub(ahead, g.tau))
	}
	debt := new(big.Rat).Sub(after, ratInt(now))
	s.Remaining = max(floorRat(new(big.Rat).Quo(new(big.Rat).Sub(g.tau, debt), g.t)), 0)
	s.ResetAfter = ceilRat(debt)
	return s
}

func (g *gcraModel) commit(now, n int64) {
	g.tat = new(big.Rat).Add(g.base(now), new(big.Rat).Mul(ratInt(n), g.t))
}

func (g *gcraModel) refund(now, n int64) {
	if g.tat == nil {
		return
	}
	g.tat = new(big.Rat).Sub(g.tat, new(big.Rat).Mul(ratInt(n), g.t))
	if g.tat.Cmp(ratInt(now)) < 0 {
		g.tat = ratInt(now)
	}
}

// windowModel keeps a count per window of Period aligned to the Unix epoch.
// A time in a window earlier than the newest window charged (a clock that
// stepped back) is taken as the start of that newest window.
type windowModel struct {
	sliding       bool
	count, period int64
	counts        map[int64]int64
	newest        int64 // start of the newest window charged
	charged       bool
}

func newWindowModel(sliding bool, count, period int64) *windowModel {
	return &windowModel{sliding: sliding, count: count, period: period, counts: map[int64]int64{}}
}

// window returns the start of the window that applies at now and the time
// elapsed in it.
func (w *windowModel) window(now int64) (start, elapsed int64) {
	start = now - now%w.period
	if w.charged && start < w.newest {
		return w.newest, 0
	}
	return start, now - start
}

// used returns the units counted at now, plus extra, times Period: the
// current window's count, and for the sliding window the previous window's
// count weighted by the part of it that the sliding window still covers.
func (w *windowModel) used(now, extra int64) *big.Int {
	start, e := w.window(now)
	u := bigInt(w.counts[start] + extra)
	u.Mul(u, bigInt(w.period))
	if w.sliding {
		prev := bigInt(w.counts[start-w.period])
		u.Add(u, prev.Mul(prev, bigInt(w.period-e)))
	}
	return u
}

func (w *windowModel) fits(now, c int64) bool {
	limit := new(big.Int).Mul(bigInt(w.count), bigInt(w.period))
	return w.used(now, c).Cmp(limit) <= 0
}

func (w *windowModel) decide(now, n int64) algo.Status {
	c := max(n, 1)
	s := algo.Status{Allowed: w.fits(now, c)}
	extra := int64(0)
	if s.Allowed {
		extra = n
	}
	if !s.Allowed {
		// The smallest wait after which the request fits: the estimate
		// never grows while nothing is admitted, so fitting is monotonic in
		// time and a binary search finds the first nanosecond.
		hi := int64(1)
		for !w.fits(now+hi, c) {
			hi *= 2
		}
		lo := hi / 2 // does not fit (or is 0, which does not either)
		for hi-lo > 1 {
			if mid := lo + (hi-lo)/2; w.fits(now+mid, c) {
				hi = mid
			} else {
				lo = mid
			}
		}
		s.RetryAfter = hi
	}
	limit := new(big.Int).Mul(bigInt(w.count), bigInt(w.period))
	left := limit.Sub(limit, w.used(now, extra))
	if left.Sign() > 0 {
		s.Remaining = left.Quo(left, bigInt(w.period)).Int64()
	}
	// Fresh again once the newest window with a count no longer counts:
	// at its end for a fixed window, a window later for a sliding one.
	start, _ := w.window(now)
	lasts := int64(1)
	if w.sliding {
		lasts = 2
	}
	for _, ws := range []int64{start, start - w.period} {
		if ws == start && w.counts[ws]+extra > 0 || ws != start && w.sliding && w.counts[ws] > 0 {
			s.ResetAfter = ws + lasts*w.period - now
			break
		}
	}
	return s
}

func (w *windowModel) commit(now, n int64) {
	start, _ := w.window(now)
	w.counts[start] += n
	w.newest, w.charged = max(w.newest, start), true
}

// logModel keeps every admitted request; one admitted at t counts while
// now < t+Period. As Record documents, a request admitted at a time before
// the newest one (a clock that stepped back) is kept at the newest one's
// time, and requests that no longer count are forgotten when one is
// admitted.
type logModel struct {
	count, period int64
	entries       []logEntry // in time order
}

func (l *logModel) decide(now, n int64) algo.Status {
	var counting []logEntry
	u := int64(0)
	for _, e := range l.entries {
		if e.at > now-l.period {
			counting = append(counting, e)
			u += e.n
		}
	}
	c := max(n, 1)
	s := algo.Status{Allowed: u+c <= l.count}
	after := u
	if s.Allowed {
		after += n
	} else {
		freed := int64(0)
		for _, e := range counting { // oldest first
			if freed += e.n; u-freed+c <= l.count {
				s.RetryAfter = e.at + l.period - now
				break
			}
		}
	}
	s.Remaining = l.count - after
	if after > 0 {
		newest := now
		if len(counting) > 0 {
			newest = counting[len(counting)-1].at
			if s.Allowed && n > 0 {
				newest = max(newest, now)
			}
		}
		s.ResetAfter = newest + l.period - now
	}
	return s
}

func (l *logModel) commit(now, n int64) {
	var kept []logEntry
	for _, e := range l.entries {
		if e.at > now-l.period {
			kept = append(kept, e)
		}
	}
	at := now
	if len(kept) > 0 {
		at = max(at, kept[len(kept)-1].at)
	}
	l.entries = append(kept, logEntry{at, n})
}

func newModel(alg algo.Algorithm, count, period, burst int64) model {
	if burst == 0 {
		burst = count
	}
	switch alg {
	case algo.TokenBucket:
		return newBucketModel(count, period, burst)
	case algo.GCRA:
		return newGCRAModel(count, period, burst)
	case algo.FixedWindow:
		return newWindowModel(false, count, period)
	case algo.SlidingWindow:
		return newWindowModel(true, count, period)
	case algo.SlidingLog:
		return &logModel{count: count, period: period}
	}
	panic("no model for " + alg.String())
}

func ratInt(x int64) *big.Rat { return new(big.Rat).SetInt64(x) }
func bigInt(x int64) *big.Int { return big.NewInt(x) }

// floorRat and ceilRat round x to an integer; results beyond int64 saturate,
// as package algo documents for its durations.
func floorRat(x *big.Rat) int64 {
	q := new(big.Int).Div(x.Num(), x.Denom()) // Euclidean: floor for a positive denominator
	return satInt64(q)
}

func ceilRat(x *big.Rat) int64 {
	q, m := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return satInt64(q)
}

func satInt64(q *big.Int) int64 {
	if !q.IsInt64() {
		if q.Sign() > 0 {
			return 1<<63 - 1
		}
		return -1 << 63
	}
	return q.Int64()
}

// Awkward periods: primes, off-by-one values around round ones, the bounds.
var specialPeriods = []time.Duration{
	1, 2, 3, 7, 1000, 999_983, time.Millisecond + 1, time.Second, time.Second - 1, time.Second + 7,
	999_999_937, 7 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 24*time.Hour - 1,
	30 * 24 * time.Hour, algo.MaxPeriod - 1, algo.MaxPeriod,
}

var specialCounts = []int64{1, 2, 3, 7, 10, 60, 97, 1000, 65_537, 999_983, 1_000_000}

// logUniform returns a value in [lo, hi] whose logarithm is uniform.
// Floating point only shapes the random traffic; no result is checked with it.
func logUniform(rng *rand.Rand, lo, hi int64) int64 {
	v := int64(math.Exp(math.Log(float64(lo)) + rng.Float64()*(math.Log(float64(hi))-math.Log(float64(lo)))))
	return min(max(v, lo), hi)
}

// randomRule returns a valid rule of alg with a random count, period and,
// for the bucket algorithms, burst.
func randomRule(rng *rand.Rand, alg algo.Algorithm) (r algo.Rule, count int64, period time.Duration, burst int64) {
	maxCount := int64(1_000_000)
	if alg == algo.SlidingLog {
		maxCount = algo.MaxLogCount
	}
	for {
		period = time.Duration(logUniform(rng, 1, int64(algo.MaxPeriod)))
		if rng.IntN(3) == 0 {
			period = specialPeriods[rng.IntN(len(specialPeriods))]
		}
		count = logUniform(rng, 1, maxCount)
		if rng.IntN(3) == 0 {
			count = specialCounts[rng.IntN(len(specialCounts))]
		}
		if count > int64(period) { // more than MaxRate: keep the period, pick a count that fits
			count = 1 + rng.Int64N(int64(period))
		}
		burst = 0
		if alg.IsBucket() && rng.IntN(2) == 0 {
			burst = logUniform(rng, 1, 10*count)
		}
		var err error
		if r, err = algo.Compile(alg, count, period, burst); err == nil {
			return r, count, period, burst
		}
	}
}

// randomCost returns a cost in [0, capacity]: mostly small, sometimes the
// whole capacity, sometimes 0 (a peek).
func randomCost(rng *rand.Rand, capacity int64) int64 {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1, 2, 3:
		return 1
	case 4:
		return capacity
	case 5, 6:
		return 1 + rng.Int64N(capacity)
	}
	return 1 + rng.Int64N(max(capacity/8, 1))
}

// randomGap returns the time to the next request: often none, often about
// the time the rule takes to refill cost units, sometimes landing exactly
// on, or a nanosecond either side of, a window boundary, sometimes periods
// later.
func randomGap(rng *rand.Rand, r *algo.Rule, now, cost int64) int64 {
	period := int64(r.Period())
	perUnit := float64(period) / float64(r.Count())
	switch rng.IntN(20) {
	case 0, 1, 2:
		return 0
	case 3:
		return 1 + rng.Int64N(3)
	case 4, 5:
		return period - now%period + rng.Int64N(3) - 1 // around the next window boundary
	case 6:
		return period
	case 7, 8:
		return rng.Int64N(period) + 1
	case 9:
		return period + rng.Int64N(2*period)
	}
	return int64(rng.Float64() * 2 * perUnit * float64(max(cost, 1)))
}

// history keeps the last operations of a run for failure messages.
type history []string

func (h *history) add(format string, args ...any) {
	*h = append(*h, fmt.Sprintf(format, args...))
	if len(*h) > 12 {
		*h = (*h)[1:]
	}
}

func (h history) String() string { return strings.Join(h, "; ") }

// TestModel compares every decision of package algo, for random rules and
// random traffic, with the reference model of its algorithm, and checks
// properties that bind the status to the decisions it predicts.
func TestModel(t *testing.T) {
	t.Parallel()
	rules, steps := 200, 250
	if testing.Short() {
		rules = 40
	}
	for _, alg := range algo.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(*seed, uint64(alg)))
			failures := 0
			for i := range rules {
				r, count, period, burst := randomRule(rng, alg)
				if !checkModel(t, rng, &r, newModel(alg, count, int64(period), burst), steps) {
					t.Logf("rule %d of seed %d (run with -seed %d to reproduce)", i, *seed, *seed)
					if failures++; failures == 3 {
						t.Fatal("too many failures")
					}
				}
			}
		})
	}
}

// checkModel drives r and m with the same random traffic and reports
// whether they agreed throughout. Time goes backwards now and then (a clock
// that stepped back).
func checkModel(t *testing.T, rng *rand.Rand, r *algo.Rule, m model, steps int) bool {
	t.Helper()
	k := newKey(r)
	period := int64(r.Period())
	start := int64(1e18) + rng.Int64N(5e17)
	now := start
	var h history
	for range steps {
		n := randomCost(rng, r.Capacity())
		gap := randomGap(rng, r, now, n)
		if rng.IntN(20) == 0 {
			gap = -min(rng.Int64N(period)+1, now-start)
		}
		if now+gap > 6e18 {
			break
		}
		now += gap
		h.add("t%+d n=%d", now-start, n)
		want := m.decide(now, n)
		wait := int64(-1)
		if r.Algorithm().IsBucket() && n > 0 {
			wait = r.Wait(k.st, now, n)
		}
		if !checkTimes(t, r, k, now) {
			t.Errorf("%v at t%+d; history: %v", r, now-start, h)
			return false
		}
		got := k.take(now, n)
		if got != want {
			t.Errorf("%v at t%+d, n=%d:\n got %+v\nwant %+v\nhistory: %v", r, now-start, n, got, want, h)
			return false
		}
		if wait >= 0 && wait != got.RetryAfter {
			t.Errorf("%v at t%+d: Wait(n=%d) = %d, want the RetryAfter of Eval, %d; history: %v", r, now-start, n, wait, got.RetryAfter, h)
			return false
		}
		if got.Allowed && n > 0 {
			m.commit(now, n)
		}
		if !checkRemaining(t, r, k, now) {
			t.Errorf("%v at t%+d; history: %v", r, now-start, h)
			return false
		}
	}
	return true
}

// checkRemaining checks that the Remaining of a peek is exactly the largest
// cost admitted now, and that a peek is allowed exactly when a unit remains.
func checkRemaining(t *testing.T, r *algo.Rule, k *key, now int64) bool {
	t.Helper()
	s := k.peek(now, 0)
	if s.Allowed != (s.Remaining >= 1) {
		t.Errorf("peek: got Allowed %v with Remaining %d, want Allowed exactly when Remaining >= 1", s.Allowed, s.Remaining)
		return false
	}
	if s.Remaining >= 1 {
		if !k.peek(now, s.Remaining).Allowed {
			t.Errorf("Remaining = %d, but a request of cost %d is denied", s.Remaining, s.Remaining)
			return false
		}
	}
	if s.Remaining < r.Capacity() {
		if c := s.Remaining + 1; k.peek(now, c).Allowed {
			t.Errorf("Remaining = %d, but a request of cost %d is admitted", s.Remaining, c)
			return false
		}
	}
	return true
}

// checkTimes checks, for the key's state at now, that a clock stepping back
// never admits more, and that Expiry (LogExpiry) is the first time at which
// the state decides like a fresh key.
func checkTimes(t *testing.T, r *algo.Rule, k *key, now int64) bool {
	t.Helper()
	period := int64(r.Period())
	for _, back := range []int64{1, period / 3, period} {
		for _, c := range []int64{0, 1, r.Capacity()} {
			early, late := k.peek(now-back, c), k.peek(now, c)
			// Remaining counts after an admitted request: compare it for peeks.
			if early.Allowed && !late.Allowed || c == 0 && early.Remaining > late.Remaining {
				t.Errorf("cost %d: %d ns earlier got %+v, later got %+v: the earlier time admits more", c, back, early, late)
				return false
			}
		}
	}
	var exp int64
	if r.Algorithm() == algo.SlidingLog {
		exp = r.LogExpiry(&k.lg, now)
	} else {
		exp = r.Expiry(k.st, now)
	}
	if exp < now {
		t.Errorf("expiry %d ns before now", now-exp)
		return false
	}
	fresh := newKey(r)
	for _, c := range []int64{0, 1, r.Capacity()} {
		if got, want := k.peek(exp, c), fresh.peek(exp, c); got != want {
			t.Errorf("at the expiry, now%+d, cost %d: got %+v, want the status of a fresh key, %+v", exp-now, c, got, want)
			return false
		}
		if r.Algorithm() != algo.SlidingLog {
			got, _ := r.Eval(k.st, exp, c)
			want, _ := r.Eval(algo.State{}, exp, c)
			if c > 0 && got != want {
				t.Errorf("at the expiry, now%+d, cost %d: got state %+v, want the state of a fresh key, %+v", exp-now, c, got, want)
				return false
			}
		}
	}
	if exp > now {
		if got := k.peek(exp-1, 0); got == fresh.peek(exp-1, 0) {
			t.Errorf("a nanosecond before the expiry, now%+d, the key already looks fresh (%+v): the expiry is late", exp-now, got)
			return false
		}
	}
	return true
}
