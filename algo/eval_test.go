package algo_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// step is one request of an exact-time table: at t0+at, a request of cost n
// (0 peeks) and the Status it must get.
type step struct {
	at        int64 // nanoseconds after t0
	n         int64
	allowed   bool
	remaining int64
	retry     int64 // RetryAfter, ns
	reset     int64 // ResetAfter, ns
}

// run drives one fresh key of rule r through steps, charging every admitted
// request, and checks every Status. A peek and a denial must leave the state
// as it was.
func run(t *testing.T, r algo.Rule, steps []step) {
	t.Helper()
	k := newKey(&r)
	for i, s := range steps {
		before := k.st
		beforeLen := k.lg.Len()
		got := k.take(t0+s.at, s.n)
		want := algo.Status{Allowed: s.allowed, Remaining: s.remaining, RetryAfter: s.retry, ResetAfter: s.reset}
		if got != want {
			t.Errorf("%v step %d (t0%+d, n=%d):\n got %+v\nwant %+v", &r, i, s.at, s.n, got, want)
		}
		if (s.n == 0 || !got.Allowed) && k.st != before {
			t.Errorf("%v step %d (t0%+d, n=%d): state changed from %+v to %+v without admitting anything", &r, i, s.at, s.n, before, k.st)
		}
		if (s.n == 0 || !got.Allowed) && k.lg.Len() > beforeLen {
			t.Errorf("%v step %d (t0%+d, n=%d): log grew from %d to %d entries without admitting anything", &r, i, s.at, s.n, beforeLen, k.lg.Len())
		}
	}
}

// The bucket tables hold for TokenBucket and GCRA alike. With 3 per second
// the emission interval I is 1e9/3 = 333333333.33… ns; the comments give each
// value as the theoretical arrival time TAT (relative to t0) and the
// tolerance Burst×I. RetryAfter and ResetAfter are rounded up to whole ns.
func TestBucketExact(t *testing.T) {
	const I = 333333333 // floor(1e9/3), for readability of the offsets
	tables := []struct {
		name         string
		count, burst int64
		period       time.Duration
		steps        []step
	}{
		{"3/s", 3, 0, time.Second, []step{
			{0, 1, true, 2, 0, 333333334},                  // TAT = I: reset ceil(I)
			{0, 1, true, 1, 0, 666666667},                  // TAT = 2I
			{0, 1, true, 0, 0, 1_000_000_000},              // TAT = 3I = 1s: the burst is spent
			{0, 1, false, 0, 333333334, 1_000_000_000},     // 1s + I − 3I: retry ceil(I)
			{0, 0, false, 0, 333333334, 1_000_000_000},     // a peek sees the same
			{I, 1, false, 0, 1, 666666667},                 // one nanosecond early: a third of a ns short
			{I + 1, 1, true, 0, 0, 1_000_000_000},          // TAT = 4I: reset ceil(4I − I − 1) = ceil(999999999.33)
			{I + 1, 0, false, 0, 333333333, 1_000_000_000}, // 5I − 3I − (I+1) = 333333332.67
			{2 * I, 1, false, 0, 1, 666666668},             // 4I − 2I·(floor) = 666666667.33
			{2*I + 1, 1, true, 0, 0, 1_000_000_000},        // TAT = 5I
			{3*I + 1, 1, true, 0, 0, 1_000_000_000},        // now = 1s exactly: 6I − 1s = 1s = tolerance
			{3*I + 1, 1, false, 0, 333333334, 1_000_000_000},
			{4_000_000_000, 0, true, 3, 0, 0},                       // long idle: a fresh key
			{4_000_000_000, 3, true, 0, 0, 1_000_000_000},           // cost 3 at once: TAT = 5s
			{4_000_000_000 + 2*I + 1, 2, true, 0, 0, 1_000_000_000}, // 1/3 ns short of a unit, 2 fit: TAT = 5s + 2I
			// The clock steps back: admissions are never anticipated.
			{4_000_000_000 + 2*I, 1, false, 0, 333333334, 1_000_000_001},
			{4_000_000_000, 0, false, 0, 1_000_000_000, 1_666_666_667},
			{5_000_000_000 + 2*I, 0, true, 2, 0, 1}, // 2/3 ns before the bucket is full again
			{5_000_000_000 + 2*I + 1, 0, true, 3, 0, 0},
		}},
		{"3/s burst 5", 3, 5, time.Second, []step{
			{0, 0, true, 5, 0, 0},
			{0, 5, true, 0, 0, 1_666_666_667}, // TAT = 5I
			{0, 1, false, 0, 333333334, 1_666_666_667},
			{1_000_000_000, 2, true, 1, 0, 1_333_333_334}, // TAT − now = 2I; +2I = 4I <= 5I
			{1_000_000_000, 2, false, 1, 333333334, 1_333_333_334},
			{1_000_000_000, 1, true, 0, 0, 1_666_666_667},
		}},
		{"10/s burst 1", 10, 1, time.Second, []step{ // GCRA as a pacer: one every 100ms
			{0, 1, true, 0, 0, 100_000_000},
			{99_999_999, 1, false, 0, 1, 1},
			{100_000_000, 1, true, 0, 0, 100_000_000},
			{150_000_000, 0, false, 0, 50_000_000, 50_000_000},
			{300_000_000, 1, true, 0, 0, 100_000_000},
		}},
		{"1/day", 1, 0, 24 * time.Hour, []step{
			{0, 1, true, 0, 0, 86400e9},
			{86400e9 - 1, 1, false, 0, 1, 1},
			{86400e9, 1, true, 0, 0, 86400e9},
		}},
	}
	for _, alg := range []algo.Algorithm{algo.TokenBucket, algo.GCRA} {
		for _, tt := range tables {
			t.Run(alg.String()+" "+tt.name, func(t *testing.T) {
				run(t, mustCompile(t, alg, tt.count, tt.period, tt.burst), tt.steps)
			})
		}
	}
}

func TestFixedWindowExact(t *testing.T) {
	r := mustCompile(t, algo.FixedWindow, 3, time.Second, 0)
	run(t, r, []step{
		{0, 1, true, 2, 0, 1e9},
		{5e8, 2, true, 0, 0, 5e8},
		{1e9 - 1, 1, false, 0, 1, 1}, // the last nanosecond of the window
		{1e9 - 1, 0, false, 0, 1, 1},
		{1e9, 0, true, 3, 0, 0}, // the window boundary: a fresh count
		{1e9, 3, true, 0, 0, 1e9},
		{1e9 + 5, 1, false, 0, 1e9 - 5, 1e9 - 5},
		// The clock steps back into the previous window: the newer window's
		// count still applies, until that window ends.
		{1e9 - 10, 1, false, 0, 1e9 + 10, 1e9 + 10},
		{3e9 + 1, 2, true, 1, 0, 1e9 - 1}, // windows skipped
		{3e9 + 2, 2, false, 1, 1e9 - 2, 1e9 - 2},
		{3e9 + 2, 1, true, 0, 0, 1e9 - 2},
	})
}

// The weighted sliding window: estimate = prev×(P−e)/P + cur, with e the
// time elapsed in the current window, admitted while estimate+n <= Count.
func TestSlidingWindowExact(t *testing.T) {
	t.Run("4/s quarters", func(t *testing.T) {
		run(t, mustCompile(t, algo.SlidingWindow, 4, time.Second, 0), []step{
			{0, 4, true, 0, 0, 2e9},
			// Not before the next window, once 4×(P−e)/P + 1 <= 4: e >= P/4.
			{1, 1, false, 0, 1_249_999_999, 2e9 - 1},
			{1e9, 0, false, 0, 25e7, 1e9},                 // e = 0: prev counts fully
			{1_249_999_999, 1, false, 0, 1, 750_000_001},  // 4×0.750000001 = 3.000000004
			{1_250_000_000, 1, true, 0, 0, 1_750_000_000}, // 4×0.75 + 1 = 4
			{1_500_000_000, 0, true, 1, 0, 1_500_000_000}, // 4×0.5 + 1 = 3
			{1_500_000_000, 2, false, 1, 25e7, 1_500_000_000},
			{1_750_000_000, 2, true, 0, 0, 1_250_000_000}, // 4×0.25 + 1 + 2 = 4
			{2e9, 0, true, 1, 0, 1e9},                     // prev = 3, cur = 0
			{2e9, 1, true, 0, 0, 2e9},
			{3e9 + 1, 0, true, 3, 0, 1e9 - 1}, // 1×(1e9−1)/1e9 + 0: floor(3.000000001)
			{4e9, 0, true, 4, 0, 0},           // two windows on: fresh
			// The clock steps back into the previous window: the current
			// window is evaluated at its start, prev counting fully:
			// 3×(P−e)/P + 1 + 1 <= 4 from e = ceil(P/3) = 333333334.
			{2e9 - 1, 1, false, 0, 333_333_335, 2_000_000_001},
		})
	})
	t.Run("3/s thirds", func(t *testing.T) {
		run(t, mustCompile(t, algo.SlidingWindow, 3, time.Second, 0), []step{
			{1e9 - 1, 3, true, 0, 0, 1e9 + 1},
			{1_333_333_333, 1, false, 0, 1, 666_666_667},  // 3×0.666666667 = 2.000000001
			{1_333_333_334, 1, true, 0, 0, 1_666_666_666}, // 3×0.666666666 = 1.999999998
			{1_666_666_667, 0, true, 1, 0, 1_333_333_333}, // 3×0.333333333 + 1 = 1.999999999
		})
	})
}

// An entry admitted at t counts until t+Period, exclusive.
func TestSlidingLogExact(t *testing.T) {
	run(t, mustCompile(t, algo.SlidingLog, 3, time.Second, 0), []step{
		{0, 1, true, 2, 0, 1e9},
		{100, 2, true, 0, 0, 1e9},
		{200, 1, false, 0, 1e9 - 200, 1e9 - 100},
		{1e9 - 1, 0, false, 0, 1, 101},
		{1e9, 1, true, 0, 0, 1e9}, // the entry at 0 stops counting at 0+P exactly
		{1e9 + 99, 1, false, 0, 1, 1e9 - 99},
		{1e9 + 100, 2, true, 0, 0, 1e9},
		// The clock steps back: the newer entries still count.
		{1e9 + 50, 1, false, 0, 1e9 - 50, 1e9 + 50},
		{3e9, 0, true, 3, 0, 0},
		{3e9, 1, true, 2, 0, 1e9},
		// Recorded at the newest entry's time, 3e9: it expires with it.
		{3e9 - 10, 1, true, 1, 0, 1e9 + 10},
		{4e9 - 1, 0, true, 1, 0, 1},
		{4e9, 0, true, 3, 0, 0},
	})
}
