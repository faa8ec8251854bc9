package algo_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// benchRule is a rule of 100 per second; the benchmarks send requests 7 ms
// apart, 1.4 times the rate, so that decisions mix admissions and denials as
// under load.
func benchRule(tb testing.TB, alg algo.Algorithm) algo.Rule {
	return mustCompile(tb, alg, 100, time.Second, 0)
}

const benchGap = 7 * int64(time.Millisecond)

// decider returns a function that decides one request of cost 1 at now and
// charges it if admitted, the way a store does, on one key's state.
func decider(r *algo.Rule) func(now int64) bool {
	if r.Algorithm() == algo.SlidingLog {
		var lg algo.Log
		return func(now int64) bool {
			s := r.EvalLog(&lg, now, 1)
			if s.Allowed {
				r.Record(&lg, now, 1)
			}
			return s.Allowed
		}
	}
	var st algo.State
	return func(now int64) bool {
		next, s := r.Eval(st, now, 1)
		st = next
		return s.Allowed
	}
}

func BenchmarkEval(b *testing.B) {
	for _, alg := range algo.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			r := benchRule(b, alg)
			decide := decider(&r)
			now := t0
			for range 1000 { // reach the steady state, and the log its size
				decide(now)
				now += benchGap
			}
			allowed, denied := 0, 0
			b.ReportAllocs()
			for b.Loop() {
				if decide(now) {
					allowed++
				} else {
					denied++
				}
				now += benchGap
			}
			if allowed == 0 || denied == 0 && b.N > 100 {
				b.Fatalf("%d admitted, %d denied: want a mix", allowed, denied)
			}
		})
	}
}

// Decisions must not allocate: Eval never, and EvalLog with Record once the
// log has grown to its steady size.
func TestEvalDoesNotAllocate(t *testing.T) {
	for _, alg := range algo.Algorithms() {
		r := benchRule(t, alg)
		decide := decider(&r)
		now := t0
		step := func() {
			decide(now)
			now += benchGap
		}
		for range 1000 {
			step()
		}
		if allocs := testing.AllocsPerRun(2000, step); allocs != 0 {
			t.Errorf("%v: got %v allocations per decision, want 0", &r, allocs)
		}
	}
}
