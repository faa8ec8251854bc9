package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestTakeAllMatchesTake compares the store's TakeAll with Take on a twin
// store: random batches of policies of one to three limits of every
// algorithm, costs above one, a few keys, and time moving on. An admitted
// batch must decide and charge each request exactly as Take does on the
// same state (no two requests of a batch share a limit's state, so order
// does not matter); a denied batch must charge nothing, and the request it
// reports as denied must be denied by Take too.
func TestTakeAllMatchesTake(t *testing.T) {
	ctx := context.Background()
	algs := []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog}
	rng := rand.New(rand.NewPCG(11, 12))
	var policies []*sluice.Policy
	for i := range 12 {
		var limits []sluice.Limit
		for range 1 + rng.IntN(3) {
			limits = append(limits, sluice.Limit{
				Algorithm: algs[rng.IntN(len(algs))],
				Count:     int64(2 + rng.IntN(6)),
				Period:    time.Duration(1+rng.IntN(10)) * time.Second,
			})
		}
		p, err := sluice.NewPolicy(fmt.Sprint("p", i), limits...)
		if err != nil {
			t.Fatal(err)
		}
		policies = append(policies, p)
	}
	batched, clk := testStore(t, Options{Shards: 4})
	single, clk2 := testStore(t, Options{Shards: 4})
	keys := []string{"a", "b", "c"}
	admitted, denied := 0, 0
	for step := range 3000 {
		// Distinct policies, so that no two requests share a limit's state.
		perm := rng.Perm(len(policies))[:2+rng.IntN(3)]
		reqs := make([]sluice.Request, len(perm))
		for i, pi := range perm {
			reqs[i] = sluice.Request{Policy: policies[pi], Key: keys[rng.IntN(len(keys))], N: 1 + int64(rng.IntN(2))}
		}
		out := make([]sluice.Decision, len(reqs))
		ok, err := batched.TakeAll(ctx, reqs, out)
		if err != nil {
			t.Fatalf("step %d: TakeAll: %v", step, err)
		}
		if ok {
			admitted++
			for i, r := range reqs {
				d, err := single.Take(ctx, r.Policy, r.Key, r.N)
				if err != nil || d != out[i] {
					t.Fatalf("step %d, request %d (%s, %q, cost %d): TakeAll decided %+v, Take %+v, %v", step, i, r.Policy.Name(), r.Key, r.N, out[i], d, err)
				}
			}
		} else {
			denied++
			by := -1
			for i := range out {
				if !out[i].Allowed && !out[i].Time.IsZero() {
					by = i
					break
				}
			}
			if by < 0 {
				t.Fatalf("step %d: batch denied, but no request reported denied: %+v", step, out)
			}
			r := reqs[by]
			if d, err := single.Take(ctx, r.Policy, r.Key, r.N); err != nil || d.Allowed {
				t.Fatalf("step %d: TakeAll denied request %d (%s, %q, cost %d) with %+v; Take admits it: %+v, %v", step, by, r.Policy.Name(), r.Key, r.N, out[by], d, err)
			}
		}
		// Whether admitted or not, both stores now hold the same states.
		for _, p := range policies {
			for _, k := range keys {
				a, _ := batched.Peek(ctx, p, k)
				b, _ := single.Peek(ctx, p, k)
				if a != b {
					t.Fatalf("step %d: %s, %q: batched store %+v, single store %+v", step, p.Name(), k, a, b)
				}
			}
		}
		d := time.Duration(rng.IntN(1500)) * time.Millisecond
		clk.Advance(d)
		clk2.Advance(d)
	}
	if admitted < 300 || denied < 300 {
		t.Errorf("%d batches admitted and %d denied; want at least 300 of each for the test to mean anything", admitted, denied)
	}
}
