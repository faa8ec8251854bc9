package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// outcomes records the request outcomes an Observer sees.
type outcomes struct {
	mu  sync.Mutex
	got []httplimit.Outcome
}

func (o *outcomes) Observe(_ *http.Request, e *httplimit.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, e.Outcome)
}

func (o *outcomes) last() httplimit.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) == 0 {
		return httplimit.Outcome(255)
	}
	return o.got[len(o.got)-1]
}

func concRuleServer(t *testing.T, rules ...httplimit.Rule) (*httptest.Server, gated, *outcomes) {
	t.Helper()
	h, g, obs := concRuleHandler(t, rules...)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, g, obs
}

// concRuleHandler is the handler concRuleServer serves: the rules in front
// of a gated upstream, on a memory store that reads time.Now (the fake time
// of a testing/synctest bubble, in one).
func concRuleHandler(t *testing.T, rules ...httplimit.Rule) (http.Handler, gated, *outcomes) {
	t.Helper()
	s := memstore.New(memstore.Options{Clock: wallClock{}, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	obs := &outcomes{}
	l, err := httplimit.New(httplimit.Options{Store: s, Rules: rules, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	g := gated{started: make(chan struct{}, 16), release: make(chan struct{})}
	return l.Handler(g), g, obs
}

// serve serves a GET of path with h and returns the response.
func serve(h http.Handler, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w
}

// wantWaiting fails t if a request started on g: called once every
// goroutine of the test's testing/synctest bubble is blocked, it tells
// that a request still waits for a slot, with no time left to pass.
func wantWaiting(t *testing.T, g gated) {
	t.Helper()
	synctest.Wait()
	select {
	case <-g.started:
		t.Fatal("a second request ran while the first held the only slot")
	default:
	}
}

func exportRule(limit int64) httplimit.Rule {
	return httplimit.Rule{
		Name:        "exports",
		Match:       httplimit.Match{Paths: []string{"/export/*"}},
		Concurrency: &httplimit.ConcurrencyRule{Limit: limit, Lease: time.Hour},
	}
}

// A concurrency rule lets limit requests be in flight, answers the next
// 429 with the concurrency headers, and frees a slot when a response ends,
// even by a panic.
func TestConcurrencyRuleLimitsInFlight(t *testing.T) {
	srv, g, obs := concRuleServer(t, exportRule(2))
	done := make(chan int, 2)
	for _, q := range []string{"", "?panic=1"} {
		go func() { done <- status(srv.URL + "/export/a" + q) }()
		<-g.started
	}
	resp := get(t, srv.URL+"/export/b")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request in flight: got %d, want 429", resp.StatusCode)
	}
	if got, want := resp.Header.Get("RateLimit-Policy"), `"exports";q=2;qu="concurrent-requests"`; got != want {
		t.Errorf("RateLimit-Policy: got %s, want %s", got, want)
	}
	if got := resp.Header.Get("Retry-After"); got != "3600" {
		t.Errorf("Retry-After: got %q, want 3600", got)
	}
	if got := obs.last(); got != httplimit.OutcomeLimited {
		t.Errorf("outcome: got %s, want limited", got)
	}
	close(g.release) // both responses end, one by a panic
	<-done
	<-done
	for range 2 {
		go func() { <-g.started }()
		if resp := get(t, srv.URL+"/export/c"); resp.StatusCode != http.StatusOK {
			t.Fatalf("after the responses ended: got %d, want 200", resp.StatusCode)
		}
	}
	if got := obs.last(); got != httplimit.OutcomeAllowed {
		t.Errorf("outcome: got %s, want allowed", got)
	}
}

// With action delay, a request waits for a slot and is served when one
// frees up. The test runs in a testing/synctest bubble, where the wait's
// polls run on fake time.
func TestConcurrencyRuleDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := exportRule(1)
		r.Action, r.MaxDelay = httplimit.Delay, time.Minute
		h, g, obs := concRuleHandler(t, r)
		first := make(chan int)
		go func() { first <- serve(h, "/export/a").Code }()
		<-g.started
		second := make(chan int)
		go func() { second <- serve(h, "/export/b").Code }()
		wantWaiting(t, g)
		g.release <- struct{}{}
		if got := <-first; got != http.StatusOK {
			t.Fatalf("first: got %d, want 200", got)
		}
		<-g.started
		if got := obs.last(); got != httplimit.OutcomeDelayed {
			t.Errorf("waiting request's outcome: got %s, want delayed", got)
		}
		g.release <- struct{}{}
		if got := <-second; got != http.StatusOK {
			t.Fatalf("second, after waiting: got %d, want 200", got)
		}
	})
}

// When a later concurrency rule refuses a request, the slot an earlier one
// gave it is released.
func TestConcurrencyRuleRefusalReleasesEarlierSlots(t *testing.T) {
	all := httplimit.Rule{Name: "all", Key: []httplimit.KeyPart{httplimit.Global()}, Concurrency: &httplimit.ConcurrencyRule{Limit: 2, Lease: time.Hour}}
	user := httplimit.Rule{Name: "user", Key: []httplimit.KeyPart{httplimit.Header("User")}, Concurrency: &httplimit.ConcurrencyRule{Limit: 1, Lease: time.Hour}}
	srv, g, _ := concRuleServer(t, all, user)
	req := func(u string) int {
		r, _ := http.NewRequest("GET", srv.URL, nil)
		r.Header.Set("User", u)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	first := make(chan int)
	go func() { first <- req("u1") }()
	<-g.started
	if got := req("u1"); got != http.StatusTooManyRequests {
		t.Fatalf("u1's second request: got %d, want 429", got)
	}
	// Had the refused request kept its slot of "all", this one would find
	// none free.
	second := make(chan int, 1)
	go func() { second <- req("u2") }()
	select {
	case <-g.started:
	case got := <-second:
		close(g.release)
		<-first
		t.Fatalf("u2: got %d without reaching the upstream, want it served", got)
	}
	close(g.release)
	if a, b := <-first, <-second; a != http.StatusOK || b != http.StatusOK {
		t.Fatalf("got %d and %d, want 200 and 200", a, b)
	}
}

// A concurrency rule needs a store that keeps leases.
func TestConcurrencyRuleNeedsLeaseStore(t *testing.T) {
	s := memstore.New(memstore.Options{SweepInterval: -1})
	defer s.Close()
	_, err := httplimit.New(httplimit.Options{Store: struct{ sluice.Store }{s}, Rules: []httplimit.Rule{exportRule(1)}})
	if !errors.Is(err, httplimit.ErrInvalidRule) {
		t.Fatalf("got %v, want ErrInvalidRule", err)
	}
}

func TestConcurrencyRuleValidate(t *testing.T) {
	for name, mod := range map[string]func(*httplimit.Rule){
		"zero limit": func(r *httplimit.Rule) { r.Concurrency.Limit = 0 },
		"no lease":   func(r *httplimit.Rule) { r.Concurrency.Lease = 0 },
		"tiers": func(r *httplimit.Rule) {
			r.Tiers = map[string]sluice.Limit{"pro": {Algorithm: sluice.TokenBucket, Count: 1, Period: time.Second}}
		},
		"shadow":         func(r *httplimit.Rule) { r.Action = httplimit.Shadow },
		"delay no wait":  func(r *httplimit.Rule) { r.Action = httplimit.Delay },
		"wait not delay": func(r *httplimit.Rule) { r.MaxDelay = time.Second },
		"penalty":        func(r *httplimit.Rule) { r.Penalty = &sluice.Penalty{} },
	} {
		r := exportRule(1)
		mod(&r)
		if err := r.Validate(); !errors.Is(err, httplimit.ErrInvalidRule) {
			t.Errorf("%s: got %v, want ErrInvalidRule", name, err)
		}
	}
	r := exportRule(1)
	if err := r.Validate(); err != nil {
		t.Errorf("valid rule: %v", err)
	}
}

// A rule with a rate and a concurrency limit decides both at once: a
// request refused a slot is not charged the rate, and one refused by the
// rate takes no slot. Admitted responses carry the rate's headers; a 429
// names the limit that refused.
func TestConcurrencyRuleWithRate(t *testing.T) {
	r := exportRule(2)
	r.Limit = sluice.Limit{Algorithm: sluice.TokenBucket, Count: 3, Period: time.Hour, Burst: 3}
	srv, g, obs := concRuleServer(t, r)
	done := make(chan *http.Response, 2)
	for range 2 {
		go func() { done <- get(t, srv.URL+"/export/a") }()
		<-g.started
	}
	resp := get(t, srv.URL+"/export/b")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third in flight: got %d, want 429", resp.StatusCode)
	}
	if got, want := resp.Header.Get("RateLimit-Policy"), `"exports";q=2;qu="concurrent-requests"`; got != want {
		t.Errorf("slot refused: RateLimit-Policy %s, want %s", got, want)
	}
	close(g.release)
	for range 2 {
		resp := <-done
		if got, want := resp.Header.Get("RateLimit-Policy"), `"exports";q=3;w=3600`; resp.StatusCode != http.StatusOK || got != want {
			t.Errorf("admitted: got %d with RateLimit-Policy %s, want 200 with %s", resp.StatusCode, got, want)
		}
	}
	// The refused request was not charged: one unit is left.
	resp = get(t, srv.URL+"/export/c")
	<-g.started
	if got, want := resp.Header.Get("RateLimit"), `"exports";r=0;t=3600`; resp.StatusCode != http.StatusOK || got != want {
		t.Fatalf("third admitted: got %d with RateLimit %s, want 200 with %s", resp.StatusCode, got, want)
	}
	resp = get(t, srv.URL+"/export/d")
	if got, want := resp.Header.Get("RateLimit-Policy"), `"exports";q=3;w=3600`; resp.StatusCode != http.StatusTooManyRequests || got != want {
		t.Errorf("rate spent: got %d with RateLimit-Policy %s, want 429 with %s", resp.StatusCode, got, want)
	}
	if got := resp.Header.Get("Retry-After"); got != "1200" {
		t.Errorf("rate spent: Retry-After %q, want 1200", got)
	}
	if got := obs.last(); got != httplimit.OutcomeLimited {
		t.Errorf("outcome: got %s, want limited", got)
	}
}

// With action delay, a rule with a rate and slots waits for both: the
// waiting request is served once the slot frees, charged the rate once.
// The test runs in a testing/synctest bubble, as TestConcurrencyRuleDelay.
func TestConcurrencyRuleWithRateDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := exportRule(1)
		r.Limit = sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Hour}
		r.Action, r.MaxDelay = httplimit.Delay, time.Minute
		h, g, obs := concRuleHandler(t, r)
		first := make(chan *httptest.ResponseRecorder)
		go func() { first <- serve(h, "/export/a") }()
		<-g.started
		second := make(chan *httptest.ResponseRecorder)
		go func() { second <- serve(h, "/export/b") }()
		wantWaiting(t, g)
		g.release <- struct{}{}
		if resp := <-first; resp.Code != http.StatusOK {
			t.Fatalf("first: got %d, want 200", resp.Code)
		}
		<-g.started
		if got := obs.last(); got != httplimit.OutcomeDelayed {
			t.Errorf("waiting request's outcome: got %s, want delayed", got)
		}
		g.release <- struct{}{}
		resp := <-second
		if got, want := resp.Header().Get("RateLimit"), `"exports";r=3;`; resp.Code != http.StatusOK || !strings.HasPrefix(got, want) {
			t.Fatalf("second, after waiting: got %d with RateLimit %s, want 200 with %s... (charged once)", resp.Code, got, want)
		}
	})
}
