package algo_test

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

const day = 24 * time.Hour

// Exact tables at the edges of the valid range, where products of counts and
// periods need 128 bits and emission intervals are awkward fractions.
func TestExtremesExact(t *testing.T) {
	const P = int64(algo.MaxPeriod)
	yearEnd := P - t0%P // offset from t0 of the next window boundary of MaxPeriod
	for _, alg := range []algo.Algorithm{algo.TokenBucket, algo.GCRA} {
		t.Run(alg.String()+" 1e9/s", func(t *testing.T) {
			run(t, mustCompile(t, alg, 1e9, time.Second, 0), []step{
				{0, 1e9, true, 0, 0, 1e9},
				{0, 1, false, 0, 1, 1e9},
				{1, 1, true, 0, 0, 1e9},
				{1, 1e9, false, 0, 1e9, 1e9},
				{5e8 + 1, 0, true, 5e8, 0, 5e8},
			})
		})
		t.Run(alg.String()+" 1e9/day burst 1e9", func(t *testing.T) {
			run(t, mustCompile(t, alg, 1e9, day, 1e9), []step{ // one per 86400 ns
				{0, 1e9, true, 0, 0, 86400e9},
				{86399, 1, false, 0, 1, 86400e9 - 86399},
				{86400, 1, true, 0, 0, 86400e9},
			})
		})
		t.Run(alg.String()+" 999999937/day", func(t *testing.T) {
			const c = 999_999_937                                                     // prime: one per 86400.005443… ns
			T := func(k int64) int64 { return ceilBig(big.NewInt(k), int64(day), c) } // ceil(k×T)
			run(t, mustCompile(t, alg, c, day, 0), []step{
				{0, c, true, 0, 0, 86400e9},
				{0, 1, false, 0, T(1), 86400e9},
				{T(1) - 1, 1, false, 0, 1, 86400e9 - T(1) + 1},
				{T(1), 1, true, 0, 0, 86400e9}, // ceil(86400e9 + T − 86401)
				{T(1), 2, false, 0, T(3) - T(1), 86400e9},
				{T(3), 2, true, 0, 0, 86400e9},
				{2 * 86400e9, c - 5, true, 5, 0, T(c - 5)},
			})
		})
		t.Run(alg.String()+" MaxCount/MaxPeriod", func(t *testing.T) {
			// One unit per 31536 ns exactly.
			run(t, mustCompile(t, alg, algo.MaxCount, algo.MaxPeriod, 0), []step{
				{0, algo.MaxCount, true, 0, 0, P},
				{31535, 1, false, 0, 1, P - 31535},
				{31536, 1, true, 0, 0, P},
				{P / 2, 0, true, algo.MaxCount/2 - 1, 0, P/2 + 31536},
				{P / 2, algo.MaxCount/2 - 1, true, 0, 0, P},
				{10 * P, 0, true, algo.MaxCount, 0, 0},
			})
		})
		t.Run(alg.String()+" 1/MaxPeriod burst 50", func(t *testing.T) {
			// The longest drain Compile accepts: MaxDrain.
			run(t, mustCompile(t, alg, 1, algo.MaxPeriod, 50), []step{
				{0, 50, true, 0, 0, int64(algo.MaxDrain)},
				{P - 1, 1, false, 0, 1, 49*P + 1},
				{P, 1, true, 0, 0, 50 * P},
				{52 * P, 0, true, 50, 0, 0},
			})
		})
	}
	t.Run("fixed_window MaxCount/MaxPeriod", func(t *testing.T) {
		run(t, mustCompile(t, algo.FixedWindow, algo.MaxCount, algo.MaxPeriod, 0), []step{
			{yearEnd - 1, algo.MaxCount, true, 0, 0, 1},
			{yearEnd - 1, 1, false, 0, 1, 1},
			{yearEnd, algo.MaxCount, true, 0, 0, P}, // 2×MaxCount in two nanoseconds
		})
	})
	t.Run("sliding_window MaxCount/MaxPeriod", func(t *testing.T) {
		// MaxCount×(P−e)/P drops by one unit every P/MaxCount = 31536 ns.
		run(t, mustCompile(t, algo.SlidingWindow, algo.MaxCount, algo.MaxPeriod, 0), []step{
			{yearEnd - 1, algo.MaxCount, true, 0, 0, P + 1},
			{yearEnd, 0, false, 0, 31536, P},
			{yearEnd, algo.MaxCount, false, 0, P, P},
			{yearEnd + 31535, 1, false, 0, 1, P - 31535},
			{yearEnd + 31536, 1, true, 0, 0, 2*P - 31536},
			{yearEnd + P/2, 0, true, algo.MaxCount/2 - 1, 0, 3 * P / 2},
		})
	})
	t.Run("sliding_log MaxLogCount/MaxPeriod", func(t *testing.T) {
		run(t, mustCompile(t, algo.SlidingLog, algo.MaxLogCount, algo.MaxPeriod, 0), []step{
			{0, algo.MaxLogCount - 1, true, 1, 0, P},
			{P - 1, 2, false, 1, 1, 1},
			{P - 1, 1, true, 0, 0, P},
			{P, algo.MaxLogCount - 1, true, 0, 0, P},
		})
	})
}

// The extreme rules also agree with the reference models under random
// traffic.
func TestExtremesModel(t *testing.T) {
	t.Parallel()
	rules := []struct {
		count  int64
		period time.Duration
		burst  int64
	}{
		{1, day, 0},
		{1, day, 7},
		{1e9, time.Second, 0},
		{1e9, day, 1e9},
		{999_999_937, day, 0},
		{999_999_937, day, 1},
		{algo.MaxCount, algo.MaxPeriod, 0},
		{algo.MaxCount - 1, algo.MaxPeriod, 0},
		{algo.MaxCount, algo.MaxPeriod - 1, 0},
		{algo.MaxCount, time.Duration(algo.MaxCount), 0}, // the highest rate with the highest count
		{1, algo.MaxPeriod, 50},
		{1, 1, 0},
		{algo.MaxLogCount, algo.MaxPeriod, 0},
	}
	rng := rand.New(rand.NewPCG(*seed, 7))
	for _, alg := range algo.Algorithms() {
		for _, tt := range rules {
			r, err := algo.Compile(alg, tt.count, tt.period, tt.burst)
			if err != nil {
				continue // a burst on a window rule, or a sliding log too large
			}
			for range 3 {
				checkModel(t, rng, &r, newModel(alg, tt.count, int64(tt.period), tt.burst), 300)
			}
		}
	}
}

// No drift: a bucket rule admits exactly Burst + Count×t/Period (rounded
// down) by time t to a client that always asks again as soon as RetryAfter
// allows, whatever the costs, for simulated years.
func TestNoDrift(t *testing.T) {
	t.Parallel()
	for _, alg := range []algo.Algorithm{algo.TokenBucket, algo.GCRA} {
		for _, tt := range []struct {
			count    int64
			period   time.Duration
			burst    int64
			costs    int64 // costs are uniform in [1, costs]
			duration time.Duration
		}{
			{3, time.Second, 0, 1, 12 * time.Hour},
			{3, time.Second, 300_000, 300_000, 3 * algo.MaxPeriod},
			{7, 3 * time.Second, 2_000_000, 2_000_000, 10 * algo.MaxPeriod},
			{999_999_937, day, 0, 999_999_937, 5 * algo.MaxPeriod},
			{1e6, time.Second, 1e6, 1e6, 12 * time.Hour},
		} {
			r := mustCompile(t, alg, tt.count, tt.period, tt.burst)
			t.Run(r.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(*seed, 9))
				var (
					st       algo.State
					now      = t0
					admitted int64 // units
					requests int
				)
				n := 1 + rng.Int64N(tt.costs)
				for now < t0+int64(tt.duration) {
					if requests > 200_000 {
						t.Fatalf("more than %d requests: the test is too slow", requests)
					}
					next, s := r.Eval(st, now, n)
					if !s.Allowed {
						if s.RetryAfter <= 0 {
							t.Fatalf("at t0%+d: denied with RetryAfter %d", now-t0, s.RetryAfter)
						}
						if _, s2 := r.Eval(st, now+s.RetryAfter-1, n); s2.Allowed {
							t.Fatalf("at t0%+d: admitted a nanosecond before RetryAfter %d", now-t0, s.RetryAfter)
						}
						now += s.RetryAfter
						continue
					}
					st, admitted, requests = next, admitted+n, requests+1
					n = 1 + rng.Int64N(tt.costs)
					// The greedy client is admitted exactly when Burst +
					// Count×(now−t0)/Period first reaches what it took.
					want := t0
					if extra := admitted - r.Burst(); extra > 0 {
						want += ceilBig(big.NewInt(extra), int64(tt.period), tt.count)
					}
					if now != want {
						t.Fatalf("request %d (%d units in all) admitted at t0%+d, want t0%+d: %d ns of drift", requests, admitted, now-t0, want-t0, now-want)
					}
				}
				t.Logf("%d requests, %d units over %v", requests, admitted, time.Duration(now-t0))
			})
		}
	}
}

// Saturating traffic, a request every millisecond for 1000 s, gets exactly
// Burst + 3×1000 through a rule of 3 per second.
func TestSaturatingTraffic(t *testing.T) {
	t.Parallel()
	for _, alg := range []algo.Algorithm{algo.TokenBucket, algo.GCRA} {
		for _, burst := range []int64{0, 2, 10} {
			r := mustCompile(t, alg, 3, time.Second, burst)
			var st algo.State
			admitted := int64(0)
			for i := int64(0); i <= 1_000_000; i++ {
				next, s := r.Eval(st, t0+i*int64(time.Millisecond), 1)
				if s.Allowed {
					st, admitted = next, admitted+1
				}
			}
			if want := r.Burst() + 3*1000; admitted != want {
				t.Errorf("%v: got %d admitted in [t0, t0+1000s], want %d", &r, admitted, want)
			}
		}
	}
}

// ceilBig returns ceil(a×b/c) for a >= 0 and b, c > 0.
func ceilBig(a *big.Int, b, c int64) int64 {
	x := new(big.Int).Mul(a, big.NewInt(b))
	q, m := new(big.Int).DivMod(x, big.NewInt(c), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}
