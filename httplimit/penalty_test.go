package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// A login rule with a penalty blocks an account that keeps failing: the
// request over the limit blocks it for a minute, and the first refusal
// after the block (the limit still has no room) for ten, whether the rule
// counts failures after the response or reserves before.
func TestPenaltyBlocksRepeatedFailures(t *testing.T) {
	stores := map[string]func(t *testing.T, clk *clock.Fake) sluice.Store{
		"memstore": func(t *testing.T, clk *clock.Fake) sluice.Store {
			s := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redisstore": func(t *testing.T, clk *clock.Fake) sluice.Store {
			srv := redistest.Start(t)
			s, err := redisstore.New(redisstore.Options{URL: srv.URL(), Clock: clk, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatalf("redisstore.New: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, mode := range []httplimit.CountMode{httplimit.CountAfter, httplimit.CountReserve} {
		for name, open := range stores {
			t.Run(mode.String()+"/"+name, func(t *testing.T) {
				clk := clock.NewFake(t0)
				var hits atomic.Int64
				lim, err := httplimit.New(httplimit.Options{
					Store: open(t, clk),
					Rules: []httplimit.Rule{{
						Name:    "login",
						Match:   httplimit.Match{Paths: []string{"/login"}},
						Key:     []httplimit.KeyPart{httplimit.Header("X-Account")},
						Limit:   limit(sluice.GCRA, 5, 15*time.Minute),
						Count:   &httplimit.CountOn{Statuses: []int{401}, Mode: mode},
						Penalty: &sluice.Penalty{Blocks: []time.Duration{time.Minute, 10 * time.Minute}, Forget: time.Hour},
					}},
				})
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				srv := httptest.NewServer(lim.Handler(statusUpstream(&hits)))
				t.Cleanup(srv.Close)
				for i := range 5 {
					if resp := post(t, srv, "alice", "want=401"); resp.StatusCode != 401 {
						t.Fatalf("failure %d: got %d, want 401", i, resp.StatusCode)
					}
				}
				expect := func(what, retry string) {
					t.Helper()
					resp := post(t, srv, "alice", "want=401")
					if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != retry {
						t.Fatalf("%s: got %d with Retry-After %q, want 429 with %s", what, resp.StatusCode, resp.Header.Get("Retry-After"), retry)
					}
				}
				expect("the offence", "60")
				clk.Advance(30 * time.Second)
				expect("blocked", "30")
				clk.Advance(30 * time.Second)
				expect("the second offence", "600")
				if mode == httplimit.CountAfter {
					// The admin view: the block shows, and a reset of
					// the key lifts it (and forgets the failures).
					key, err := lim.RuleKey("login", []string{"alice"})
					if err != nil {
						t.Fatal(err)
					}
					st, err := lim.PeekKey(t.Context(), "login", key, nil)
					if err != nil || len(st) != 1 || st[0].Decision.Allowed || st[0].Decision.RetryAfter != 10*time.Minute {
						t.Fatalf("PeekKey while blocked: %+v, %v; want blocked for 10m", st, err)
					}
					if err := lim.ResetKey(t.Context(), "login", key, nil); err != nil {
						t.Fatal(err)
					}
					if resp := post(t, srv, "alice", "want=401"); resp.StatusCode != 401 {
						t.Fatalf("after ResetKey: got %d, want 401", resp.StatusCode)
					}
					return
				}
				before := hits.Load()
				clk.Advance(10 * time.Minute)
				// 11 minutes on, three of the five failures have been
				// paid off: the block charged nothing.
				for i := range 3 {
					if resp := post(t, srv, "alice", "want=401"); resp.StatusCode != 401 {
						t.Fatalf("after the block, failure %d: got %d, want 401", i, resp.StatusCode)
					}
				}
				if hits.Load() != before+3 {
					t.Errorf("after the block: %d requests reached the upstream, want 3", hits.Load()-before)
				}
				if resp := post(t, srv, "bob", "want=401"); resp.StatusCode != 401 {
					t.Errorf("another account: got %d, want 401", resp.StatusCode)
				}
			})
		}
	}
}

func TestPenaltyValidation(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	for _, r := range []httplimit.Rule{
		{Name: "x", Limit: limit(sluice.GCRA, 5, time.Minute), Penalty: &sluice.Penalty{Forget: time.Hour}},
		{Name: "x", Action: httplimit.Delay, MaxDelay: time.Second, Limit: limit(sluice.GCRA, 5, time.Minute), Penalty: &sluice.Penalty{Blocks: []time.Duration{time.Minute}, Forget: time.Hour}},
		{Name: "x", Action: httplimit.Exempt, Penalty: &sluice.Penalty{Blocks: []time.Duration{time.Minute}, Forget: time.Hour}},
	} {
		_, err := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{r}})
		if err == nil || !errors.Is(err, httplimit.ErrInvalidRule) && !errors.Is(err, sluice.ErrInvalidPenalty) {
			t.Errorf("rule %+v: got %v, want an invalid rule or penalty", r, err)
		}
	}
}
