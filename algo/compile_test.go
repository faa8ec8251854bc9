package algo_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

func TestCompileRejects(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name   string
		alg    algo.Algorithm
		count  int64
		period time.Duration
		burst  int64
		err    error
		names  string // the offending value, as the message must show it
	}{
		{"zero algorithm", 0, 10, time.Second, 0, algo.ErrUnknownAlgorithm, "0"},
		{"algorithm past the last", algo.SlidingLog + 1, 10, time.Second, 0, algo.ErrUnknownAlgorithm, "6"},
		{"algorithm 255", 255, 10, time.Second, 0, algo.ErrUnknownAlgorithm, "255"},
		{"zero count", algo.GCRA, 0, time.Second, 0, algo.ErrInvalidRule, "limit 0"},
		{"negative count", algo.FixedWindow, -5, time.Second, 0, algo.ErrInvalidRule, "-5"},
		{"count beyond MaxCount", algo.SlidingWindow, algo.MaxCount + 1, algo.MaxPeriod, 0, algo.ErrInvalidRule, "1000000000001"},
		{"zero period", algo.TokenBucket, 10, 0, 0, algo.ErrInvalidRule, "period 0s"},
		{"negative period", algo.SlidingLog, 10, -time.Second, 0, algo.ErrInvalidRule, "-1s"},
		{"period beyond MaxPeriod", algo.GCRA, 10, algo.MaxPeriod + 1, 0, algo.ErrInvalidRule, (algo.MaxPeriod + 1).String()},
		{"negative burst", algo.TokenBucket, 10, time.Second, -1, algo.ErrInvalidRule, "-1"},
		{"burst beyond MaxCount", algo.GCRA, 1e9, time.Second, algo.MaxCount + 1, algo.ErrInvalidRule, "1000000000001"},
		{"burst on fixed_window", algo.FixedWindow, 10, time.Second, 20, algo.ErrInvalidRule, "20"},
		{"burst on sliding_window", algo.SlidingWindow, 10, time.Second, 5, algo.ErrInvalidRule, "5"},
		{"burst on sliding_log", algo.SlidingLog, 10, time.Second, 11, algo.ErrInvalidRule, "11"},
		{"sliding_log beyond MaxLogCount", algo.SlidingLog, algo.MaxLogCount + 1, time.Hour, 0, algo.ErrInvalidRule, "100001"},
		{"rate beyond MaxRate", algo.GCRA, algo.MaxRate + 1, time.Second, 0, algo.ErrInvalidRule, "1000000001"},
		{"two per nanosecond", algo.FixedWindow, 2, 1, 0, algo.ErrInvalidRule, "2 per 1ns"},
		{"rate beyond MaxRate over a day", algo.SlidingWindow, 86400*algo.MaxRate + 1, day, 0, algo.ErrInvalidRule, "86400000000001"},
		{"drain beyond MaxDrain", algo.TokenBucket, 1, algo.MaxPeriod, 51, algo.ErrInvalidRule, "burst 51"},
		{"drain beyond MaxDrain by a little", algo.GCRA, 1000, algo.MaxPeriod, 50_001, algo.ErrInvalidRule, "burst 50001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := algo.Compile(tt.alg, tt.count, tt.period, tt.burst)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Compile(%d, %d, %v, %d) = %v, %v; want an error matching %v", tt.alg, tt.count, tt.period, tt.burst, &r, err, tt.err)
			}
			if !strings.Contains(err.Error(), tt.names) {
				t.Errorf("got message %q, want it to name the value %q", err, tt.names)
			}
			if !strings.HasPrefix(err.Error(), "algo: ") {
				t.Errorf("got message %q, want it to start with the package name", err)
			}
			if r != (algo.Rule{}) {
				t.Errorf("got rule %v with the error, want the zero Rule", &r)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	tests := []struct {
		alg    algo.Algorithm
		count  int64
		period time.Duration
		burst  int64
		burstW int64 // Burst() and Capacity()
		str    string
	}{
		{algo.GCRA, 10, time.Second, 20, 20, "gcra 10/1s burst 20"},
		{algo.TokenBucket, 10, time.Second, 0, 10, "token_bucket 10/1s"},
		{algo.TokenBucket, 10, time.Second, 10, 10, "token_bucket 10/1s"},
		{algo.GCRA, 3, time.Second, 1, 1, "gcra 3/1s burst 1"},
		{algo.FixedWindow, 100, time.Minute, 0, 100, "fixed_window 100/1m0s"},
		{algo.SlidingWindow, 1000, time.Hour, 0, 1000, "sliding_window 1000/1h0m0s"},
		{algo.SlidingLog, algo.MaxLogCount, time.Hour, 0, algo.MaxLogCount, "sliding_log 100000/1h0m0s"},
		// The bounds themselves are valid.
		{algo.GCRA, algo.MaxRate, time.Second, 0, algo.MaxRate, "gcra 1000000000/1s"},
		{algo.TokenBucket, 1, 1, 0, 1, "token_bucket 1/1ns"},
		{algo.SlidingWindow, algo.MaxCount, algo.MaxPeriod, 0, algo.MaxCount, "sliding_window 1000000000000/8760h0m0s"},
		{algo.FixedWindow, algo.MaxCount, 1000 * time.Second, 0, algo.MaxCount, "fixed_window 1000000000000/16m40s"},
		{algo.GCRA, algo.MaxCount, algo.MaxPeriod, algo.MaxCount, algo.MaxCount, "gcra 1000000000000/8760h0m0s"},
		{algo.TokenBucket, 1, algo.MaxPeriod, 50, 50, "token_bucket 1/8760h0m0s burst 50"}, // drains in exactly MaxDrain
		{algo.GCRA, 1, 24 * time.Hour, 0, 1, "gcra 1/24h0m0s"},
	}
	for _, tt := range tests {
		r, err := algo.Compile(tt.alg, tt.count, tt.period, tt.burst)
		if err != nil {
			t.Errorf("Compile(%v, %d, %v, %d): got %v, want a rule", tt.alg, tt.count, tt.period, tt.burst, err)
			continue
		}
		if r.Algorithm() != tt.alg || r.Count() != tt.count || r.Period() != tt.period || r.Burst() != tt.burstW || r.Capacity() != tt.burstW {
			t.Errorf("Compile(%v, %d, %v, %d): got %v, %d, %v, burst %d, capacity %d", tt.alg, tt.count, tt.period, tt.burst, r.Algorithm(), r.Count(), r.Period(), r.Burst(), r.Capacity())
		}
		if got := r.String(); got != tt.str {
			t.Errorf("String: got %q, want %q", got, tt.str)
		}
	}
}

func TestCheckCost(t *testing.T) {
	bucket := mustCompile(t, algo.TokenBucket, 10, time.Second, 25)
	window := mustCompile(t, algo.SlidingWindow, 10, time.Second, 0)
	tests := []struct {
		r     algo.Rule
		n     int64
		err   error
		names string
	}{
		{bucket, 1, nil, ""},
		{bucket, 25, nil, ""},
		{bucket, 26, algo.ErrCostExceedsCapacity, "26"},
		{bucket, 0, algo.ErrInvalidCost, "0"},
		{bucket, -3, algo.ErrInvalidCost, "-3"},
		{window, 10, nil, ""},
		{window, 11, algo.ErrCostExceedsCapacity, "11"},
		{window, -1 << 63, algo.ErrInvalidCost, fmt.Sprint(int64(-1 << 63))},
		{window, 1<<63 - 1, algo.ErrCostExceedsCapacity, fmt.Sprint(int64(1<<63 - 1))},
	}
	for _, tt := range tests {
		err := tt.r.CheckCost(tt.n)
		if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
			t.Errorf("%v: CheckCost(%d) = %v, want %v", &tt.r, tt.n, err, tt.err)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), tt.names) {
			t.Errorf("%v: CheckCost(%d) = %q, want the message to name %s", &tt.r, tt.n, err, tt.names)
		}
	}
}

func TestAlgorithmNames(t *testing.T) {
	want := []struct {
		a      algo.Algorithm
		name   string
		bucket bool
	}{
		{algo.TokenBucket, "token_bucket", true},
		{algo.GCRA, "gcra", true},
		{algo.FixedWindow, "fixed_window", false},
		{algo.SlidingWindow, "sliding_window", false},
		{algo.SlidingLog, "sliding_log", false},
	}
	all := algo.Algorithms()
	if len(all) != len(want) {
		t.Fatalf("Algorithms: got %v, want %d algorithms", all, len(want))
	}
	for i, w := range want {
		if all[i] != w.a {
			t.Errorf("Algorithms()[%d]: got %v, want %v", i, all[i], w.a)
		}
		if got := w.a.String(); got != w.name {
			t.Errorf("String: got %q, want %q", got, w.name)
		}
		if !w.a.Valid() || w.a.IsBucket() != w.bucket {
			t.Errorf("%v: got Valid %v, IsBucket %v; want true, %v", w.a, w.a.Valid(), w.a.IsBucket(), w.bucket)
		}
		got, err := algo.ParseAlgorithm(w.name)
		if err != nil || got != w.a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", w.name, got, err, w.a)
		}
		text, err := w.a.MarshalText()
		if err != nil || string(text) != w.name {
			t.Errorf("%v.MarshalText() = %q, %v; want %q", w.a, text, err, w.name)
		}
		var u algo.Algorithm
		if err := u.UnmarshalText([]byte(w.name)); err != nil || u != w.a {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", w.name, u, err, w.a)
		}
	}
	// Names are exact: no case folding, no spaces, no other spellings.
	for _, bad := range []string{"", "GCRA", "Token_Bucket", " gcra", "gcra ", "token-bucket", "tokenbucket", "leaky_bucket", "sliding", "gcra\x00"} {
		a, err := algo.ParseAlgorithm(bad)
		if !errors.Is(err, algo.ErrUnknownAlgorithm) || a != 0 {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want 0 and ErrUnknownAlgorithm", bad, a, err)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("ParseAlgorithm(%q): got message %q, want it to quote the name", bad, err)
		}
		u := algo.GCRA
		if err := u.UnmarshalText([]byte(bad)); err == nil || u != algo.GCRA {
			t.Errorf("UnmarshalText(%q): got %v, %v; want an error and the value unchanged", bad, u, err)
		}
	}
	for _, a := range []algo.Algorithm{0, 6, 255} {
		if a.Valid() || a.IsBucket() {
			t.Errorf("Algorithm(%d): got Valid %v, IsBucket %v; want false, false", a, a.Valid(), a.IsBucket())
		}
		if got, want := a.String(), fmt.Sprintf("Algorithm(%d)", a); got != want {
			t.Errorf("String: got %q, want %q", got, want)
		}
		if text, err := a.MarshalText(); err == nil {
			t.Errorf("Algorithm(%d).MarshalText() = %q, nil; want an error", a, text)
		}
	}
}

func TestBinds(t *testing.T) {
	allow := func(remaining, reset int64) algo.Status {
		return algo.Status{Allowed: true, Remaining: remaining, ResetAfter: reset}
	}
	deny := func(retry int64) algo.Status { return algo.Status{RetryAfter: retry, ResetAfter: 2 * retry} }
	tests := []struct {
		name   string
		acc, s algo.Status
		want   bool
	}{
		{"fewer remaining binds", allow(5, 10), allow(4, 1), true},
		{"more remaining does not", allow(4, 1), allow(5, 10), false},
		{"a tie goes to the longer reset", allow(4, 10), allow(4, 11), true},
		{"a tie with a shorter reset does not", allow(4, 10), allow(4, 9), false},
		{"an exact tie keeps acc", allow(4, 10), allow(4, 10), false},
		{"a denial binds an allowance", allow(0, 10), deny(1), true},
		{"an allowance never binds a denial", deny(1), allow(0, 100), false},
		{"the longer retry binds", deny(5), deny(6), true},
		{"the shorter retry does not", deny(6), deny(5), false},
		{"a retry tie keeps acc", deny(6), deny(6), false},
	}
	for _, tt := range tests {
		if got := algo.Binds(tt.acc, tt.s); got != tt.want {
			t.Errorf("%s: Binds(%+v, %+v) = %v, want %v", tt.name, tt.acc, tt.s, got, tt.want)
		}
	}
}
