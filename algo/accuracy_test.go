package algo_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// The accuracy tests drive each algorithm with simulated time (int64
// nanoseconds, no clock), record the time and cost of every admitted
// request, and measure the most units admitted in any window of one Period:
// a sliding maximum over all windows [a, a+Period), not only the aligned
// ones. Each algorithm must keep its documented bound:
//
//	sliding_log           at most Count, exactly
//	token_bucket, gcra    at most Burst + floor(Count×(Period−1ns)/Period): the burst and
//	                      what refills before the window ends
//	fixed_window          at most 2×Count, and Count in every aligned window
//	sliding_window        less than 2×Count, Count in every aligned window,
//	                      and close to Count for random traffic
//
// The measured numbers are logged, one line per algorithm and scenario, for
// docs/algorithms.md: go test -run TestAccuracy -v ./algo

// admission is an admitted request.
type admission struct{ at, n int64 }

// maxInWindow returns the most units admitted in any half-open window
// [a, a+length). adm must be in time order. The maximum is reached by a
// window that starts at an admission, so only those are tried.
func maxInWindow(adm []admission, length int64) int64 {
	best, sum, j := int64(0), int64(0), 0
	for i := range adm {
		for j < len(adm) && adm[j].at < adm[i].at+length {
			sum += adm[j].n
			j++
		}
		best = max(best, sum)
		sum -= adm[i].n
	}
	return best
}

// maxAligned returns the most units admitted in one window aligned to the
// Unix epoch.
func maxAligned(adm []admission, period int64) int64 {
	per := map[int64]int64{}
	best := int64(0)
	for _, a := range adm {
		w := a.at - a.at%period
		per[w] += a.n
		best = max(best, per[w])
	}
	return best
}

// The sliding maximum itself must be right for the bounds to mean anything:
// compare it with a brute force over every possible window start.
func TestMaxInWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(*seed, 11))
	for range 200 {
		var adm []admission
		at := int64(0)
		for range rng.IntN(30) {
			at += rng.Int64N(5)
			adm = append(adm, admission{at, 1 + rng.Int64N(3)})
		}
		length := 1 + rng.Int64N(10)
		want := int64(0)
		for a := int64(-10); a <= at; a++ {
			sum := int64(0)
			for _, x := range adm {
				if x.at >= a && x.at < a+length {
					sum += x.n
				}
			}
			want = max(want, sum)
		}
		if got := maxInWindow(adm, length); got != want {
			t.Fatalf("maxInWindow(%v, %d) = %d, want %d", adm, length, got, want)
		}
	}
}

// sim drives one key of a rule with simulated time.
type sim struct {
	t   *testing.T
	r   *algo.Rule
	k   *key
	adm []admission
}

func newSim(t *testing.T, r *algo.Rule) *sim { return &sim{t: t, r: r, k: newKey(r)} }

// at makes a request of cost n at now and records it if admitted.
func (s *sim) at(now, n int64) algo.Status {
	st := s.k.take(now, n)
	if st.Allowed {
		s.adm = append(s.adm, admission{now, n})
	}
	return st
}

// greedy is the attacker who sends a request of cost n at every nanosecond
// at which it could be admitted, from `from` until `until`: again at once
// after each admission, and after a denial exactly RetryAfter later, having
// checked that nothing would be admitted a nanosecond earlier.
func (s *sim) greedy(from, until, n int64) {
	s.t.Helper()
	now := from
	for now < until {
		st := s.at(now, n)
		if st.Allowed {
			continue
		}
		if st.RetryAfter <= 0 {
			s.t.Fatalf("%v: denied at %d with RetryAfter %d", s.r, now, st.RetryAfter)
		}
		if st.RetryAfter > 1 && s.k.peek(now+st.RetryAfter-1, n).Allowed {
			s.t.Fatalf("%v: at %d a request %d ns later, before RetryAfter %d, is admitted", s.r, now, st.RetryAfter-1, st.RetryAfter)
		}
		now += st.RetryAfter
	}
}

// poisson sends requests of cost 1 (or uniform in [1, maxCost]) with
// exponential gaps, at mult times the rule's rate, for the given number of
// periods.
func (s *sim) poisson(rng *rand.Rand, from int64, mult float64, periods int, maxCost int64) int64 {
	meanCost := float64(1+maxCost) / 2
	meanGap := float64(s.r.Period()) / float64(s.r.Count()) * meanCost / mult
	until := from + int64(periods)*int64(s.r.Period())
	now := from
	for now < until {
		s.at(now, 1+rng.Int64N(maxCost))
		now += int64(rng.ExpFloat64() * meanGap)
	}
	return now
}

// A scenario is a traffic pattern, played from a window-aligned start.
type scenario struct {
	name string
	play func(s *sim, rng *rand.Rand, start int64)
}

func scenarios() []scenario {
	var sc []scenario
	for _, mult := range []float64{0.5, 1, 2, 10} {
		sc = append(sc, scenario{fmt.Sprintf("poisson %gx", mult), func(s *sim, rng *rand.Rand, start int64) {
			s.poisson(rng, start, mult, 200, 1)
		}})
	}
	sc = append(sc,
		scenario{"poisson 3x costs 1-9", func(s *sim, rng *rand.Rand, start int64) {
			s.poisson(rng, start, 3, 200, min(9, s.r.Capacity()))
		}},
		scenario{"on-off bursts", func(s *sim, rng *rand.Rand, start int64) {
			// Quiet stretches and floods at 20x the rate, of random lengths.
			p, now := int64(s.r.Period()), start
			for range 60 {
				now += rng.Int64N(2 * p)
				now = s.poisson(rng, now, 20, 1, 1)
			}
		}},
		scenario{"greedy", func(s *sim, rng *rand.Rand, start int64) {
			s.greedy(start, start+50*int64(s.r.Period()), 1)
		}},
		scenario{"boundary attack", func(s *sim, rng *rand.Rand, start int64) {
			// Count requests at the last nanosecond of a window and Count
			// more at the first nanosecond of the next, every third window.
			p, c := int64(s.r.Period()), s.r.Count()
			for w := start; w < start+150*p; w += 3 * p {
				for range c {
					s.at(w+p-1, 1)
				}
				for range c {
					s.at(w+p, 1)
				}
			}
		}},
		scenario{"boundary then greedy", func(s *sim, rng *rand.Rand, start int64) {
			// Count requests at the very end of a window, then the greedy
			// attacker through the next two windows; then a rest.
			p, c := int64(s.r.Period()), s.r.Count()
			for w := start; w < start+100*p; w += 5 * p {
				for range c {
					s.at(w+p-1, 1)
				}
				s.greedy(w+p, w+3*p, 1)
			}
		}},
		scenario{"greedy late in each window", func(s *sim, rng *rand.Rand, start int64) {
			// The greedy attacker active only in the last fifth of every
			// window and the first fifth of the next.
			p := int64(s.r.Period())
			for w := start; w < start+50*p; w += p {
				s.greedy(w+4*p/5, w+6*p/5, 1)
			}
		}},
	)
	return sc
}

func TestAccuracy(t *testing.T) {
	t.Parallel()
	rules := []struct {
		alg    algo.Algorithm
		count  int64
		period time.Duration
		burst  int64
	}{}
	for _, alg := range algo.Algorithms() {
		rules = append(rules,
			struct {
				alg    algo.Algorithm
				count  int64
				period time.Duration
				burst  int64
			}{alg, 100, time.Minute, 0},
			struct {
				alg    algo.Algorithm
				count  int64
				period time.Duration
				burst  int64
			}{alg, 7, time.Second, 0})
		if alg.IsBucket() {
			rules = append(rules, struct {
				alg    algo.Algorithm
				count  int64
				period time.Duration
				burst  int64
			}{alg, 100, time.Minute, 10})
		}
	}
	for _, rule := range rules {
		r := mustCompile(t, rule.alg, rule.count, rule.period, rule.burst)
		t.Run(r.String(), func(t *testing.T) {
			p, c := int64(r.Period()), r.Count()
			worst := 0.0
			for i, sc := range scenarios() {
				rng := rand.New(rand.NewPCG(*seed, uint64(i)))
				s := newSim(t, &r)
				start := t0 - t0%p + p
				sc.play(s, rng, start)
				if !slices.IsSortedFunc(s.adm, func(a, b admission) int { return int(a.at - b.at) }) {
					t.Fatalf("%s: admissions out of time order", sc.name)
				}
				got := maxInWindow(s.adm, p)
				ratio := float64(got) / float64(c)
				worst = max(worst, ratio)
				t.Logf("%-26s %-22s max %4d in any %v window = %.2fx limit (%d admitted)", r.String(), sc.name+":", got, r.Period(), ratio, len(s.adm))
				checkBound(t, &r, sc.name, s.adm)
			}
			if r.Algorithm() == algo.SlidingWindow && worst >= 2 {
				t.Errorf("worst ratio %.4f, want below 2", worst)
			}
		})
	}
}

// checkBound checks the documented bound of r's algorithm on the admissions
// of one scenario, and that the adversarial scenarios reach it.
func checkBound(t *testing.T, r *algo.Rule, scenario string, adm []admission) {
	t.Helper()
	p, c := int64(r.Period()), r.Count()
	got := maxInWindow(adm, p)
	switch r.Algorithm() {
	case algo.SlidingLog:
		if got > c {
			t.Errorf("%s: %d admitted in one Period, want at most Count = %d", scenario, got, c)
		}
		if scenario == "greedy" && got != c {
			t.Errorf("%s: %d admitted at most in one Period, want the greedy attacker to reach Count = %d", scenario, got, c)
		}
	case algo.TokenBucket, algo.GCRA:
		// Over any window of length L the bucket admits at most its Burst
		// plus what refills in L−1 ns; checked for several L.
		for _, length := range []int64{1, p / 10, p, 3 * p} {
			exact := r.Burst() + (c*(length-1))/p // floor(Count×(L−1)/Period); no overflow at these sizes
			got := maxInWindow(adm, length)
			if got > exact {
				t.Errorf("%s: %d admitted in a window of %v, want at most Burst + floor(Count×(L−1ns)/Period) = %d", scenario, got, time.Duration(length), exact)
			}
			if scenario == "greedy" && got != exact {
				t.Errorf("%s: the greedy attacker got at most %d in a window of %v, want it to reach the bound %d exactly", scenario, got, time.Duration(length), exact)
			}
		}
	case algo.FixedWindow, algo.SlidingWindow:
		if a := maxAligned(adm, p); a > c {
			t.Errorf("%s: %d admitted in one aligned window, want at most Count = %d", scenario, a, c)
		}
		if got > 2*c || r.Algorithm() == algo.SlidingWindow && got >= 2*c {
			t.Errorf("%s: %d admitted in one Period, want below 2×Count = %d", scenario, got, 2*c)
		}
		if r.Algorithm() == algo.FixedWindow && scenario == "boundary attack" && got != 2*c {
			t.Errorf("%s: the attack got at most %d in one Period, want 2×Count = %d: the bound is reached", scenario, got, 2*c)
		}
		// The sliding window admits at most Count − prev×(P−e)/P in the
		// current window by elapsed time e, so a window [x, x+P) holds at
		// most Count + prev×x/P < 2×Count: 2×Count − 1 at most, which the
		// attacker who fills a window at its very end and then stays greedy
		// reaches.
		if r.Algorithm() == algo.SlidingWindow && scenario == "boundary then greedy" && got != 2*c-1 {
			t.Errorf("%s: the attack got at most %d in one Period, want 2×Count − 1 = %d", scenario, got, 2*c-1)
		}
		// For random traffic above the limit, the estimate is close to the
		// truth: within a few percent of Count.
		if r.Algorithm() == algo.SlidingWindow && c >= 100 && (scenario == "poisson 2x" || scenario == "poisson 10x") && got > c*108/100 {
			t.Errorf("%s: %d admitted in one Period, want at most 1.08×Count = %d", scenario, got, c*108/100)
		}
	}
}
