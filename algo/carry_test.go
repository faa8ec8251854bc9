package algo_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// carried is a key's state carried from one rule to another, whatever the
// two algorithms: State for the other algorithms, lg for SlidingLog.
func carry(to, from *algo.Rule, k *key, now int64) *key {
	out := newKey(to)
	switch {
	case from.Algorithm() != algo.SlidingLog && to.Algorithm() != algo.SlidingLog:
		out.st = to.Carry(from, k.st, now)
	case to.Algorithm() != algo.SlidingLog:
		out.st = to.CarryFromLog(from, &k.lg, now)
	case from.Algorithm() != algo.SlidingLog:
		to.CarryToLog(from, k.st, now, &out.lg)
	default:
		out.lg = *k.lg.Clone()
		to.CarryLog(from, &out.lg, now)
	}
	return out
}

// used returns the usage of a key under its rule at now.
func used(k *key, now int64) int64 {
	if k.r.Algorithm() == algo.SlidingLog {
		return k.r.LogUsed(&k.lg, now)
	}
	return k.r.Used(k.st, now)
}

// status evaluates a request of cost n at now against a key, changing
// nothing; unlike key.peek it reads the log itself, which a carry rewrote.
func status(k *key, now, n int64) algo.Status {
	if k.r.Algorithm() == algo.SlidingLog {
		return k.r.EvalLog(&k.lg, now, n)
	}
	_, s := k.r.Eval(k.st, now, n)
	return s
}

const (
	second = int64(time.Second)
	minute = int64(time.Minute)
	hour   = int64(time.Hour)
)

// TestUsed checks the usage of a state at exact times: whole units, a
// partly used unit counting as used, windows that are over counting none.
func TestUsed(t *testing.T) {
	for _, c := range []struct {
		name string
		alg  algo.Algorithm
		reqs [][2]int64 // (time after t0, cost)
		at   int64      // after t0
		want int64
	}{
		// 4 per hour: a unit is 15m.
		{"bucket_whole", algo.GCRA, [][2]int64{{0, 3}}, 0, 3},
		{"bucket_partial", algo.TokenBucket, [][2]int64{{0, 3}}, 10 * minute, 3}, // 35m of debt
		{"bucket_one_ns_short", algo.GCRA, [][2]int64{{0, 3}}, 15*minute - 1, 3},
		{"bucket_drained_unit", algo.GCRA, [][2]int64{{0, 3}}, 15 * minute, 2},
		{"bucket_fresh", algo.TokenBucket, [][2]int64{{0, 3}}, 45 * minute, 0},
		{"fixed_current", algo.FixedWindow, [][2]int64{{0, 3}}, hour - 1, 3},
		{"fixed_over", algo.FixedWindow, [][2]int64{{0, 3}}, hour, 0},
		// prev 3 at e = 20m: 3×40/60 = 2 exactly; at 20m+1ns a little less.
		{"sliding_weighted", algo.SlidingWindow, [][2]int64{{0, 3}}, hour + 20*minute, 2},
		{"sliding_rounded_up", algo.SlidingWindow, [][2]int64{{0, 3}}, hour + 20*minute + 1, 2},
		{"sliding_rounded_up_below", algo.SlidingWindow, [][2]int64{{0, 3}}, hour + 20*minute - 1, 3},
		{"sliding_cur_and_prev", algo.SlidingWindow, [][2]int64{{0, 2}, {hour + 30*minute, 1}}, hour + 30*minute, 2},
		{"sliding_over", algo.SlidingWindow, [][2]int64{{0, 3}}, 2 * hour, 0},
		{"log_counting", algo.SlidingLog, [][2]int64{{0, 1}, {10 * minute, 2}}, hour - 1, 3},
		{"log_first_expired", algo.SlidingLog, [][2]int64{{0, 1}, {10 * minute, 2}}, hour, 2},
		{"log_all_expired", algo.SlidingLog, [][2]int64{{0, 1}, {10 * minute, 2}}, hour + 10*minute, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := mustCompile(t, c.alg, 4, time.Hour, 0)
			k := newKey(&r)
			for _, q := range c.reqs {
				if s := k.take(t0+q[0], q[1]); !s.Allowed {
					t.Fatalf("request %v denied", q)
				}
			}
			if got := used(k, t0+c.at); got != c.want {
				t.Errorf("usage at t0+%v: got %d, want %d", time.Duration(c.at), got, c.want)
			}
		})
	}
}

// TestCarryEveryPair carries a key of every algorithm that used 3 of 4 per
// hour at t0 to every other algorithm at t0+10m: the new state is that of a
// fresh key charged the usage, 3, at t0+10m, except from one bucket
// algorithm to the other, which keeps the debt of 35m exactly.
func TestCarryEveryPair(t *testing.T) {
	now := t0 + 10*minute
	for _, from := range algo.Algorithms() {
		for _, to := range algo.Algorithms() {
			t.Run(from.String()+"_to_"+to.String(), func(t *testing.T) {
				rf, rt := mustCompile(t, from, 4, time.Hour, 0), mustCompile(t, to, 4, time.Hour, 0)
				k := newKey(&rf)
				k.take(t0, 3)
				got := carry(&rt, &rf, k, now)
				want := newKey(&rt)
				switch {
				case from == to:
					want = k
				case from.IsBucket() && to.IsBucket():
					// 35m of debt: one unit and 5m short of a second
					// after 15m + 15m, so a request of 1 fits and then
					// the key waits 5m.
					if s := status(got, now, 0); !s.Allowed || s.Remaining != 1 || s.ResetAfter != 35*minute {
						t.Errorf("a peek: got %+v, want allowed with 1 remaining and reset in 35m", s)
					}
					if s := status(got, now, 2); s.Allowed || s.RetryAfter != 5*minute {
						t.Errorf("a request of 2: got %+v, want denied for 5m", s)
					}
					return
				default:
					want.take(now, 3)
				}
				for _, n := range []int64{0, 1, 2} {
					for _, at := range []int64{now, now + 7*minute, now + 50*minute, now + 2*hour} {
						if g, w := status(got, at, n), status(want, at, n); g != w {
							t.Errorf("cost %d at t0+%v: got %+v, want %+v", n, time.Duration(at-t0), g, w)
						}
					}
				}
				if to != algo.SlidingLog && got.st != want.st {
					t.Errorf("state: got %+v, want %+v", got.st, want.st)
				}
			})
		}
	}
}

// TestCarryCases checks the special cases of carrying and the cap.
func TestCarryCases(t *testing.T) {
	type lim struct {
		alg           algo.Algorithm
		count         int64
		period        time.Duration
		burst         int64
		reqs          [][2]int64 // (time after t0, cost) under the old rule
		carryAt       int64      // after t0
		wantUsed      int64      // under the new rule at carryAt
		wantRemaining int64
		wantRetry     int64 // for a request of 1 at carryAt
	}
	for _, c := range []struct {
		name     string
		from, to lim
	}{
		{
			// Only Burst changes: the debt is kept exactly (95m), capped
			// at the new capacity of 2 units (30m).
			name: "burst_lowered",
			from: lim{alg: algo.TokenBucket, count: 4, period: time.Hour, burst: 8, reqs: [][2]int64{{0, 7}}},
			to:   lim{alg: algo.TokenBucket, count: 4, period: time.Hour, burst: 2, carryAt: 10 * minute, wantUsed: 2, wantRetry: 15 * minute},
		},
		{
			// The debt of 35m is kept, not rounded up to 45m.
			name: "burst_raised",
			from: lim{alg: algo.GCRA, count: 4, period: time.Hour, reqs: [][2]int64{{0, 3}}},
			to:   lim{alg: algo.GCRA, count: 4, period: time.Hour, burst: 10, carryAt: 10 * minute, wantUsed: 3, wantRemaining: 7},
		},
		{
			// Count raised: the usage of 3 (35m rounded up to 45m at 15m
			// a unit) becomes 3 units of 7m30s.
			name: "bucket_count_raised",
			from: lim{alg: algo.GCRA, count: 4, period: time.Hour, reqs: [][2]int64{{0, 3}}},
			to:   lim{alg: algo.GCRA, count: 8, period: time.Hour, carryAt: 10 * minute, wantUsed: 3, wantRemaining: 5},
		},
		{
			// Count lowered below the usage: capped at the new Burst.
			name: "bucket_count_lowered",
			from: lim{alg: algo.TokenBucket, count: 10, period: time.Hour, reqs: [][2]int64{{0, 8}}},
			to:   lim{alg: algo.TokenBucket, count: 4, period: time.Hour, carryAt: 10 * minute, wantUsed: 4, wantRetry: 15 * minute},
		},
		{
			// Reservations queued beyond an empty bucket (3 units
			// charged as of t0+45m: a debt of 7 units of 4 at t0) are
			// not carried beyond the new burst.
			name: "reservations_capped",
			from: lim{alg: algo.GCRA, count: 4, period: time.Hour, reqs: [][2]int64{{0, 4}, {45 * minute, 3}}},
			to:   lim{alg: algo.TokenBucket, count: 4, period: time.Hour, carryAt: 0, wantUsed: 4, wantRetry: 15 * minute},
		},
		{
			// The same period: prev 8 and cur 3 capped at 4 each.
			name: "sliding_same_period",
			from: lim{alg: algo.SlidingWindow, count: 10, period: time.Hour, reqs: [][2]int64{{0, 8}, {hour + 30*minute, 2}, {hour + 30*minute, 1}}},
			// At e = 30m: 4×30/60 + 3 = 5 used of 4; a request of 1
			// fits once 4×(P−e)/P + 3 + 1 <= 4: at the window's end.
			to: lim{alg: algo.SlidingWindow, count: 4, period: time.Hour, carryAt: hour + 30*minute, wantUsed: 5, wantRetry: 30 * minute},
		},
		{
			// Another period: one count of the usage, 4×30/60 + 3 = 5
			// rounded up and capped at 4, in the current window.
			name: "sliding_other_period",
			from: lim{alg: algo.SlidingWindow, count: 10, period: time.Hour, reqs: [][2]int64{{0, 4}, {hour + 30*minute, 3}}},
			to:   lim{alg: algo.SlidingWindow, count: 4, period: 30 * time.Minute, carryAt: hour + 30*minute, wantUsed: 4, wantRetry: 30*minute + 7*minute + 30*second},
		},
		{
			// The same period: the entries are kept even beyond the new
			// Count; nothing remains until enough of them expire.
			name: "log_same_period",
			from: lim{alg: algo.SlidingLog, count: 10, period: time.Hour, reqs: [][2]int64{{0, 5}, {20 * minute, 3}}},
			to:   lim{alg: algo.SlidingLog, count: 4, period: time.Hour, carryAt: 30 * minute, wantUsed: 8, wantRetry: 30 * minute},
		},
		{
			// Another period: one entry of the usage at now, capped.
			name: "log_other_period",
			from: lim{alg: algo.SlidingLog, count: 10, period: time.Hour, reqs: [][2]int64{{0, 5}, {20 * minute, 3}}},
			to:   lim{alg: algo.SlidingLog, count: 4, period: time.Minute, carryAt: 30 * minute, wantUsed: 4, wantRetry: minute},
		},
		{
			// A fixed window whose period grows: the windows before the
			// current one are forgotten.
			name: "fixed_period_grows",
			from: lim{alg: algo.FixedWindow, count: 4, period: time.Minute, reqs: [][2]int64{{0, 4}}},
			to:   lim{alg: algo.FixedWindow, count: 4, period: time.Hour, carryAt: minute, wantUsed: 0, wantRemaining: 4},
		},
		{
			// The same period: {T, min(A, C')} while the window is current.
			name: "fixed_lowered",
			from: lim{alg: algo.FixedWindow, count: 10, period: time.Hour, reqs: [][2]int64{{0, 8}}},
			to:   lim{alg: algo.FixedWindow, count: 4, period: time.Hour, carryAt: 59 * minute, wantUsed: 4, wantRetry: minute},
		},
		{
			// A clock that stepped back: the window of the state is ahead
			// of now and still counts.
			name: "fixed_clock_back",
			from: lim{alg: algo.FixedWindow, count: 10, period: time.Minute, reqs: [][2]int64{{hour, 8}}},
			to:   lim{alg: algo.GCRA, count: 10, period: time.Minute, carryAt: 0, wantUsed: 8, wantRemaining: 2},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			rf := mustCompile(t, c.from.alg, c.from.count, c.from.period, c.from.burst)
			rt := mustCompile(t, c.to.alg, c.to.count, c.to.period, c.to.burst)
			k := newKey(&rf)
			for _, q := range c.from.reqs {
				if s := k.take(t0+q[0], q[1]); !s.Allowed {
					t.Fatalf("request %v denied: %+v", q, s)
				}
			}
			now := t0 + c.to.carryAt
			got := carry(&rt, &rf, k, now)
			if u := used(got, now); u != c.to.wantUsed {
				t.Errorf("usage after carrying: got %d, want %d", u, c.to.wantUsed)
			}
			s := status(got, now, 1)
			if s.Allowed == (c.to.wantRetry != 0) || s.RetryAfter != c.to.wantRetry {
				t.Errorf("a request of 1: got %+v, want RetryAfter %v", s, time.Duration(c.to.wantRetry))
			}
			if p := status(got, now, 0); p.Remaining != c.to.wantRemaining {
				t.Errorf("Remaining: got %d, want %d", p.Remaining, c.to.wantRemaining)
			}
		})
	}
}

// TestCarryZeroAndEqual checks that a fresh key stays fresh under any
// change, and that carrying to an equal rule changes nothing, even a debt
// beyond the bucket (reservations).
func TestCarryZeroAndEqual(t *testing.T) {
	for _, from := range algo.Algorithms() {
		for _, to := range algo.Algorithms() {
			rf, rt := mustCompile(t, from, 4, time.Hour, 0), mustCompile(t, to, 7, time.Minute, 0)
			if got := carry(&rt, &rf, newKey(&rf), t0); got.st != (algo.State{}) || got.lg.Len() != 0 {
				t.Errorf("%v to %v: a fresh key carried to %+v with %d log entries, want fresh", &rf, &rt, got.st, got.lg.Len())
			}
		}
	}
	r := mustCompile(t, algo.GCRA, 4, time.Hour, 0)
	again := mustCompile(t, algo.GCRA, 4, time.Hour, 0)
	k := newKey(&r)
	k.take(t0, 4)
	st := k.st
	beyond := algo.State{T: k.st.T + hour, A: k.st.A} // an hour of reservations beyond the bucket
	for _, s := range []algo.State{st, beyond} {
		if got := again.Carry(&r, s, t0); got != s {
			t.Errorf("carried to an equal rule: got %+v, want %+v", got, s)
		}
	}
}

// FuzzCarry drives a key under one fuzzed rule, carries it to another at a
// fuzzed time and checks the promises of carrying: it never panics; the
// carried usage never exceeds the old usage, nor the new capacity (but for
// the special cases, whose state is kept as it was, capped field by field);
// it is at least the old usage, capped, when no special case applies;
// carrying to an equal rule changes nothing; and raising a limit (the same
// algorithm and period, Count and Burst no lower) never reduces Remaining.
func FuzzCarry(f *testing.F) {
	f.Add(uint8(algo.GCRA), int64(4), int64(time.Hour), int64(0), uint8(algo.FixedWindow), int64(2), int64(time.Minute), int64(0), []byte{0, 0, 0, 3, 0, 1, 1, 1}, uint16(100))
	f.Add(uint8(algo.SlidingWindow), int64(10), int64(time.Second), int64(0), uint8(algo.SlidingWindow), int64(20), int64(time.Second), int64(0), []byte{0, 0, 0, 8, 0, 128, 1, 2}, uint16(7))
	f.Add(uint8(algo.SlidingLog), int64(5), int64(time.Minute), int64(0), uint8(algo.TokenBucket), int64(3), int64(time.Second), int64(9), []byte{0, 0, 0, 2, 0, 64, 1, 3}, uint16(0))
	f.Add(uint8(algo.TokenBucket), int64(3), int64(time.Second), int64(9), uint8(algo.SlidingLog), int64(5), int64(time.Second), int64(0), []byte{0, 0, 0, 9}, uint16(1000))
	f.Add(uint8(algo.TokenBucket), int64(3), int64(time.Second), int64(9), uint8(algo.GCRA), int64(3), int64(time.Second), int64(20), []byte{0, 0, 0, 9}, uint16(1))
	f.Add(uint8(algo.SlidingLog), int64(5), int64(time.Minute), int64(0), uint8(algo.SlidingLog), int64(5), int64(time.Minute), int64(0), []byte{0, 0, 0, 2, 0, 64, 1, 3}, uint16(3))
	f.Add(uint8(algo.GCRA), int64(algo.MaxCount), int64(algo.MaxPeriod), int64(algo.MaxCount), uint8(algo.SlidingWindow), int64(algo.MaxCount), int64(algo.MaxPeriod), int64(0), []byte{0, 0, 0, 255}, uint16(65535))
	f.Fuzz(func(t *testing.T, fa uint8, fc, fp, fb int64, ta uint8, tc, tp, tb int64, ops []byte, gap uint16) {
		rf, err := algo.Compile(algo.Algorithm(fa), fc, time.Duration(fp), fb)
		if err != nil {
			return
		}
		rt, err := algo.Compile(algo.Algorithm(ta), tc, time.Duration(tp), tb)
		if err != nil {
			return
		}
		if len(ops) > 4*32 {
			ops = ops[:4*32]
		}
		k := newKey(&rf)
		now := t0
		for ; len(ops) >= 4; ops = ops[4:] {
			g := int64(binary.LittleEndian.Uint16(ops))
			step := mulDiv(g, int64(rf.Period()), 1<<12)
			if ops[2]&0x80 != 0 {
				step = -min(step, int64(rf.Period()))
			}
			if now+step < 1e18 || now+step > 7e18 {
				continue
			}
			now += step
			n := min(max(int64(ops[3]), 1), rf.Capacity())
			k.take(now, n)
		}
		if g := mulDiv(int64(gap), max(int64(rf.Period()), int64(rt.Period())), 1<<12); now+g <= 7e18 {
			now += g
		}
		before := used(k, now)
		got := carry(&rt, &rf, k, now)
		after := used(got, now)
		sameBucket := rf.Algorithm().IsBucket() && rt.Algorithm().IsBucket() && rf.Count() == rt.Count() && rf.Period() == rt.Period()
		samePeriod := rf.Algorithm() == rt.Algorithm() && rf.Period() == rt.Period() && (rt.Algorithm() == algo.SlidingWindow || rt.Algorithm() == algo.SlidingLog)
		equal := rt.Equal(&rf)
		switch {
		case equal:
			if got.st != k.st || (rt.Algorithm() == algo.SlidingLog && after != before) {
				t.Fatalf("%v to an equal rule: got %+v, want %+v", &rf, got.st, k.st)
			}
		case samePeriod && rt.Algorithm() == algo.SlidingLog:
			if after != before {
				t.Fatalf("%v to %v: log usage %d after carrying, want %d (entries kept)", &rf, &rt, after, before)
			}
		case samePeriod:
			if got.st.A > rt.Count() || got.st.B > rt.Count() || after > before {
				t.Fatalf("%v to %v: %+v from %+v, want counts capped at %d", &rf, &rt, got.st, k.st, rt.Count())
			}
		default:
			if after > before || after > rt.Capacity() {
				t.Fatalf("%v to %v at t0%+d: usage %d, from %d; want at most %d and %d", &rf, &rt, now-t0, after, before, before, rt.Capacity())
			}
			if !sameBucket && after != min(before, rt.Capacity()) {
				t.Fatalf("%v to %v at t0%+d: usage %d, want min(%d, %d)", &rf, &rt, now-t0, after, before, rt.Capacity())
			}
		}
		raise := rf.Algorithm() == rt.Algorithm() && rf.Period() == rt.Period() && rt.Count() >= rf.Count() && rt.Burst() >= rf.Burst()
		if raise {
			if b, a := status(k, now, 0).Remaining, status(got, now, 0).Remaining; a < b {
				t.Fatalf("%v raised to %v at t0%+d: Remaining %d, was %d", &rf, &rt, now-t0, a, b)
			}
		}
	})
}
