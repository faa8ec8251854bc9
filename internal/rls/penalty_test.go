package rls

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// penaltyConfig blocks a login that keeps failing: two per minute, then 1
// minute, 10 minutes, an hour of block, forgotten after a quiet day.
const penaltyConfig = `
domain: test
descriptors:
  - key: login
    rate_limit:
      requests_per_unit: 2
      unit: minute
      penalty: {after: 1, blocks: [1m, 10m, 1h], forget: 24h}
  - key: remote_address
    rate_limit: {requests_per_unit: 100, unit: minute}
`

// penaltyStores are the stores a penalty is tested on, each with a fake
// clock at t0.
func penaltyStores(t *testing.T) map[string]func(t *testing.T) (sluice.Store, *clock.Fake) {
	t.Helper()
	return map[string]func(t *testing.T) (sluice.Store, *clock.Fake){
		"memstore": func(t *testing.T) (sluice.Store, *clock.Fake) {
			c := clock.NewFake(t0)
			st := memstore.New(memstore.Options{Clock: c})
			t.Cleanup(func() { st.Close() })
			return st, c
		},
		"redis": func(t *testing.T) (sluice.Store, *clock.Fake) {
			srv := redistest.Start(t)
			c := clock.NewFake(t0)
			st, err := redisstore.New(redisstore.Options{URL: srv.URL(), Clock: c, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st, c
		},
	}
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}

// TestPenalty escalates a descriptor's blocks over several offences and a
// quiet period, over gRPC, on the memory store and on Redis: a blocked key
// is OVER_LIMIT with the block's end as duration_until_reset and
// Retry-After even when its limit's window has passed, charges nothing
// else of the request, shows in PeekDescriptor and is lifted by
// ResetDescriptor.
func TestPenalty(t *testing.T) {
	for name, newStore := range penaltyStores(t) {
		t.Run(name, func(t *testing.T) {
			st, clk := newStore(t)
			h := start(t, Options{Store: st, Rules: newSet(t, penaltyConfig)})
			login := func() *rlsv3.RateLimitResponse {
				t.Helper()
				return h.call(t, request(desc("login", "alice"), desc("remote_address", "192.0.2.1")))
			}
			wantBlocked := func(resp *rlsv3.RateLimitResponse, left time.Duration) {
				t.Helper()
				wantCodes(t, resp, over, over, ok)
				if got := resp.Statuses[0].DurationUntilReset.AsDuration(); got != left {
					t.Fatalf("duration_until_reset %v, want %v (the block's end)", got, left)
				}
				if got, want := header(resp, engine.NameRetryAfter), strconv.FormatInt(int64(left/time.Second), 10); got != want {
					t.Fatalf("Retry-After %q, want %s", got, want)
				}
			}
			// t0 is 10 s into a minute: two logins pass, the third is an
			// offence, blocked for a minute from now.
			wantCodes(t, login(), ok, ok, ok)
			wantCodes(t, login(), ok, ok, ok)
			wantBlocked(login(), time.Minute)
			addressLeft := func(want uint32) {
				t.Helper()
				if resp := h.call(t, request(hits(desc("remote_address", "192.0.2.1"), 0))); resp.Statuses[0].LimitRemaining != want {
					t.Fatalf("address remaining %d, want %d", resp.Statuses[0].LimitRemaining, want)
				}
			}
			addressLeft(98) // the rejected request charged nothing
			// 55 s later the window has passed, the block has not.
			clk.Advance(55 * time.Second)
			wantBlocked(login(), 5*time.Second)
			addressLeft(100) // a new window, and the blocked request charged nothing
			ks, err := h.svc.PeekDescriptor(context.Background(), "test", []descriptor.Entry{{Key: "login", Value: "alice"}})
			if err != nil || ks.Decision.Allowed || ks.Decision.RetryAfter != 5*time.Second {
				t.Fatalf("PeekDescriptor: %+v, %v; want a block of 5s", ks.Decision, err)
			}
			// Once the block ends, the second offence blocks for 10 minutes.
			clk.Advance(5 * time.Second)
			wantCodes(t, login(), ok, ok, ok)
			wantCodes(t, login(), ok, ok, ok)
			wantBlocked(login(), 10*time.Minute)
			clk.Advance(9 * time.Minute)
			wantBlocked(login(), time.Minute)
			// The third offence, and every later one, an hour.
			clk.Advance(time.Minute)
			login()
			login()
			wantBlocked(login(), time.Hour)
			// The admin's reset lifts the block and the offences.
			if _, err := h.svc.ResetDescriptor(context.Background(), "test", []descriptor.Entry{{Key: "login", Value: "alice"}}); err != nil {
				t.Fatal(err)
			}
			wantCodes(t, login(), ok, ok, ok)
			wantCodes(t, login(), ok, ok, ok)
			wantBlocked(login(), time.Minute)
			// A quiet day after the block forgets the offences: a minute again.
			clk.Advance(time.Minute + 24*time.Hour)
			login()
			login()
			wantBlocked(login(), time.Minute)
			// Another key was never touched by alice's blocks.
			wantCodes(t, h.call(t, request(desc("login", "bob"))), ok, ok)
		})
	}
}

// TestPenaltyCheckStrikes: a penalized descriptor checked with hits_addend
// 0 and refused is a strike, as the gateway's refused count checks are, so
// that Envoy's check-then-charge-at-stream-end pattern still blocks.
func TestPenaltyCheckStrikes(t *testing.T) {
	h := start(t, Options{Rules: newSet(t, penaltyConfig)})
	check := func() *rlsv3.RateLimitResponse {
		t.Helper()
		return h.call(t, request(hits(desc("login", "carol"), 0)))
	}
	wantCodes(t, check(), ok, ok) // a check charges nothing
	wantCodes(t, h.call(t, request(desc("login", "carol"))), ok, ok)
	wantCodes(t, h.call(t, request(desc("login", "carol"))), ok, ok)
	resp := check()
	wantCodes(t, resp, over, over)
	if got := resp.Statuses[0].DurationUntilReset.AsDuration(); got != time.Minute {
		t.Fatalf("duration_until_reset %v, want the first offence's block of 1m", got)
	}
	// 55 s on, the window (a minute from t0-10s) has passed: the block holds.
	h.clock.Advance(55 * time.Second)
	wantCodes(t, check(), over, over)
}
