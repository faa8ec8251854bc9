package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// countStores are the stores count-by-outcome is checked on, each on a
// fake clock. Redis's Timeout is one a loaded machine cannot outrun: a
// decision that timed out would fall back to the local store, and these
// tests are about what is counted, not about Redis's speed.
var countStores = map[string]func(t *testing.T) sluice.Store{
	"memstore": func(t *testing.T) sluice.Store {
		s := memstore.New(memstore.Options{Clock: clock.NewFake(t0), SweepInterval: -1})
		t.Cleanup(func() { s.Close() })
		return s
	},
	"redisstore": func(t *testing.T) sluice.Store {
		srv := redistest.Start(t)
		s, err := redisstore.New(redisstore.Options{URL: srv.URL(), Clock: clock.NewFake(t0), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("redisstore.New: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	},
}

// loginServer serves a limiter with one login rule in front of an upstream
// that answers with the status in the request's "want" query parameter, and
// sets Sluice-Count: 1 when "fail" is present. hits counts the requests that
// reached the upstream.
func loginServer(t *testing.T, store sluice.Store, count *httplimit.CountOn, upstream http.HandlerFunc) (*httptest.Server, *recorder) {
	t.Helper()
	obs := &recorder{}
	lim, err := httplimit.New(httplimit.Options{
		Store:    store,
		Observer: obs,
		Rules: []httplimit.Rule{{
			Name:  "login",
			Match: httplimit.Match{Paths: []string{"/login"}},
			Key:   []httplimit.KeyPart{httplimit.Header("X-Account"), httplimit.IP()},
			Limit: limit(sluice.GCRA, 5, 15*time.Minute),
			Count: count,
		}},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(lim.Handler(upstream))
	t.Cleanup(srv.Close)
	return srv, obs
}

func post(t *testing.T, srv *httptest.Server, account, query string) *http.Response {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, srv.URL+"/login?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-Account", account)
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatalf("POST /login: %v", err)
	}
	// The whole body, so that the request has been observed.
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// statusUpstream answers with the status in "want" (200 by default) and
// counts the requests that reach it.
func statusUpstream(hits *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Query().Has("fail") {
			w.Header().Set("Sluice-Count", "1")
		}
		switch r.URL.Query().Get("want") {
		case "401":
			w.WriteHeader(http.StatusUnauthorized)
		case "403":
			w.WriteHeader(http.StatusForbidden)
		}
		w.Write([]byte("done"))
	}
}

func TestCountOnlyFailedLogins(t *testing.T) {
	for _, mode := range []httplimit.CountMode{httplimit.CountAfter, httplimit.CountReserve} {
		for name, open := range countStores {
			t.Run(mode.String()+"/"+name, func(t *testing.T) {
				var hits atomic.Int64
				srv, obs := loginServer(t, open(t), &httplimit.CountOn{Statuses: []int{401}, Classes: []int{5}, Mode: mode}, statusUpstream(&hits))
				// Successful logins never count.
				for i := range 20 {
					if resp := post(t, srv, "alice", ""); resp.StatusCode != 200 {
						t.Fatalf("success %d: got %d, want 200", i, resp.StatusCode)
					}
				}
				if got := obs.last(t).Rules[0].Outcome; got != httplimit.OutcomeNotCounted {
					t.Fatalf("a success's rule outcome: got %v, want not_counted", got)
				}
				// 403 matches neither 401 nor 5xx.
				if resp := post(t, srv, "alice", "want=403"); resp.StatusCode != 403 {
					t.Fatalf("got %d, want 403", resp.StatusCode)
				}
				for i := range 5 {
					if resp := post(t, srv, "alice", "want=401"); resp.StatusCode != 401 {
						t.Fatalf("failure %d: got %d, want 401", i, resp.StatusCode)
					}
					if got := obs.last(t).Rules[0].Outcome; got != httplimit.OutcomeAllowed {
						t.Fatalf("failure %d: rule outcome %v, want allowed", i, got)
					}
				}
				before := hits.Load()
				resp := post(t, srv, "alice", "")
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("after five failures: got %d, want 429", resp.StatusCode)
				}
				if hits.Load() != before {
					t.Fatal("the rejected request reached the upstream")
				}
				if got := obs.last(t).Rules[0].Outcome; got != httplimit.OutcomeLimited {
					t.Fatalf("rejected: rule outcome %v, want limited", got)
				}
				// Another account from the same address is not affected.
				if resp := post(t, srv, "bob", "want=401"); resp.StatusCode != 401 {
					t.Fatalf("bob: got %d, want 401", resp.StatusCode)
				}
			})
		}
	}
}

func TestCountByResponseHeader(t *testing.T) {
	for _, mode := range []httplimit.CountMode{httplimit.CountAfter, httplimit.CountReserve} {
		t.Run(mode.String(), func(t *testing.T) {
			var hits atomic.Int64
			srv, _ := loginServer(t, countStores["memstore"](t), &httplimit.CountOn{Header: "Sluice-Count", Mode: mode}, statusUpstream(&hits))
			// 401s without the header do not count.
			for range 10 {
				post(t, srv, "alice", "want=401")
			}
			for i := range 5 {
				resp := post(t, srv, "alice", "fail")
				if resp.StatusCode != 200 {
					t.Fatalf("marked %d: got %d, want 200", i, resp.StatusCode)
				}
				if v, ok := resp.Header["Sluice-Count"]; ok {
					t.Fatalf("the client received Sluice-Count: %q", v)
				}
			}
			if resp := post(t, srv, "alice", ""); resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("after five marked responses: got %d, want 429", resp.StatusCode)
			}
		})
	}
}

// inFlight runs n concurrent failed logins for one account against an
// upstream that holds every request it gets until all n have either
// reached it or been rejected, and returns how many reached it.
func inFlight(t *testing.T, store sluice.Store, mode httplimit.CountMode, n int) int64 {
	t.Helper()
	var hits, rejected atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	done := func() {
		if hits.Load()+rejected.Load() == int64(n) {
			once.Do(func() { close(release) })
		}
	}
	srv, _ := loginServer(t, store, &httplimit.CountOn{Statuses: []int{401}, Mode: mode}, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		done()
		<-release
		w.WriteHeader(http.StatusUnauthorized)
	})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := http.NewRequest(http.MethodPost, srv.URL+"/login", nil)
			r.Header.Set("X-Account", "alice")
			resp, err := srv.Client().Do(r)
			if err != nil {
				t.Errorf("POST: %v", err)
				rejected.Add(1)
				done()
				return
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusTooManyRequests:
				rejected.Add(1)
				done()
			case http.StatusUnauthorized:
			default:
				t.Errorf("got %d, want 401 or 429", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	if resp := post(t, srv, "alice", ""); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after the burst: got %d, want 429", resp.StatusCode)
	}
	return hits.Load()
}

func TestCountInFlightBound(t *testing.T) {
	const n = 20
	for name, open := range countStores {
		t.Run("after/"+name, func(t *testing.T) {
			// Every request passes the check before any is charged: the
			// limit is exceeded by the number in flight, no more.
			if got := inFlight(t, open(t), httplimit.CountAfter, n); got != n {
				t.Fatalf("%d of %d concurrent requests reached the upstream, want all (the documented bound)", got, n)
			}
		})
		t.Run("reserve/"+name, func(t *testing.T) {
			if got := inFlight(t, open(t), httplimit.CountReserve, n); got != 5 {
				t.Fatalf("%d of %d concurrent requests reached the upstream, want exactly the limit, 5", got, n)
			}
		})
	}
}

func TestCountValidation(t *testing.T) {
	base := func(c *httplimit.CountOn) httplimit.Rule {
		return httplimit.Rule{Name: "r", Limit: limit(sluice.GCRA, 5, time.Minute), Count: c}
	}
	tests := []struct {
		name string
		rule httplimit.Rule
		want string
	}{
		{"no condition", base(&httplimit.CountOn{}), "needs a status"},
		{"status", base(&httplimit.CountOn{Statuses: []int{99}}), "status 99"},
		{"class", base(&httplimit.CountOn{Classes: []int{6}}), "class 6"},
		{"header", base(&httplimit.CountOn{Header: "Bad Header"}), "not a valid header name"},
		{"mode", base(&httplimit.CountOn{Statuses: []int{401}, Mode: 9}), "unknown count mode"},
		{"reserve on a window", httplimit.Rule{Name: "r", Limit: limit(sluice.FixedWindow, 5, time.Minute), Count: &httplimit.CountOn{Statuses: []int{401}, Mode: httplimit.CountReserve}}, "needs algorithm token_bucket or gcra"},
		{"reserve on a window tier", httplimit.Rule{Name: "r", Limit: limit(sluice.GCRA, 5, time.Minute), Tiers: map[string]sluice.Limit{"pro": limit(sluice.SlidingLog, 5, time.Minute)}, Count: &httplimit.CountOn{Statuses: []int{401}, Mode: httplimit.CountReserve}}, `tier "pro"`},
		{"shadow", httplimit.Rule{Name: "r", Action: httplimit.Shadow, Limit: limit(sluice.GCRA, 5, time.Minute), Count: &httplimit.CountOn{Statuses: []int{401}}}, "needs action reject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rule.Validate()
			if !errors.Is(err, httplimit.ErrInvalidRule) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrInvalidRule mentioning %q", err, tt.want)
			}
		})
	}
	ok := base(&httplimit.CountOn{Statuses: []int{401}, Classes: []int{4}, Header: "Sluice-Count"})
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid rule: %v", err)
	}
	if _, err := httplimit.ParseCountMode("later"); !errors.Is(err, httplimit.ErrInvalidRule) {
		t.Fatalf("ParseCountMode(later): got %v, want ErrInvalidRule", err)
	}
}

// TestCountReserveGivenBackWhenClientGoes checks that a request whose
// client leaves while a Delay rule holds it gives back the unit a reserve
// mode Count rule took for it: it was never served.
func TestCountReserveGivenBackWhenClientGoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New(memstore.Options{Clock: wallClock{}, SweepInterval: -1})
		defer store.Close()
		obs := &recorder{}
		lim, err := httplimit.New(httplimit.Options{Store: store, Observer: obs, Rules: []httplimit.Rule{
			{Name: "slow", Action: httplimit.Delay, MaxDelay: 5 * time.Second, Limit: limit(sluice.GCRA, 1, 2*time.Second)},
			{Name: "failures", Limit: limit(sluice.GCRA, 2, time.Hour), Count: &httplimit.CountOn{Statuses: []int{401}, Mode: httplimit.CountReserve}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) }))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // a failure, counted; takes the slow slot
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, "GET", "/", nil)) // waits for the slot at 2 s
			close(done)
		}()
		time.Sleep(time.Second)
		cancel()
		<-done
		eq(t, "the canceled request's count rule", obs.last(t).Rules[1].Outcome, httplimit.OutcomeCanceled)
		time.Sleep(2 * time.Second)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		eq(t, "the second failure's status", w.Code, http.StatusUnauthorized)
		eq(t, "its count rule", obs.last(t).Rules[1].Outcome, httplimit.OutcomeAllowed)
		time.Sleep(2 * time.Second)
		w = httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		eq(t, "a third failure's status", w.Code, http.StatusTooManyRequests)
	})
}

// TestCountHeaderRemovedWhenRuleSkipped checks that the count header never
// reaches a client whose request matched a Count rule that did not apply
// (a key part was missing, with missing: skip).
func TestCountHeaderRemovedWhenRuleSkipped(t *testing.T) {
	obs := &recorder{}
	lim, err := httplimit.New(httplimit.Options{Store: countStores["memstore"](t), Observer: obs, Rules: []httplimit.Rule{{
		Name: "failures", Key: []httplimit.KeyPart{httplimit.Header("X-Account")}, Missing: httplimit.MissingSkip,
		Limit: limit(sluice.GCRA, 2, time.Hour), Count: &httplimit.CountOn{Header: "Sluice-Count"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("Sluice-Count", "1") }))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if v, ok := w.Result().Header["Sluice-Count"]; ok {
		t.Fatalf("the client received Sluice-Count: %q", v)
	}
	eq(t, "the rule's outcome", obs.last(t).Rules[0].Outcome, httplimit.OutcomeSkipped)
}

// BenchmarkCount decides successful logins from 10,000 accounts through a
// rule that counts only failures, in each mode, on the in-memory store:
// the check (a peek, or a take) and the settlement (nothing, or a refund).
func BenchmarkCount(b *testing.B) {
	for _, mode := range []httplimit.CountMode{httplimit.CountAfter, httplimit.CountReserve} {
		b.Run(mode.String(), func(b *testing.B) {
			store := memstore.New(memstore.Options{})
			defer store.Close()
			lim, err := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{{
				Name: "login", Key: []httplimit.KeyPart{httplimit.Header("X-Account"), httplimit.IP()},
				Limit: limit(sluice.GCRA, 5, 15*time.Minute), Count: &httplimit.CountOn{Statuses: []int{401}, Mode: mode},
			}}})
			if err != nil {
				b.Fatal(err)
			}
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
			const accounts = 10000
			reqs := make([]*http.Request, accounts)
			for i := range reqs {
				r := httptest.NewRequest("POST", "/login", nil)
				r.Header.Set("X-Account", "user-"+strconv.Itoa(i))
				reqs[i] = r
			}
			w := &discard{h: make(http.Header)}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%accounts])
			}
		})
	}
}

// TestCountSettlesOnTheFinalStatus checks when a response's status is taken
// as known: not at an informational status (103 Early Hints), but at the
// final one; at a flush or a write before any status (200); and at the
// handler's return when it wrote nothing (200).
func TestCountSettlesOnTheFinalStatus(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		counted bool
	}{
		{"early hints then 401", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusUnauthorized)
		}, true},
		{"flush then 401", func(w http.ResponseWriter, _ *http.Request) {
			http.NewResponseController(w).Flush()
			w.WriteHeader(http.StatusUnauthorized)
		}, false},
		{"write then 401", func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte("x"))
			w.WriteHeader(http.StatusUnauthorized)
		}, false},
		{"nothing written", func(http.ResponseWriter, *http.Request) {}, false},
		{"header set after the status", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
			w.Header().Set("Sluice-Count", "1") // too late: the status and headers are gone
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &recorder{}
			lim, err := httplimit.New(httplimit.Options{Store: countStores["memstore"](t), Observer: obs, Rules: []httplimit.Rule{{
				Name: "failures", Limit: limit(sluice.GCRA, 2, time.Hour),
				Count: &httplimit.CountOn{Statuses: []int{401}, Header: "Sluice-Count"},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(lim.Handler(tc.handler))
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			// The whole body: it ends only after the request is observed.
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			want := httplimit.OutcomeNotCounted
			if tc.counted {
				want = httplimit.OutcomeAllowed
			}
			eq(t, "the rule's outcome", obs.last(t).Rules[0].Outcome, want)
		})
	}
}

// TestCountReserveWithWindowOverride checks that a client whose override
// gives a reserve-mode count rule a window algorithm, which cannot be
// refunded, is counted after the response instead: successes stay free.
func TestCountReserveWithWindowOverride(t *testing.T) {
	store := countStores["memstore"](t)
	ov := &overrideMap{m: map[string]*httplimit.ClientOverride{}}
	co, err := httplimit.NewClientOverride(store, "k1", httplimit.Override{Limits: map[string]sluice.Limit{"failures": limit(sluice.FixedWindow, 2, time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	ov.m["k1"] = co
	obs := &recorder{}
	lim, err := httplimit.New(httplimit.Options{Store: store, Observer: obs, Overrides: ov,
		Tiers: httplimit.Tiers{From: httplimit.Header("X-API-Key")},
		Rules: []httplimit.Rule{{
			Name: "failures", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")}, Limit: limit(sluice.GCRA, 5, time.Hour),
			Count: &httplimit.CountOn{Statuses: []int{401}, Mode: httplimit.CountReserve},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("fail") {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	do := func(target string) int {
		r := httptest.NewRequest("GET", target, nil)
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i := range 10 {
		eq(t, "success "+strconv.Itoa(i), do("/"), http.StatusOK)
	}
	eq(t, "a success's outcome", obs.last(t).Rules[0].Outcome, httplimit.OutcomeNotCounted)
	eq(t, "first failure", do("/?fail"), http.StatusUnauthorized)
	eq(t, "second failure", do("/?fail"), http.StatusUnauthorized)
	eq(t, "after the override's two failures", do("/"), http.StatusTooManyRequests)
}
