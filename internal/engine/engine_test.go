package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/memstore"
)

var epoch = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func newStore(t *testing.T) (*memstore.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	s := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s, clk
}

func policy(t *testing.T, name string, alg sluice.Algorithm, count int64) *sluice.Policy {
	t.Helper()
	p, err := sluice.NewPolicy(name, sluice.Limit{Algorithm: alg, Count: count, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func remaining(t *testing.T, s sluice.Store, p *sluice.Policy, key string) int64 {
	t.Helper()
	d, err := s.Peek(context.Background(), p, key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

func outcomes(c *engine.Call) []engine.Outcome {
	out := make([]engine.Outcome, len(c.Results))
	for i, r := range c.Results {
		out[i] = r.Outcome
	}
	return out
}

func equal(a, b []engine.Outcome) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The procedure's steps, and what a refusal leaves charged.
func TestDecide(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		opts   engine.Options
		used   map[string]int64 // units taken from each policy's key before
		checks func(p map[string]*sluice.Policy) []engine.Check
		want   engine.Verdict
		out    []engine.Outcome
		left   map[string]int64 // each policy's remaining after
	}{
		{
			name: "admitted: the batch and the shadow are charged, the probe is not",
			checks: func(p map[string]*sluice.Policy) []engine.Check {
				return []engine.Check{
					{Policy: p["a"], Key: "k", Cost: 1, Mode: engine.Enforce},
					{Policy: p["b"], Key: "k", Cost: 2, Mode: engine.Enforce},
					{Policy: p["c"], Key: "k", Cost: 1, Mode: engine.Probe},
					{Policy: p["d"], Key: "k", Cost: 1, Mode: engine.Shadow},
				}
			},
			want: engine.Admitted,
			out:  []engine.Outcome{engine.Allowed, engine.Allowed, engine.Allowed, engine.Allowed},
			left: map[string]int64{"a": 4, "b": 3, "c": 5, "d": 4},
		},
		{
			name: "a refused probe charges nothing and skips the rest",
			used: map[string]int64{"c": 5},
			checks: func(p map[string]*sluice.Policy) []engine.Check {
				return []engine.Check{
					{Policy: p["a"], Key: "k", Cost: 1, Mode: engine.Enforce},
					{Policy: p["c"], Key: "k", Cost: 1, Mode: engine.Probe},
					{Policy: p["d"], Key: "k", Cost: 1, Mode: engine.Shadow},
				}
			},
			want: engine.Refused,
			out:  []engine.Outcome{engine.Skipped, engine.Limited, engine.Skipped},
			left: map[string]int64{"a": 5, "c": 0, "d": 5},
		},
		{
			name: "one over in the batch: none charged, shadows not charged",
			used: map[string]int64{"b": 4},
			checks: func(p map[string]*sluice.Policy) []engine.Check {
				return []engine.Check{
					{Policy: p["a"], Key: "k", Cost: 1, Mode: engine.Enforce},
					{Policy: p["b"], Key: "k", Cost: 2, Mode: engine.Enforce},
					{Policy: p["d"], Key: "k", Cost: 1, Mode: engine.Shadow},
				}
			},
			want: engine.Refused,
			out:  []engine.Outcome{engine.Skipped, engine.Limited, engine.Skipped},
			left: map[string]int64{"a": 5, "b": 1, "d": 5},
		},
		{
			name: "a shadow over its limit never refuses",
			used: map[string]int64{"d": 5},
			checks: func(p map[string]*sluice.Policy) []engine.Check {
				return []engine.Check{
					{Policy: p["a"], Key: "k", Cost: 1, Mode: engine.Enforce},
					{Policy: p["d"], Key: "k", Cost: 1, Mode: engine.Shadow},
					{Policy: p["d"], Key: "j", Cost: 9, Mode: engine.Shadow},
				}
			},
			want: engine.Admitted,
			out:  []engine.Outcome{engine.Allowed, engine.ShadowLimited, engine.ShadowLimited},
			left: map[string]int64{"a": 4, "d": 0},
		},
		{
			name: "a cost beyond the limit refuses without the store; a nil policy too",
			checks: func(p map[string]*sluice.Policy) []engine.Check {
				return []engine.Check{
					{Policy: p["a"], Key: "k", Cost: 6, Mode: engine.Enforce},
					{Key: "k", Cost: 1, Mode: engine.Enforce},
					{Policy: p["b"], Key: "k", Cost: 1, Mode: engine.Enforce},
				}
			},
			want: engine.Refused,
			out:  []engine.Outcome{engine.Limited, engine.Limited, engine.Skipped},
			left: map[string]int64{"a": 5, "b": 5},
		},
		{
			name: "report: the status of every check of a refused request",
			opts: engine.Options{Report: true},
			used: map[string]int64{"b": 5, "d": 5},
			checks: func(p map[string]*sluice.Policy) []engine.Check {
				return []engine.Check{
					{Policy: p["a"], Key: "k", Cost: 1, Mode: engine.Enforce},
					{Policy: p["b"], Key: "k", Cost: 1, Mode: engine.Enforce},
					{Policy: p["c"], Key: "k", Cost: 1, Mode: engine.Probe},
					{Policy: p["d"], Key: "k", Cost: 1, Mode: engine.Shadow},
					{Policy: p["e"], Key: "k", Cost: 1, Mode: engine.ShadowProbe},
				}
			},
			want: engine.Refused,
			out:  []engine.Outcome{engine.Skipped, engine.Limited, engine.Allowed, engine.ShadowLimited, engine.Allowed},
			left: map[string]int64{"a": 5, "b": 0, "c": 5, "d": 0, "e": 5},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			p := map[string]*sluice.Policy{}
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				p[n] = policy(t, n, sluice.FixedWindow, 5)
			}
			for n, u := range tt.used {
				if d, err := s.Take(ctx, p[n], "k", u); err != nil || !d.Allowed {
					t.Fatalf("taking %d from %s: %+v, %v", u, n, d, err)
				}
			}
			e := engine.New(s, tt.opts)
			var c engine.Call
			for _, ch := range tt.checks(p) {
				c.Add(ch)
			}
			v, err := e.Decide(ctx, &c)
			if err != nil || v != tt.want {
				t.Fatalf("Decide: %v, %v; want %v", v, err, tt.want)
			}
			if got := outcomes(&c); !equal(got, tt.out) {
				t.Errorf("outcomes %v, want %v", got, tt.out)
			}
			for n, want := range tt.left {
				if got := remaining(t, s, p[n], "k"); got != want {
					t.Errorf("%s after: %d remaining, want %d", n, got, want)
				}
			}
		})
	}
}

// A refused probe of a penalized policy is a strike: enough of them block
// the key.
func TestProbeStrikes(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	p := policy(t, "login", sluice.FixedWindow, 1)
	p, err := p.WithPenalty(sluice.Penalty{After: 2, Blocks: []time.Duration{time.Hour}, Forget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Take(ctx, p, "k", 1); !d.Allowed {
		t.Fatal("first take refused")
	}
	e := engine.New(s, engine.Options{})
	for i := range 2 {
		var c engine.Call
		c.Add(engine.Check{Policy: p, Key: "k", Cost: 1, Mode: engine.Probe})
		if v, _ := e.Decide(ctx, &c); v != engine.Refused {
			t.Fatalf("probe %d: %v, want refused", i, v)
		}
	}
	// Blocked: refused for the hour of the block, not the minute's window.
	d, err := s.Peek(ctx, p, "k")
	if err != nil || d.Allowed || d.RetryAfter < 59*time.Minute {
		t.Fatalf("after two refused probes: %+v, %v; want blocked for an hour", d, err)
	}
}

// Delays are reserved before the batch, and given back by Cancel when the
// request is refused after all.
func TestDelayCancel(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	queue, err := sluice.NewPolicy("queue", sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	other := policy(t, "other", sluice.FixedWindow, 2)
	e := engine.New(s, engine.Options{})
	decide := func() (*engine.Call, engine.Verdict) {
		var c engine.Call
		c.Add(engine.Check{Policy: queue, Key: "k", Cost: 1, Mode: engine.Delay, MaxDelay: 10 * time.Second})
		c.Add(engine.Check{Policy: other, Key: "k", Cost: 1, Mode: engine.Enforce})
		v, err := e.Decide(ctx, &c)
		if err != nil {
			t.Fatal(err)
		}
		return &c, v
	}
	if c, v := decide(); v != engine.Admitted || c.Results[0].Outcome != engine.Allowed || c.MaxDelay() != 0 {
		t.Fatalf("first: %v %v, delay %v; want admitted at once", v, outcomes(c), c.MaxDelay())
	}
	if c, v := decide(); v != engine.Admitted || c.Results[0].Outcome != engine.Delayed || c.MaxDelay() != time.Second {
		t.Fatalf("second: %v %v, delay %v; want admitted after 1s", v, outcomes(c), c.MaxDelay())
	}
	// The third's turn is reserved 2s away, then "other" refuses it: the
	// face gives the turn back, and the next request gets that turn.
	c, v := decide()
	if v != engine.Refused || c.Results[0].Outcome != engine.Delayed || c.Results[1].Outcome != engine.Limited {
		t.Fatalf("third: %v %v; want refused by other after its delay was reserved", v, outcomes(c))
	}
	e.Cancel(ctx, c)
	d, err := s.Reserve(ctx, queue, "k", 1, time.Minute)
	if err != nil || !d.Allowed || d.Delay != 2*time.Second {
		t.Fatalf("after the cancel, the next turn: %+v, %v; want 2s away (the refused request's)", d, err)
	}
}

// A store error fails open by default, refuses with FailClosed, and ends
// the decision with StopOnError.
func TestStoreErrors(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	bad := &failing{Store: s, err: errors.New("backend down")}
	a, d := policy(t, "a", sluice.FixedWindow, 5), policy(t, "d", sluice.FixedWindow, 5)
	checks := []engine.Check{
		{Policy: a, Key: "k", Cost: 1, Mode: engine.Enforce},
		{Policy: d, Key: "k", Cost: 1, Mode: engine.Shadow},
	}
	for _, tt := range []struct {
		opts engine.Options
		want engine.Verdict
		err  bool
	}{
		{engine.Options{}, engine.Admitted, false},
		{engine.Options{FailClosed: true}, engine.Unavailable, false},
		{engine.Options{StopOnError: true}, engine.Admitted, true},
	} {
		var c engine.Call
		for _, ch := range checks {
			c.Add(ch)
		}
		v, err := engine.New(bad, tt.opts).Decide(ctx, &c)
		if v != tt.want || (err != nil) != tt.err {
			t.Errorf("%+v: got %v, %v; want %v, error %v", tt.opts, v, err, tt.want, tt.err)
		}
		if !tt.err && (!c.Failed || c.Results[0].Outcome != engine.Error || !errors.Is(c.Results[0].Err, bad.err)) {
			t.Errorf("%+v: the failed check: %+v, Failed %v", tt.opts, c.Results[0], c.Failed)
		}
	}
}

// failing is a store whose decisions all fail.
type failing struct {
	sluice.Store
	err error
}

func (f *failing) Take(context.Context, *sluice.Policy, string, int64) (sluice.Decision, error) {
	return sluice.Decision{}, f.err
}

func (f *failing) Peek(context.Context, *sluice.Policy, string) (sluice.Decision, error) {
	return sluice.Decision{}, f.err
}
