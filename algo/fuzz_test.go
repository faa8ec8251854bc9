package algo_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

func FuzzParseAlgorithm(f *testing.F) {
	for _, a := range algo.Algorithms() {
		f.Add(a.String(), uint8(a))
	}
	for _, s := range []string{"", "GCRA", "gcra ", "token-bucket", "sliding_log\x00", "Algorithm(0)", "\xff"} {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, name string, b uint8) {
		a, err := algo.ParseAlgorithm(name)
		var u algo.Algorithm
		uerr := u.UnmarshalText([]byte(name))
		if err != nil {
			if !errors.Is(err, algo.ErrUnknownAlgorithm) || a != 0 {
				t.Fatalf("ParseAlgorithm(%q) = %v, %v; want 0 and an error matching ErrUnknownAlgorithm", name, a, err)
			}
			if uerr == nil || u != 0 {
				t.Fatalf("UnmarshalText(%q) = %v, %v; want an error as ParseAlgorithm gives", name, u, uerr)
			}
		} else {
			if !a.Valid() || a.String() != name {
				t.Fatalf("ParseAlgorithm(%q) = %v (valid %v); want an algorithm named %q", name, a, a.Valid(), name)
			}
			if uerr != nil || u != a {
				t.Fatalf("UnmarshalText(%q) = %v, %v; want %v", name, u, uerr, a)
			}
		}
		// Every valid algorithm round-trips through its name and text.
		x := algo.Algorithm(b)
		text, merr := x.MarshalText()
		if !x.Valid() {
			if merr == nil {
				t.Fatalf("Algorithm(%d).MarshalText() = %q, nil; want an error", b, text)
			}
			return
		}
		if merr != nil || string(text) != x.String() {
			t.Fatalf("Algorithm(%d).MarshalText() = %q, %v; want %q", b, text, merr, x.String())
		}
		if p, err := algo.ParseAlgorithm(string(text)); err != nil || p != x {
			t.Fatalf("ParseAlgorithm(%q) = %v, %v; want %v", text, p, err, x)
		}
	})
}

// FuzzCompileEval compiles a rule from fuzzed parameters and drives one key
// with a fuzzed sequence of requests, 4 bytes each: a 16-bit gap, its scale
// and sign, and a cost. Compile must either fail with one of its sentinels
// or return a rule whose every decision is consistent: durations never
// negative, Remaining within [0, Capacity] and exactly the largest cost that
// fits, RetryAfter zero exactly when allowed and exactly the first
// nanosecond at which the same request would be admitted.
func FuzzCompileEval(f *testing.F) {
	f.Add(uint8(algo.GCRA), int64(3), int64(time.Second), int64(0), []byte{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 1, 1})
	f.Add(uint8(algo.TokenBucket), int64(10), int64(time.Second), int64(25), []byte{0, 0, 0, 255, 10, 0, 2, 3, 255, 255, 3, 0x80, 1, 0, 1, 9})
	f.Add(uint8(algo.FixedWindow), int64(5), int64(time.Minute), int64(0), []byte{255, 255, 1, 200, 1, 0, 0, 1, 2, 0, 0x81, 5})
	f.Add(uint8(algo.SlidingWindow), int64(4), int64(time.Second), int64(0), []byte{0, 0, 0, 255, 0, 64, 1, 1, 0, 64, 1, 1, 0, 128, 0x81, 2})
	f.Add(uint8(algo.SlidingLog), int64(3), int64(time.Second), int64(0), []byte{0, 0, 0, 1, 100, 0, 0, 2, 0, 255, 1, 1, 3, 0, 0x83, 1})
	f.Add(uint8(algo.GCRA), int64(algo.MaxCount), int64(algo.MaxPeriod), int64(algo.MaxCount), []byte{0, 0, 0, 255, 1, 0, 0, 1})
	f.Add(uint8(algo.SlidingWindow), int64(algo.MaxCount), int64(algo.MaxPeriod), int64(0), []byte{255, 255, 3, 255, 1, 0, 0, 255})
	f.Add(uint8(0), int64(1), int64(1), int64(0), []byte{})
	f.Fuzz(func(t *testing.T, alg uint8, count, period, burst int64, ops []byte) {
		r, err := algo.Compile(algo.Algorithm(alg), count, time.Duration(period), burst)
		if err != nil {
			if !errors.Is(err, algo.ErrInvalidRule) && !errors.Is(err, algo.ErrUnknownAlgorithm) {
				t.Fatalf("Compile(%d, %d, %d, %d): got %v, want an error matching ErrInvalidRule or ErrUnknownAlgorithm", alg, count, period, burst, err)
			}
			return
		}
		if r.Capacity() < 1 || r.Capacity() != r.Burst() || !r.Algorithm().IsBucket() && r.Capacity() != r.Count() {
			t.Fatalf("%v: got Capacity %d, Burst %d", &r, r.Capacity(), r.Burst())
		}
		if len(ops) > 4*64 {
			ops = ops[:4*64]
		}
		k := newKey(&r)
		p := int64(r.Period())
		now := t0
		for ; len(ops) >= 4; ops = ops[4:] {
			g := int64(binary.LittleEndian.Uint16(ops))
			var gap int64
			switch ops[2] & 3 {
			case 0:
				gap = g // nanoseconds
			case 1:
				gap = mulDiv(g, p, 1<<16) // fractions of the period
			case 2:
				gap = mulDiv(g, p, r.Count()) // g emission intervals
			case 3:
				gap = mulDiv(g, p, 1<<10) // up to 64 periods
			}
			if ops[2]&0x80 != 0 { // the clock steps back
				gap = -min(gap, p)
			}
			if now+gap < 1e18 || now+gap > 7e18 {
				continue
			}
			now += gap
			n := int64(ops[3]) // 0 peeks
			switch {
			case n == 255:
				n = r.Capacity()
			case n > 0:
				n = min(n, r.Capacity())
			}
			s := k.take(now, n)
			if s.Remaining < 0 || s.Remaining > r.Capacity() || s.RetryAfter < 0 || s.ResetAfter < 0 {
				t.Fatalf("%v at t0%+d, n=%d: got %+v, want Remaining in [0, %d] and no negative duration", &r, now-t0, n, s, r.Capacity())
			}
			if s.Allowed != (s.RetryAfter == 0) {
				t.Fatalf("%v at t0%+d, n=%d: got %+v, want RetryAfter zero exactly when allowed", &r, now-t0, n, s)
			}
			if !s.Allowed {
				c := max(n, 1)
				if got := k.peek(now+s.RetryAfter, c); !got.Allowed {
					t.Fatalf("%v at t0%+d, n=%d: denied with RetryAfter %d, but a request then is denied too: %+v", &r, now-t0, n, s.RetryAfter, got)
				}
				if got := k.peek(now+s.RetryAfter-1, c); got.Allowed {
					t.Fatalf("%v at t0%+d, n=%d: denied with RetryAfter %d, but a request a nanosecond earlier is admitted: %+v", &r, now-t0, n, s.RetryAfter, got)
				}
			}
			if !checkRemaining(t, &r, k, now) {
				t.FailNow()
			}
		}
	})
}

// mulDiv returns a×b/c rounded up, for a >= 0 and b, c > 0, without
// overflowing int64 in between.
func mulDiv(a, b, c int64) int64 {
	return ceilBig(bigInt(a), b, c)
}
