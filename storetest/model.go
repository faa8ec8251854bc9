package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/storekit"
)

// model is the reference a store is held to: one key's state under a
// policy, decided with package algo's pure functions.
type model struct {
	p      *sluice.Policy
	states []algo.State
	logs   []algo.Log
	// expiry is when each limit's state was due to be back to fresh as
	// of its last write, and seen the latest time seen since: once seen
	// reaches expiry, a store may have forgotten the state.
	expiry, seen []int64
}

func newModel(p *sluice.Policy) *model {
	n := p.Len()
	return &model{p: p, states: make([]algo.State, n), logs: make([]algo.Log, n), expiry: make([]int64, n), seen: make([]int64, n)}
}

// earliest returns the earliest time the clock may step back to from the
// time wanted: not before the expiry of state a store may have forgotten,
// since the store would then rightly decide as for a fresh key.
func (m *model) earliest(wanted int64) int64 {
	for i := range m.p.Len() {
		if m.seen[i] >= m.expiry[i] {
			wanted = max(wanted, m.expiry[i])
		}
	}
	return wanted
}

// decide decides a request of cost n at now, or a peek for n == 0: every
// limit is evaluated, the binding one chosen by algo.Binds, and the request
// charged to every limit only if all admit it.
func (m *model) decide(now, n int64) sluice.Decision {
	var (
		next = make([]algo.State, m.p.Len())
		sum  algo.Status
		bind int
	)
	for i := range m.p.Len() {
		r := storekit.Of(m.p).Rule(i)
		var st algo.Status
		if r.Algorithm() == algo.SlidingLog {
			st = r.EvalLog(&m.logs[i], now, n)
		} else {
			next[i], st = r.Eval(m.states[i], now, n)
		}
		if i == 0 || algo.Binds(sum, st) {
			sum, bind = st, i
		}
	}
	for i := range m.p.Len() {
		m.seen[i] = max(m.seen[i], now)
	}
	if sum.Allowed && n > 0 {
		for i := range m.p.Len() {
			if r := storekit.Of(m.p).Rule(i); r.Algorithm() == algo.SlidingLog {
				r.Record(&m.logs[i], now, n)
				m.expiry[i] = r.LogExpiry(&m.logs[i], now)
			} else {
				m.states[i] = next[i]
				m.expiry[i] = r.Expiry(next[i], now)
			}
			m.seen[i] = now
		}
	}
	return storekit.Of(m.p).Decision(bind, sum, now)
}

func (m *model) reset() {
	clear(m.states)
	clear(m.logs)
	clear(m.expiry)
	clear(m.seen)
}

// testModel drives a store and the model through the same random requests,
// clock steps (backwards too) and resets, and compares every decision. The
// seed is fixed, so a failure repeats; it is in the failure message. The
// clock never steps back past the expiry of state that a store may have
// forgotten because the clock had reached it (see model.earliest).
func (s *suite) testModel(t *testing.T) {
	policies := []struct {
		name   string
		limits []sluice.Limit
	}{
		{"token_bucket", []sluice.Limit{bucket(sluice.TokenBucket, 3, s1, 5)}},
		{"token_bucket_slow", []sluice.Limit{bucket(sluice.TokenBucket, 7, 3*s1, 2)}},
		{"gcra", []sluice.Limit{bucket(sluice.GCRA, 3, s1, 5)}},
		{"gcra_slow", []sluice.Limit{bucket(sluice.GCRA, 7, 3*s1, 2)}},
		{"fixed_window", []sluice.Limit{limit(sluice.FixedWindow, 5, 700*ms)}},
		{"sliding_window", []sluice.Limit{limit(sluice.SlidingWindow, 3, s1)}},
		{"sliding_window_odd", []sluice.Limit{limit(sluice.SlidingWindow, 7, 1500*ms)}},
		{"sliding_log", []sluice.Limit{limit(sluice.SlidingLog, 4, s1)}},
		{"mixed_three", []sluice.Limit{
			bucket(sluice.GCRA, 10, s1, 3), limit(sluice.SlidingWindow, 20, 5*s1), limit(sluice.SlidingLog, 30, 10*s1),
		}},
		{"mixed_two", []sluice.Limit{limit(sluice.FixedWindow, 4, s1), bucket(sluice.TokenBucket, 6, 2*s1, 6)}},
		{"equal_twins", []sluice.Limit{limit(sluice.SlidingLog, 5, s1), limit(sluice.SlidingLog, 5, s1)}},
	}
	for i, pc := range policies {
		t.Run(pc.name, func(t *testing.T) {
			seed := uint64(i + 1)
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			e := s.env(t)
			lim := e.limiter(pc.limits...)
			p := lim.Policy()
			var shortest, longest time.Duration = time.Duration(1<<63 - 1), 0
			capacity := int64(1 << 62)
			for j := range p.Len() {
				shortest = min(shortest, storekit.Of(p).Rule(j).Period())
				longest = max(longest, storekit.Of(p).Rule(j).Period())
				capacity = min(capacity, storekit.Of(p).Rule(j).Capacity())
			}
			m := newModel(p)
			now := 2 * longest // room to step back without going before the epoch
			for k := range 600 {
				switch x := rng.IntN(100); {
				case x < 45: // stay
				case x < 85:
					now += time.Duration(rng.Int64N(int64(shortest/us)/2+1)) * us
				case x < 93:
					now -= time.Duration(rng.Int64N(int64(shortest/us)+1)) * us
					now = ceil(time.Duration(m.earliest(epoch.Add(now).UnixNano()) - epoch.UnixNano()))
				default:
					now += time.Duration(rng.Int64N(int64(2*longest/us)+1)) * us
				}
				now = max(now, 0)
				e.at(now)
				var got, want sluice.Decision
				var what string
				switch x := rng.IntN(100); {
				case x < 2:
					e.reset(lim, "k")
					m.reset()
					continue
				case x < 22:
					what = "Peek"
					got, want = e.peek(lim, "k"), m.decide(e.clk.Now().UnixNano(), 0)
				default:
					n := 1 + rng.Int64N(capacity)
					if rng.IntN(2) == 0 {
						n = 1
					}
					what = fmt.Sprintf("AllowN(%d)", n)
					got, want = e.take(lim, "k", n), m.decide(e.clk.Now().UnixNano(), n)
				}
				w := outcome{
					allowed: want.Allowed, remaining: want.Remaining, retryAfter: want.RetryAfter,
					resetAfter: want.ResetAfter, index: want.Index, limit: want.Limit,
				}
				if !e.check(fmt.Sprintf("seed %d, operation %d: %s", seed, k, what), p, got, w) {
					return
				}
			}
		})
	}
}
