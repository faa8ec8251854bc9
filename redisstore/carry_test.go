package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/storekit"
)

// Counters survive a change of definition exactly as package algo carries
// them: one policy name whose limits keep changing (algorithm, count,
// period, burst, between plain and big-number arithmetic, so between
// plain.lua and sluice.lua), driven with the same clock and traffic on
// Redis and on memstore, makes the same decisions.
func TestCarryMatchesGo(t *testing.T) {
	srv := redistest.Start(t)
	defs := [][]sluice.Limit{
		{{Algorithm: sluice.GCRA, Count: 3, Period: time.Second}},
		{{Algorithm: sluice.GCRA, Count: 3, Period: time.Second, Burst: 6}},
		{{Algorithm: sluice.TokenBucket, Count: 3, Period: time.Second, Burst: 2}},
		{{Algorithm: sluice.TokenBucket, Count: 5, Period: 2 * time.Second}},
		{{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Second}},
		{{Algorithm: sluice.FixedWindow, Count: 3, Period: 10 * time.Second}},
		{{Algorithm: sluice.SlidingWindow, Count: 10, Period: 7 * time.Second}},
		{{Algorithm: sluice.SlidingWindow, Count: 4, Period: 7 * time.Second}},
		{{Algorithm: sluice.SlidingLog, Count: 5, Period: time.Second}},
		{{Algorithm: sluice.SlidingLog, Count: 3, Period: time.Second}},
		{{Algorithm: sluice.SlidingLog, Count: 4, Period: 3 * time.Second}},
		// Big-number arithmetic: these policies run sluice.lua.
		{{Algorithm: sluice.TokenBucket, Count: 999999937, Period: 24 * time.Hour, Burst: 999999937}},
		{{Algorithm: sluice.TokenBucket, Count: 999999937, Period: 24 * time.Hour, Burst: 5}},
		{{Algorithm: sluice.SlidingWindow, Count: 1_000_000_007, Period: 24 * time.Hour}},
		{
			{Algorithm: sluice.GCRA, Count: 3, Period: time.Second},
			{Algorithm: sluice.SlidingLog, Count: 4, Period: 3 * time.Second},
		},
		{
			{Algorithm: sluice.SlidingWindow, Count: 4, Period: 7 * time.Second},
			{Algorithm: sluice.TokenBucket, Count: 999999937, Period: 24 * time.Hour, Burst: 999999937},
		},
	}
	var policies []*sluice.Policy
	for _, limits := range defs {
		policies = append(policies, policy(t, "carry", limits...))
	}
	advances := []time.Duration{0, time.Microsecond, 137 * time.Microsecond, 10 * time.Millisecond, 300 * time.Millisecond, time.Second, 4 * time.Second, time.Minute}
	ctx := context.Background()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			clk := clock.NewFake(epoch)
			mem := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
			defer mem.Close()
			red := newStore(t, srv, clk, redisstore.Options{DenyCache: -1, Prefix: fmt.Sprintf("carry%d", seed)})
			rng := rand.New(rand.NewPCG(seed, 11))
			p := policies[0]
			type reserved struct {
				key           string
				n             int64
				atGot, atWant time.Time // each store's own time for the request
			}
			var held []reserved
			for step := range 600 {
				if rng.IntN(4) == 0 {
					p = policies[rng.IntN(len(policies))]
				}
				clk.Advance(advances[rng.IntN(len(advances))])
				key := fmt.Sprintf("k%d", rng.IntN(2))
				capacity := storekit.Of(p).Rule(0).Capacity()
				for i := range p.Len() {
					capacity = min(capacity, storekit.Of(p).Rule(i).Capacity())
				}
				n := 1 + rng.Int64N(min(capacity, 3))
				var got, want sluice.Decision
				var gerr, werr error
				op := "take"
				switch r := rng.IntN(10); {
				case r < 2:
					op = "peek"
					want, werr = mem.Peek(ctx, p, key)
					got, gerr = red.Peek(ctx, p, key)
				case r < 4 && p.CanReserve() && capacity > 1:
					op = "reserve"
					n = 1 + rng.Int64N(min(capacity-1, 3))
					wait := advances[rng.IntN(len(advances))]
					want, werr = mem.Reserve(ctx, p, key, n, wait)
					got, gerr = red.Reserve(ctx, p, key, n, wait)
					if werr == nil && want.Allowed && got.Allowed {
						held = append(held, reserved{key, n, got.Time.Add(got.Delay), want.Time.Add(want.Delay)})
					}
				case r < 5 && len(held) > 0 && p.CanReserve():
					// A reservation made under another definition, perhaps.
					c := held[len(held)-1]
					held = held[:len(held)-1]
					werr = mem.Cancel(ctx, p, c.key, c.n, c.atWant)
					gerr = red.Cancel(ctx, p, c.key, c.n, c.atGot)
					if werr != nil || gerr != nil {
						t.Fatalf("step %d: cancel errors: memstore %v, redis %v", step, werr, gerr)
					}
					op = "cancel"
					want, werr = mem.Peek(ctx, p, c.key)
					got, gerr = red.Peek(ctx, p, c.key)
				case r < 6:
					op = "reset"
					werr = mem.Reset(ctx, p, key)
					gerr = red.Reset(ctx, p, key)
				default:
					want, werr = mem.Take(ctx, p, key, n)
					got, gerr = red.Take(ctx, p, key, n)
				}
				if werr != nil || gerr != nil {
					t.Fatalf("step %d: errors: memstore %v, redis %v", step, werr, gerr)
				}
				same := got.Allowed == want.Allowed && got.Limit == want.Limit && got.Remaining == want.Remaining &&
					got.Index == want.Index && !got.Degraded && got.Time.Equal(want.Time) &&
					roundedUp(got.RetryAfter, want.RetryAfter) && roundedUp(got.ResetAfter, want.ResetAfter) &&
					roundedUp(got.Delay, want.Delay)
				if !same {
					t.Fatalf("step %d (%s, key %s, cost %d, limits %v): redis %+v\nwant (memstore) %+v", step, op, key, n, p.Limits(), got, want)
				}
			}
		})
	}
}

// Key names hold the limit's identity, not its definition: a changed limit
// keeps its keys, each state key records the definition that wrote it, Peek
// carries without writing (the old definition stays recorded), a decision
// stores the carried state under the new one with the new rule's TTL, and
// Reset removes the state whatever definition wrote it.
func TestCarryKeys(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	store := newStore(t, srv, clk, redisstore.Options{DenyCache: -1, Prefix: "ck"})
	ctx := context.Background()
	hourly := policy(t, "api", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10, Period: time.Hour},
		sluice.Limit{Algorithm: sluice.SlidingLog, Count: 10, Period: time.Hour})
	for range 4 {
		if d, err := store.Take(ctx, hourly, "10.0.0.1", 1); err != nil || !d.Allowed {
			t.Fatalf("take under %v: %+v, %v", hourly.Limits(), d, err)
		}
	}
	state, log, entries := "ck:{3:api:10.0.0.1}:0", "ck:{3:api:10.0.0.1}:1", "ck:{3:api:10.0.0.1}:1:m"
	if got := strings.Join(srv.DoList(t, "KEYS", "ck:*"), " "); len(srv.DoList(t, "KEYS", "ck:*")) != 3 ||
		!strings.Contains(got, state) || !strings.Contains(got, log) || !strings.Contains(got, entries) {
		t.Fatalf("keys: %s, want %s, %s and %s", got, state, log, entries)
	}
	if v := srv.Do(t, "GET", state); !strings.HasPrefix(v, "3:10:3600000000:10;") {
		t.Errorf("state key %s holds %q, want the definition 3:10:3600000000:10; first", state, v)
	}

	// Lowered to 3 a minute, now a GCRA and a fixed window.
	clk.Advance(10 * time.Second)
	lowered := policy(t, "api", sluice.Limit{Algorithm: sluice.GCRA, Count: 3, Period: time.Minute},
		sluice.Limit{Algorithm: sluice.FixedWindow, Count: 3, Period: time.Minute})
	d, err := store.Peek(ctx, lowered, "10.0.0.1")
	if err != nil || d.Allowed || d.Remaining != 0 {
		t.Errorf("peek under the lowered limits: %+v, %v, want denied with 0 remaining (4 used, capped at 3)", d, err)
	}
	if v := srv.Do(t, "GET", state); !strings.HasPrefix(v, "3:10:3600000000:10;") {
		t.Errorf("after Peek: state key holds %q, want the old definition still (Peek writes nothing)", v)
	}
	d, err = store.Take(ctx, lowered, "10.0.0.1", 1)
	if err != nil || d.Allowed || d.Index != 1 || d.RetryAfter != 50*time.Second {
		t.Errorf("take under the lowered limits: %+v, %v, want denied by limit 1, retry after 50s (the end of the fixed window's minute)", d, err)
	}
	if v := srv.Do(t, "GET", state); !strings.HasPrefix(v, "2:3:60000000:3;") {
		t.Errorf("after a denied Take: state key holds %q, want the carried state under 2:3:60000000:3;", v)
	}
	if v := srv.Do(t, "GET", log); !strings.HasPrefix(v, "3:3:60000000:3;") {
		t.Errorf("after a denied Take: the former log's key holds %q, want a fixed window under 3:3:60000000:3;", v)
	}
	if got := srv.Do(t, "EXISTS", entries); got != "0" {
		t.Errorf("the former log's entries: EXISTS = %s, want 0 (a fixed window has none)", got)
	}
	// TTLs follow the new rules (plus the hour of slack of a caller's
	// clock): a full GCRA bucket of 3 a minute empties in 60s, the fixed
	// window of the minute containing now ends in 50s.
	slack := int64(time.Hour / time.Millisecond)
	if got := pttl(t, srv, state) - slack; got > 60_000 || got < 59_000 {
		t.Errorf("carried GCRA state: PTTL %dms beyond the slack, want 60000", got)
	}
	if got := pttl(t, srv, log) - slack; got > 50_000 || got < 49_000 {
		t.Errorf("carried fixed window: PTTL %dms beyond the slack, want 50000", got)
	}

	if err := store.Reset(ctx, hourly, "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if keys := srv.DoList(t, "KEYS", "ck:*"); len(keys) != 0 {
		t.Errorf("after Reset under the old definition: keys %q remain", keys)
	}
}
