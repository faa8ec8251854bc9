package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testTakeAll checks sluice.TakeAll on the store: a batch is charged whole
// or not at all, whatever algorithms its requests use.
func (s *suite) testTakeAll(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			e := s.env(t)
			e.at(0)
			perIP := e.policy(limit(a, 5, time.Hour))
			perKey := e.policy(limit(a, 2, time.Hour))
			both := e.policy(limit(a, 3, time.Hour), limit(sluice.TokenBucket, 10, time.Hour))
			reqs := func(key string) []sluice.Request {
				return []sluice.Request{{Policy: perIP, Key: "ip"}, {Policy: perKey, Key: key}, {Policy: both, Key: key}}
			}
			batch := func(key string) ([]sluice.Decision, bool) {
				t.Helper()
				r := reqs(key)
				for i := range r {
					r[i].N = 1
				}
				out := make([]sluice.Decision, len(r))
				ok, err := sluice.TakeAll(e.ctx(), e.store, r, out)
				if err != nil {
					t.Fatalf("TakeAll: %v", err)
				}
				return out, ok
			}
			remaining := func(p *sluice.Policy, key string) int64 {
				t.Helper()
				d, err := e.store.Peek(e.ctx(), p, key)
				if err != nil {
					t.Fatalf("Peek: %v", err)
				}
				return d.Remaining
			}
			for i := range 2 {
				out, ok := batch("alice")
				if !ok || !out[0].Allowed || !out[1].Allowed || !out[2].Allowed {
					t.Fatalf("batch %d for alice: got %v, want all admitted: %+v", i, ok, out)
				}
			}
			// perKey has nothing left for alice: the batch is denied and
			// charges neither perIP nor both.
			for range 3 {
				out, ok := batch("alice")
				// A store may leave the other requests undecided (zero
				// Decisions) once it knows of a denial.
				undecided := out[0].Time.IsZero() && out[2].Time.IsZero() && out[0] == out[2]
				if ok || out[1].Allowed || out[1].RetryAfter <= 0 || (!undecided && !out[0].Allowed) {
					t.Fatalf("third batch for alice: got %v, want denied by perKey alone: %+v", ok, out)
				}
				// A refused batch charged nothing: its admitted members
				// tell the units they have now, on every store.
				if !undecided && (out[0].Remaining != remaining(perIP, "ip") || out[2].Remaining != remaining(both, "alice")) {
					t.Fatalf("refused batch: admitted members report remaining %d and %d, want %d and %d (as Peek: nothing was charged)",
						out[0].Remaining, out[2].Remaining, remaining(perIP, "ip"), remaining(both, "alice"))
				}
			}
			if got := remaining(perIP, "ip"); got != 3 {
				t.Errorf("perIP after denied batches: %d remaining, want 3 (charged only by admitted batches)", got)
			}
			if got := remaining(both, "alice"); got != 1 {
				t.Errorf("both after denied batches: %d remaining, want 1", got)
			}
			// Another key still fits perIP's remaining 3, then perIP denies.
			for i := range 3 {
				if _, ok := batch("bob" + string(rune('0'+i))); !ok {
					t.Fatalf("batch for bob%d denied", i)
				}
			}
			if _, ok := batch("carol"); ok {
				t.Fatalf("batch beyond perIP admitted")
			}
			if got := remaining(perKey, "carol"); got != 2 {
				t.Errorf("perKey for carol after perIP denied: %d remaining, want 2", got)
			}
		})
	}
	for _, a := range algorithms {
		t.Run("costs/"+a.String(), func(t *testing.T) {
			// Each request is charged its own cost.
			e := s.env(t)
			e.at(0)
			big := e.policy(limit(a, 10, time.Hour))
			small := e.policy(limit(a, 4, time.Hour))
			out := make([]sluice.Decision, 2)
			reqs := []sluice.Request{{Policy: big, Key: "x", N: 3}, {Policy: small, Key: "y", N: 2}}
			for i := range 3 {
				ok, err := sluice.TakeAll(e.ctx(), e.store, reqs, out)
				if err != nil {
					t.Fatal(err)
				}
				if want := i < 2; ok != want {
					t.Fatalf("batch %d: admitted %v, want %v: %+v", i, ok, want, out)
				}
			}
			d, err := e.store.Peek(e.ctx(), big, "x")
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != 4 {
				t.Errorf("big after two batches of cost 3: %d remaining, want 4", d.Remaining)
			}
		})
	}
	t.Run("invalid", func(t *testing.T) {
		e := s.env(t)
		e.at(0)
		p := e.policy(limit(sluice.FixedWindow, 5, time.Hour))
		same, err := sluice.NewPolicy(p.Name(), limit(sluice.FixedWindow, 5, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]sluice.Decision, 2)
		for _, c := range []struct {
			name string
			reqs []sluice.Request
			want error
		}{
			{"repeated", []sluice.Request{{Policy: p, Key: "k", N: 1}, {Policy: p, Key: "k", N: 1}}, sluice.ErrInvalidBatch},
			{"equal_policies", []sluice.Request{{Policy: p, Key: "k", N: 1}, {Policy: same, Key: "k", N: 1}}, sluice.ErrInvalidBatch},
			{"nil_policy", []sluice.Request{{Policy: p, Key: "k", N: 1}, {Key: "k", N: 1}}, sluice.ErrInvalidBatch},
			{"zero_cost", []sluice.Request{{Policy: p, Key: "k", N: 1}, {Policy: p, Key: "j", N: 0}}, sluice.ErrInvalidCost},
			{"cost_beyond_limit", []sluice.Request{{Policy: p, Key: "k", N: 6}, {Policy: p, Key: "j", N: 1}}, sluice.ErrCostExceedsCapacity},
			{"out_too_short", []sluice.Request{{Policy: p, Key: "k", N: 1}, {Policy: p, Key: "j", N: 1}, {Policy: p, Key: "i", N: 1}}, sluice.ErrInvalidBatch},
		} {
			ok, err := sluice.TakeAll(e.ctx(), e.store, c.reqs, out)
			if ok || !errors.Is(err, c.want) {
				t.Errorf("%s: got %v, %v; want an error matching %v", c.name, ok, err, c.want)
			}
		}
		if d, err := e.store.Peek(e.ctx(), p, "k"); err != nil || d.Remaining != 5 {
			t.Errorf("after invalid batches: %d remaining, %v; want 5 (nothing charged)", d.Remaining, err)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		e := s.env(t)
		b, ok := e.store.(sluice.BatchTaker)
		if !ok {
			t.Skip("the store has no atomic TakeAll; sluice.TakeAll's check-then-charge fallback is not atomic under concurrency")
		}
		if s.batchesNotAtomic {
			t.Skip("Options.BatchesNotAtomic: the store's TakeAll checks before it charges")
		}
		e.at(0)
		shared := e.policy(limit(sluice.FixedWindow, 40, time.Hour))
		own := e.policy(limit(sluice.FixedWindow, 1000, time.Hour))
		// 8 goroutines, each with its own key under own, share one key
		// under shared: whatever the interleaving, exactly 40 batches are
		// admitted, and every own key is charged only for its admitted ones.
		var wg sync.WaitGroup
		admitted := make([]int64, 8)
		for g := range 8 {
			wg.Go(func() {
				key := "g" + string(rune('0'+g))
				out := make([]sluice.Decision, 2)
				for range 20 {
					ok, err := b.TakeAll(e.ctx(), []sluice.Request{{Policy: own, Key: key, N: 1}, {Policy: shared, Key: "s", N: 1}}, out)
					if err != nil {
						t.Errorf("TakeAll: %v", err)
						return
					}
					if ok {
						admitted[g]++
					}
				}
			})
		}
		wg.Wait()
		var total int64
		for g, n := range admitted {
			total += n
			d, err := e.store.Peek(e.ctx(), own, "g"+string(rune('0'+g)))
			if err != nil {
				t.Fatal(err)
			}
			if used := 1000 - d.Remaining; used != n {
				t.Errorf("goroutine %d: own key charged %d, want %d (its admitted batches)", g, used, n)
			}
		}
		if total != 40 {
			t.Errorf("admitted %d batches, want exactly 40", total)
		}
	})
}
