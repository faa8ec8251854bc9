package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/memstore"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t *testing.T) (*memstore.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	s := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s, clk
}

func TestNewPolicyRejectsInvalid(t *testing.T) {
	ok := sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second}
	tests := []struct {
		name     string
		policy   string
		limits   []sluice.Limit
		mentions string
	}{
		{"empty name", "", []sluice.Limit{ok}, "policy name"},
		{"control character", "a\nb", []sluice.Limit{ok}, "policy name"},
		{"no limits", "p", nil, "0 limits"},
		{"too many limits", "p", make([]sluice.Limit, sluice.MaxLimits+1), "9 limits"},
		{"zero count", "p", []sluice.Limit{{Algorithm: sluice.GCRA, Period: time.Second}}, "limit 0 must be positive"},
		{"negative period", "p", []sluice.Limit{{Algorithm: sluice.FixedWindow, Count: 5, Period: -time.Second}}, "period -1s must be positive"},
		{"no algorithm", "p", []sluice.Limit{{Count: 5, Period: time.Second}}, "unknown algorithm"},
		{"burst on a window", "p", []sluice.Limit{{Algorithm: sluice.SlidingWindow, Count: 5, Period: time.Second, Burst: 10}}, "burst applies only"},
		{"absurd rate", "p", []sluice.Limit{{Algorithm: sluice.TokenBucket, Count: 1e12, Period: time.Millisecond}}, "exceeds 1000000000 per second"},
		{"second limit invalid", "p", []sluice.Limit{ok, {Algorithm: sluice.GCRA, Count: 1}}, "limit 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := sluice.NewPolicy(tt.policy, tt.limits...)
			if err == nil {
				t.Fatalf("NewPolicy(%q, %v) = %v, want an error", tt.policy, tt.limits, p)
			}
			if !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Errorf("error %q does not match ErrInvalidLimit", err)
			}
			if !strings.Contains(err.Error(), tt.mentions) {
				t.Errorf("error %q does not mention %q", err, tt.mentions)
			}
		})
	}
}

func TestAllowNRejectsImpossibleCosts(t *testing.T) {
	s, _ := newStore(t)
	lim, err := sluice.New(s, "cost", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Second, Burst: 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tt := range []struct {
		n    int64
		want error
	}{{0, sluice.ErrInvalidCost}, {-3, sluice.ErrInvalidCost}, {21, sluice.ErrCostExceedsCapacity}} {
		if _, err := lim.AllowN(ctx, "k", tt.n); !errors.Is(err, tt.want) {
			t.Errorf("AllowN(%d) error = %v, want %v", tt.n, err, tt.want)
		}
	}
	// A cost of exactly the burst fits a fresh key, and nothing was
	// charged by the rejected calls.
	d, err := lim.AllowN(ctx, "k", 20)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN(20) = %+v, %v; want allowed with 0 remaining", d, err)
	}
}

func TestReserveNeedsBucketLimits(t *testing.T) {
	s, _ := newStore(t)
	lim, err := sluice.New(s, "win",
		sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second},
		sluice.Limit{Algorithm: sluice.FixedWindow, Count: 100, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Reserve(context.Background(), "k", 1, time.Second); !errors.Is(err, sluice.ErrReserveUnsupported) {
		t.Fatalf("Reserve error = %v, want ErrReserveUnsupported", err)
	}
	if _, err := lim.Wait(context.Background(), "k", 1, time.Second); !errors.Is(err, sluice.ErrReserveUnsupported) {
		t.Fatalf("Wait error = %v, want ErrReserveUnsupported", err)
	}
}

func TestNewRejectsNil(t *testing.T) {
	if _, err := sluice.New(nil, "p", sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second}); err == nil {
		t.Error("New(nil store) succeeded, want an error")
	}
	s, _ := newStore(t)
	if _, err := sluice.NewWithPolicy(s, nil); err == nil {
		t.Error("NewWithPolicy(nil policy) succeeded, want an error")
	}
}

func TestTakeAllSameIdentity(t *testing.T) {
	store, _ := newStore(t)
	ctx := context.Background()
	a, _ := sluice.NewPolicy("p", sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Second})
	b, _ := sluice.NewPolicy("p", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 9, Period: time.Hour})
	q, _ := sluice.NewPolicy("q", sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Second})
	out := make([]sluice.Decision, 2)
	if _, err := sluice.TakeAll(ctx, store, []sluice.Request{{Policy: a, Key: "k", N: 1}, {Policy: b, Key: "k", N: 1}}, out); !errors.Is(err, sluice.ErrInvalidBatch) {
		t.Errorf("the same key under two definitions of one policy name: %v, want ErrInvalidBatch", err)
	}
	if _, err := sluice.TakeAll(ctx, store, []sluice.Request{{Policy: a, Key: "k", N: 1}, {Policy: q, Key: "k", N: 1}}, out); err != nil {
		t.Errorf("the same key under another name: %v, want nil", err)
	}
	if _, err := sluice.TakeAll(ctx, store, []sluice.Request{{Policy: a, Key: "k", N: 1}, {Policy: b, Key: "j", N: 1}}, out); err != nil {
		t.Errorf("another key under the same name: %v, want nil", err)
	}
}

func TestLimitString(t *testing.T) {
	for _, tt := range []struct {
		l    sluice.Limit
		want string
	}{
		{sluice.Limit{Algorithm: sluice.TokenBucket, Count: 20, Period: 10 * time.Second, Burst: 40}, "token_bucket 20/10s burst 40"},
		{sluice.Limit{Algorithm: sluice.SlidingLog, Count: 5, Period: time.Minute}, "sliding_log 5/1m0s"},
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 0, Period: time.Second}, "gcra 0/1s burst 0 (invalid)"},
	} {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestDecisionResetTime(t *testing.T) {
	s, clk := newStore(t)
	lim, _ := sluice.New(s, "reset", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Minute})
	clk.Advance(15 * time.Second)
	d, err := lim.Allow(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if want := epoch.Add(time.Minute); !d.ResetTime().Equal(want) {
		t.Errorf("ResetTime() = %v, want the window's end %v", d.ResetTime(), want)
	}
	if !d.Time.Equal(clk.Now()) {
		t.Errorf("Time = %v, want the store clock's %v", d.Time, clk.Now())
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog} {
		got, err := sluice.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", a.String(), got, err, a)
		}
	}
	if _, err := sluice.ParseAlgorithm("leaky"); err == nil || !strings.Contains(err.Error(), "token_bucket") {
		t.Errorf("ParseAlgorithm(leaky) error = %v, want one listing the valid names", err)
	}
}

// TestDecisionLimitBoundsRemaining: a Decision's Limit is the most units
// its binding limit can hold, so Remaining never exceeds it: a bucket's
// Burst, whether it is larger or smaller than its Count, and a window's
// Count.
func TestDecisionLimitBoundsRemaining(t *testing.T) {
	tests := []struct {
		name      string
		limit     sluice.Limit
		wantLimit int64
	}{
		{"bucket, burst above the rate", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 20, Period: time.Second, Burst: 40}, 40},
		{"gcra, burst below the rate", sluice.Limit{Algorithm: sluice.GCRA, Count: 60, Period: time.Minute, Burst: 20}, 20},
		{"bucket, no burst", sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second}, 10},
		{"window", sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 5, Period: time.Minute}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := newStore(t)
			lim, err := sluice.New(store, "capacity", tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			d, err := lim.Peek(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			if d.Limit != tt.wantLimit || d.Remaining != tt.wantLimit {
				t.Errorf("fresh key: got limit %d, remaining %d; want %d and %d", d.Limit, d.Remaining, tt.wantLimit, tt.wantLimit)
			}
			for i := range tt.wantLimit + 1 {
				d, err := lim.Allow(context.Background(), "k")
				if err != nil {
					t.Fatal(err)
				}
				if d.Limit != tt.wantLimit || d.Remaining > d.Limit {
					t.Fatalf("request %d: got limit %d, remaining %d; want limit %d and remaining at most that", i, d.Limit, d.Remaining, tt.wantLimit)
				}
			}
		})
	}
}
