package httplimit_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestStoreFailingClosedAnswers503 stops the Redis of a store whose
// OnError is Deny: its denials then say nothing about the client's quota,
// and the limiter answers them as the server's failure (503, Retry-After,
// the temporary-reduced-capacity problem type, no rate-limit fields), with
// the rules' outcome error, not limited. Reject rules (decided together)
// and Delay rules (reserved) alike.
func TestStoreFailingClosedAnswers503(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(redisstore.Options{URL: srv.URL(), OnError: redisstore.Deny, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, rule := range []httplimit.Rule{
		{Name: "per-ip", Limit: limit(sluice.FixedWindow, 100, time.Hour)},
		{Name: "export", Action: httplimit.Delay, MaxDelay: time.Second, Limit: limit(sluice.GCRA, 100, time.Hour)},
		{Name: "cheap", Action: httplimit.Soft, Limit: limit(sluice.FixedWindow, 100, time.Hour)},
	} {
		t.Run(rule.Action.String(), func(t *testing.T) {
			obs := &recorder{}
			lim, err := httplimit.New(httplimit.Options{Store: store, Observer: obs, Rules: []httplimit.Rule{rule}})
			if err != nil {
				t.Fatal(err)
			}
			served := 0
			h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
			do := func() *http.Response {
				r := httptest.NewRequest("GET", "/", nil)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Result()
			}
			if rule.Action == httplimit.Reject { // the first subtest; Redis is still up
				eq(t, "status with Redis up", do().StatusCode, 200)
			}
			srv.Stop()
			if rule.Action == httplimit.Soft {
				// A Soft rule never blocks: the request passes unmarked,
				// since no one knows whether it is over the limit.
				var marked []string
				h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					marked = append(marked, r.Header.Get("Sluice-Over-Limit"))
				}))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				eq(t, "status", w.Code, 200)
				eq(t, "marked over the soft limit", strings.Join(marked, ","), "")
				ev := obs.last(t)
				eq(t, "rule outcome", ev.Rules[0].Outcome, httplimit.OutcomeError)
				if !errors.Is(ev.Rules[0].Err, httplimit.ErrFailedClosed) {
					t.Errorf("rule error: got %v, want ErrFailedClosed", ev.Rules[0].Err)
				}
				return
			}
			for i := range 3 { // the first fails on Redis, the next on the open circuit breaker
				r := do()
				eq(t, "status with Redis down", r.StatusCode, http.StatusServiceUnavailable)
				secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
				if err != nil || secs < 1 {
					t.Errorf("request %d: Retry-After %q, want whole seconds, at least 1", i, r.Header.Get("Retry-After"))
				}
				for _, f := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Remaining", "X-RateLimit-Limit"} {
					if v := r.Header.Get(f); v != "" {
						t.Errorf("request %d: %s %q on a 503: the client used none of its quota", i, f, v)
					}
				}
				var p struct {
					Type       string `json:"type"`
					Status     int    `json:"status"`
					RetryAfter int    `json:"retry_after"`
				}
				if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
					t.Fatalf("problem body: %v", err)
				}
				eq(t, "problem type", p.Type, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity")
				eq(t, "problem status", p.Status, 503)
				eq(t, "problem retry_after", p.RetryAfter, secs)
				ev := obs.last(t)
				eq(t, "request outcome", ev.Outcome, httplimit.OutcomeError)
				eq(t, "rule outcome", ev.Rules[0].Outcome, httplimit.OutcomeError)
				if !errors.Is(ev.Rules[0].Err, httplimit.ErrFailedClosed) {
					t.Errorf("rule error: got %v, want ErrFailedClosed", ev.Rules[0].Err)
				}
			}
			eq(t, "requests served with Redis down", served, map[httplimit.Action]int{httplimit.Reject: 1, httplimit.Delay: 0}[rule.Action])
		})
	}
}

// Concurrency rules and the Concurrent middleware answer 503, not 429,
// when a store that fails closed refuses a slot for Redis being down; a
// rule's rate decided with the slot too.
func TestConcurrencyFailingClosedAnswers503(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(redisstore.Options{URL: srv.URL(), OnError: redisstore.Deny, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv.Stop()
	served := 0
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ })
	c, err := sluice.NewConcurrency(store, "mw", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	handlers := map[string]http.Handler{"middleware": httplimit.Concurrent(c, httplimit.ConcurrencyOptions{})(next)}
	for name, rate := range map[string]sluice.Limit{"rule": {}, "rule with rate": limit(sluice.TokenBucket, 10, time.Hour)} {
		lim, err := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{{
			Name: "slots", Limit: rate, Concurrency: &httplimit.ConcurrencyRule{Limit: 2, Lease: time.Minute}}}})
		if err != nil {
			t.Fatal(err)
		}
		handlers[name] = lim.Handler(next)
	}
	for name, h := range handlers {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != http.StatusServiceUnavailable {
			t.Errorf("%s: got %d, want 503", name, w.Code)
		}
	}
	if served != 0 {
		t.Errorf("served %d requests, want none", served)
	}
}
