package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// env is a limiter in front of a handler that records what reached it.
type env struct {
	t     *testing.T
	clk   *clock.Fake
	store *memstore.Store
	lim   *httplimit.Limiter
	h     http.Handler
	obs   *recorder

	mu   sync.Mutex
	seen []*http.Request
}

func newEnv(t *testing.T, opts httplimit.Options) *env {
	t.Helper()
	e := &env{t: t, clk: clock.NewFake(t0), obs: &recorder{}}
	e.store = memstore.New(memstore.Options{Clock: e.clk, SweepInterval: -1})
	t.Cleanup(func() { e.store.Close() })
	if opts.Store == nil {
		opts.Store = e.store
	}
	opts.Observer = e.obs
	lim, err := httplimit.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.lim = lim
	e.h = lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.seen = append(e.seen, r)
		e.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	return e
}

type req struct {
	method, target, remote string
	header                 map[string]string
}

func (e *env) do(q req) *http.Response {
	e.t.Helper()
	if q.method == "" {
		q.method = http.MethodGet
	}
	r := httptest.NewRequest(q.method, q.target, nil)
	if q.remote != "" {
		r.RemoteAddr = q.remote
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w.Result()
}

// status sends n requests and returns their status codes.
func (e *env) statuses(n int, q req) []int {
	e.t.Helper()
	var got []int
	for range n {
		got = append(got, e.do(q).StatusCode)
	}
	return got
}

type recorder struct {
	mu     sync.Mutex
	events []httplimit.Event
}

func (r *recorder) Observe(_ *http.Request, e *httplimit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *e
	c.Rules = append([]httplimit.RuleEvent(nil), e.Rules...)
	r.events = append(r.events, c)
}

func (r *recorder) last(t *testing.T) httplimit.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		t.Fatal("no event observed")
	}
	return r.events[len(r.events)-1]
}

func limit(a sluice.Algorithm, n int64, p time.Duration) sluice.Limit {
	return sluice.Limit{Algorithm: a, Count: n, Period: p}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func TestRejectAnswers429WithHeadersAndProblem(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{{
		Name:  "login",
		Match: httplimit.Match{Paths: []string{"/login"}, Methods: []string{"POST"}},
		Limit: limit(sluice.FixedWindow, 2, time.Minute),
	}}})
	e.clk.Set(t0.Add(15 * time.Second)) // 45 s left in the window
	q := req{method: "POST", target: "/login", remote: "192.0.2.1:1234"}

	r := e.do(q)
	eq(t, "first status", r.StatusCode, 200)
	eq(t, "RateLimit-Policy", r.Header.Get("RateLimit-Policy"), `"login";q=2;w=60`)
	eq(t, "RateLimit", r.Header.Get("RateLimit"), `"login";r=1;t=45`)
	eq(t, "X-RateLimit-Limit", r.Header.Get("X-RateLimit-Limit"), "2")
	eq(t, "X-RateLimit-Remaining", r.Header.Get("X-RateLimit-Remaining"), "1")
	eq(t, "X-RateLimit-Reset", r.Header.Get("X-RateLimit-Reset"), strconv.FormatInt(t0.Add(time.Minute).Unix(), 10))
	eq(t, "second status", e.do(q).StatusCode, 200)

	r = e.do(q)
	eq(t, "third status", r.StatusCode, http.StatusTooManyRequests)
	eq(t, "Retry-After", r.Header.Get("Retry-After"), "45")
	eq(t, "Cache-Control", r.Header.Get("Cache-Control"), "no-store")
	eq(t, "Content-Type", r.Header.Get("Content-Type"), "application/problem+json")
	eq(t, "RateLimit on 429", r.Header.Get("RateLimit"), `"login";r=0;t=45`)
	eq(t, "X-RateLimit-Remaining on 429", r.Header.Get("X-RateLimit-Remaining"), "0")
	var p struct {
		Type       string   `json:"type"`
		Status     int      `json:"status"`
		Violated   []string `json:"violated-policies"`
		RetryAfter int      `json:"retry_after"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	eq(t, "problem type", p.Type, httplimit.ProblemType)
	eq(t, "problem status", p.Status, 429)
	eq(t, "problem retry_after", p.RetryAfter, 45)
	eq(t, "violated", strings.Join(p.Violated, ","), "login")
	eq(t, "handler calls", len(e.seen), 2)
	eq(t, "event outcome", e.obs.last(t).Outcome, httplimit.OutcomeLimited)

	// Other methods, paths and clients are not limited by this rule.
	eq(t, "GET", e.do(req{target: "/login", remote: "192.0.2.1:1234"}).StatusCode, 200)
	eq(t, "other path", e.do(req{method: "POST", target: "/logout", remote: "192.0.2.1:1234"}).StatusCode, 200)
	eq(t, "other client", e.do(req{method: "POST", target: "/login", remote: "192.0.2.2:1234"}).StatusCode, 200)
	// The window resets.
	e.clk.Set(t0.Add(time.Minute))
	eq(t, "next window", e.do(q).StatusCode, 200)
}

func TestRejectedRequestChargesNoOtherRule(t *testing.T) {
	perIP := httplimit.Rule{Name: "per-ip", Limit: limit(sluice.SlidingWindow, 10, time.Hour)}
	perUser := httplimit.Rule{Name: "per-user", Key: []httplimit.KeyPart{httplimit.Header("X-User")}, Limit: limit(sluice.TokenBucket, 1, time.Hour)}
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{perIP, perUser}})
	q := req{target: "/x", remote: "192.0.2.1:1", header: map[string]string{"X-User": "alice"}}
	eq(t, "first", e.do(q).StatusCode, 200)
	for range 5 {
		eq(t, "alice again", e.do(q).StatusCode, 429)
	}
	// per-ip was charged once, for the admitted request only: 9 remain.
	r := e.do(req{target: "/x", remote: "192.0.2.1:1", header: map[string]string{"X-User": "bob"}})
	eq(t, "bob", r.StatusCode, 200)
	ev := e.obs.last(t)
	eq(t, "rules matched", len(ev.Rules), 2)
	eq(t, "per-ip remaining after bob", ev.Rules[0].Decision.Remaining, int64(8))
	eq(t, "per-ip outcome", ev.Rules[0].Outcome, httplimit.OutcomeAllowed)
}

func TestRulesNeverShareCounters(t *testing.T) {
	l := limit(sluice.FixedWindow, 1, time.Minute)
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "a", Match: httplimit.Match{Paths: []string{"/a"}}, Limit: l},
		{Name: "b", Match: httplimit.Match{Paths: []string{"/b"}}, Limit: l},
	}})
	eq(t, "a", e.do(req{target: "/a"}).StatusCode, 200)
	eq(t, "b", e.do(req{target: "/b"}).StatusCode, 200)
	eq(t, "a again", e.do(req{target: "/a"}).StatusCode, 429)
}

func TestExemptStopsEvaluation(t *testing.T) {
	l := limit(sluice.FixedWindow, 1, time.Minute)
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "health", Match: httplimit.Match{Paths: []string{"/healthz"}}, Action: httplimit.Exempt},
		{Name: "all", Match: httplimit.Match{Paths: []string{"/*"}}, Limit: l},
	}})
	for range 3 {
		r := e.do(req{target: "/healthz"})
		eq(t, "healthz", r.StatusCode, 200)
		eq(t, "no headers on exempt", r.Header.Get("RateLimit"), "")
	}
	eq(t, "exempt outcome", e.obs.last(t).Outcome, httplimit.OutcomeExempt)
	eq(t, "other path", e.do(req{target: "/x"}).StatusCode, 200)
	eq(t, "other path again", e.do(req{target: "/x"}).StatusCode, 429)
}

func TestPathsAreCleanedBeforeMatching(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "login", Match: httplimit.Match{Paths: []string{"/login"}}, Limit: limit(sluice.FixedWindow, 1, time.Minute)},
		{Name: "export", Match: httplimit.Match{Paths: []string{"/api/export/*"}}, Limit: limit(sluice.FixedWindow, 1, time.Minute)},
	}})
	eq(t, "/login", e.do(req{target: "/login"}).StatusCode, 200)
	for _, p := range []string{"/login/", "//login", "/x/../login", "/./login"} {
		eq(t, p, e.do(req{target: p}).StatusCode, 429)
	}
	eq(t, "/api/export", e.do(req{target: "/api/export"}).StatusCode, 200)
	eq(t, "/api/export/a/b", e.do(req{target: "/api/export/a/b"}).StatusCode, 429)
	eq(t, "/api/exporter is not below /api/export", e.do(req{target: "/api/exporter"}).StatusCode, 200)
}

func TestHostsMatch(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "api", Match: httplimit.Match{Hosts: []string{"*.example.com"}}, Limit: limit(sluice.FixedWindow, 1, time.Minute)},
	}})
	do := func(host string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		return w.Code
	}
	eq(t, "api", do("api.example.com:8080"), 200)
	eq(t, "API again, other case", do("API.Example.com"), 429)
	eq(t, "apex is not a subdomain", do("example.com"), 200)
	eq(t, "apex again", do("example.com"), 200)
}

func TestTiers(t *testing.T) {
	rule := httplimit.Rule{
		Name:  "search",
		Key:   []httplimit.KeyPart{httplimit.Header("X-API-Key")},
		Limit: limit(sluice.TokenBucket, 1, time.Hour),
		Tiers: map[string]sluice.Limit{"premium": limit(sluice.TokenBucket, 3, time.Hour)},
	}
	t.Run("from header", func(t *testing.T) {
		e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{rule}, Tiers: httplimit.Tiers{From: httplimit.Header("X-Plan")}})
		prem := req{target: "/", header: map[string]string{"X-API-Key": "k1", "X-Plan": "premium"}}
		eq(t, "premium admitted", strings.Join(intStrings(e.statuses(4, prem)), ","), "200,200,200,429")
		eq(t, "tier in event", e.obs.last(t).Rules[0].Tier, "premium")
		unknown := req{target: "/", header: map[string]string{"X-API-Key": "k2", "X-Plan": "platinum"}}
		eq(t, "unknown tier gets default", strings.Join(intStrings(e.statuses(2, unknown)), ","), "200,429")
		eq(t, "default tier named in event", e.obs.last(t).Rules[0].Tier, "free")
		none := req{target: "/", header: map[string]string{"X-API-Key": "k3"}}
		eq(t, "no tier gets default", strings.Join(intStrings(e.statuses(2, none)), ","), "200,429")
		eq(t, "default tier named in event", e.obs.last(t).Rules[0].Tier, "free")
	})
	t.Run("from key table", func(t *testing.T) {
		e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{rule}, Tiers: httplimit.Tiers{
			From: httplimit.Header("X-API-Key"), Keys: map[string]string{"paid-key": "premium"}}})
		paid := req{target: "/", header: map[string]string{"X-API-Key": "paid-key", "X-Plan": "free"}}
		eq(t, "paid key", strings.Join(intStrings(e.statuses(4, paid)), ","), "200,200,200,429")
		claims := req{target: "/", header: map[string]string{"X-API-Key": "premium"}}
		eq(t, "a key named like a tier is not that tier", strings.Join(intStrings(e.statuses(2, claims)), ","), "200,429")
	})
	t.Run("default tier override", func(t *testing.T) {
		r := rule
		r.Tiers = map[string]sluice.Limit{"basic": limit(sluice.TokenBucket, 2, time.Hour)}
		e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{r}, Tiers: httplimit.Tiers{Default: "basic"}})
		q := req{target: "/", header: map[string]string{"X-API-Key": "k"}}
		eq(t, "default tier's own limit", strings.Join(intStrings(e.statuses(3, q)), ","), "200,200,429")
	})
}

func intStrings(xs []int) []string {
	var s []string
	for _, x := range xs {
		s = append(s, strconv.Itoa(x))
	}
	return s
}

func TestMissingKeyPart(t *testing.T) {
	byKey := httplimit.Rule{Name: "by-key", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")}, Limit: limit(sluice.FixedWindow, 1, time.Minute)}
	t.Run("falls back to the client IP", func(t *testing.T) {
		e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{byKey}})
		eq(t, "ip1", e.do(req{target: "/", remote: "192.0.2.1:1"}).StatusCode, 200)
		eq(t, "ip1 again", e.do(req{target: "/", remote: "192.0.2.1:2"}).StatusCode, 429)
		eq(t, "ip2 has its own counter", e.do(req{target: "/", remote: "192.0.2.2:1"}).StatusCode, 200)
		eq(t, "an empty header is missing", e.do(req{target: "/", remote: "192.0.2.1:1", header: map[string]string{"X-API-Key": ""}}).StatusCode, 429)
		// A key whose value looks like the fallback does not share its counter.
		eq(t, "header spelled like the fallback", e.do(req{target: "/", remote: "192.0.2.9:1", header: map[string]string{"X-API-Key": "192.0.2.1/32"}}).StatusCode, 200)
	})
	t.Run("skip", func(t *testing.T) {
		r := byKey
		r.Missing = httplimit.MissingSkip
		e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{r}})
		eq(t, "no key", strings.Join(intStrings(e.statuses(3, req{target: "/"})), ","), "200,200,200")
		eq(t, "skipped", e.obs.last(t).Rules[0].Outcome, httplimit.OutcomeSkipped)
		k := req{target: "/", header: map[string]string{"X-API-Key": "a"}}
		eq(t, "with key", strings.Join(intStrings(e.statuses(2, k)), ","), "200,429")
	})
}

func TestKeyPartsFromQueryCookieMethodPath(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{{
		Name:  "combo",
		Key:   []httplimit.KeyPart{httplimit.Query("token"), httplimit.Cookie("session"), httplimit.Method(), httplimit.Path()},
		Limit: limit(sluice.FixedWindow, 1, time.Minute),
	}}})
	do := func(method, target, cookie string) int {
		r := httptest.NewRequest(method, target, nil)
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: "session", Value: cookie})
		}
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		return w.Code
	}
	eq(t, "first", do("GET", "/a?token=t1&x=1", "s1"), 200)
	eq(t, "same parts", do("GET", "/a?x=2&token=t1", "s1"), 429)
	eq(t, "escaped query value is the same token", do("GET", "/a?tok%65n=t%31", "s1"), 429)
	eq(t, "other token", do("GET", "/a?token=t2", "s1"), 200)
	eq(t, "other cookie", do("GET", "/a?token=t1", "s2"), 200)
	eq(t, "other method", do("POST", "/a?token=t1", "s1"), 200)
	eq(t, "other path", do("GET", "/b?token=t1", "s1"), 200)
}

func TestLongKeyValuesAreBounded(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{{
		Name: "k", Key: []httplimit.KeyPart{httplimit.Header("X-Key")}, Limit: limit(sluice.FixedWindow, 1, time.Minute),
	}}})
	long := strings.Repeat("a", 10000)
	eq(t, "long", e.do(req{target: "/", header: map[string]string{"X-Key": long}}).StatusCode, 200)
	if k := e.obs.last(t).Rules[0].Key; len(k) > 64 {
		t.Errorf("key of a 10000-byte value is %d bytes, want it digested", len(k))
	}
	eq(t, "same long value", e.do(req{target: "/", header: map[string]string{"X-Key": long}}).StatusCode, 429)
	eq(t, "different long value", e.do(req{target: "/", header: map[string]string{"X-Key": long + "b"}}).StatusCode, 200)
}

func TestShadowNeverBlocks(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{{
		Name: "writes", Key: []httplimit.KeyPart{httplimit.Global()}, Action: httplimit.Shadow,
		Limit: limit(sluice.FixedWindow, 2, time.Second),
	}}})
	got := e.statuses(5, req{method: "POST", target: "/"})
	eq(t, "statuses", strings.Join(intStrings(got), ","), "200,200,200,200,200")
	ev := e.obs.last(t)
	eq(t, "request outcome", ev.Outcome, httplimit.OutcomeAllowed)
	eq(t, "rule outcome", ev.Rules[0].Outcome, httplimit.OutcomeShadowLimited)
	r := e.do(req{target: "/"})
	eq(t, "shadow rules send no headers", r.Header.Get("RateLimit"), "")
}

func TestSoftLimitTellsUpstream(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "soft", Action: httplimit.Soft, Limit: limit(sluice.FixedWindow, 1, time.Minute)},
		{Name: "hard", Limit: limit(sluice.FixedWindow, 3, time.Minute)},
	}})
	forged := map[string]string{"Sluice-Over-Limit": "hard"}
	got := e.statuses(4, req{target: "/", header: forged})
	eq(t, "statuses", strings.Join(intStrings(got), ","), "200,200,200,429")
	var marks []string
	for _, r := range e.seen {
		marks = append(marks, r.Header.Get("Sluice-Over-Limit"))
	}
	eq(t, "over-limit header seen upstream", strings.Join(marks, "|"), "|soft|soft")
	eq(t, "soft outcome", e.obs.events[2].Rules[0].Outcome, httplimit.OutcomeSoftLimited)
}

func TestDelayWaitsThenPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New(memstore.Options{Clock: wallClock{}, SweepInterval: -1})
		defer store.Close()
		var mu sync.Mutex
		var served []time.Duration
		start := time.Now()
		lim, err := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{{
			Name: "export", Action: httplimit.Delay, MaxDelay: 5 * time.Second,
			Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: 2 * time.Second},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			served = append(served, time.Since(start))
			mu.Unlock()
		}))
		var codes []int
		for range 5 {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/export", nil))
			codes = append(codes, w.Code)
		}
		// Sequential requests: 0 s, then 2 s (waited 2 s), then 4 s, then 6 s
		// (each waits 2 s after the previous one was served); with one
		// request at a time every wait is 2 s, within max_delay.
		eq(t, "codes", strings.Join(intStrings(codes), ","), "200,200,200,200,200")
		want := []time.Duration{0, 2 * time.Second, 4 * time.Second, 6 * time.Second, 8 * time.Second}
		for i := range want {
			eq(t, "served at "+strconv.Itoa(i), served[i], want[i])
		}
		// Eight concurrent requests: turns at 10 s, 12 s, 14 s, 16 s are within
		// 5 s of... only those within max_delay of now (8 s) are queued.
		codes = make([]int, 8)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/export", nil))
				codes[i] = w.Code
			})
		}
		wg.Wait()
		n200 := 0
		for _, c := range codes {
			if c == 200 {
				n200++
			}
		}
		// At 8 s the last request was served at its turn, so the next turns
		// are 10, 12 and (not 14: > 8+5) s: two wait, six are rejected at once.
		eq(t, "queued within max_delay", n200, 2)
	})
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// failingStore fails every operation.
type failingStore struct{}

var errDown = errors.New("store is down")

func (failingStore) Take(context.Context, *sluice.Policy, string, int64) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}
func (failingStore) Peek(context.Context, *sluice.Policy, string) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}
func (failingStore) Reserve(context.Context, *sluice.Policy, string, int64, time.Duration) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}
func (failingStore) Cancel(context.Context, *sluice.Policy, string, int64, time.Time) error {
	return errDown
}
func (failingStore) Reset(context.Context, *sluice.Policy, string) error { return errDown }

func TestStoreFailure(t *testing.T) {
	rules := []httplimit.Rule{{Name: "r", Limit: limit(sluice.FixedWindow, 1, time.Minute)}}
	t.Run("fail open", func(t *testing.T) {
		e := newEnv(t, httplimit.Options{Store: failingStore{}, Rules: rules})
		eq(t, "status", e.do(req{target: "/"}).StatusCode, 200)
		ev := e.obs.last(t)
		eq(t, "outcome", ev.Outcome, httplimit.OutcomeError)
		if !errors.Is(ev.Rules[0].Err, errDown) {
			t.Errorf("rule error %v, want %v", ev.Rules[0].Err, errDown)
		}
	})
	t.Run("fail closed", func(t *testing.T) {
		e := newEnv(t, httplimit.Options{Store: failingStore{}, Rules: rules, FailClosed: true})
		r := e.do(req{target: "/"})
		eq(t, "status", r.StatusCode, http.StatusServiceUnavailable)
		eq(t, "Retry-After", r.Header.Get("Retry-After"), "1")
		eq(t, "handler calls", len(e.seen), 0)
	})
}

func TestHeaderChoice(t *testing.T) {
	rules := []httplimit.Rule{
		{Name: "burst", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Second, Burst: 20}},
		{Name: "hourly", Limit: limit(sluice.SlidingWindow, 3, time.Hour)},
	}
	e := newEnv(t, httplimit.Options{Rules: rules})
	r := e.do(req{target: "/"})
	// hourly has 2 left, burst 19: hourly is closest to its limit.
	eq(t, "RateLimit-Policy", r.Header.Get("RateLimit-Policy"), `"hourly";q=3;w=3600`)
	eq(t, "X-RateLimit-Limit", r.Header.Get("X-RateLimit-Limit"), "3")
	for range 2 {
		e.do(req{target: "/"})
	}
	r = e.do(req{target: "/"})
	eq(t, "status", r.StatusCode, 429)
	eq(t, "RateLimit-Policy on 429 names the violated rule", r.Header.Get("RateLimit-Policy"), `"hourly";q=3;w=3600`)

	legacy := newEnv(t, httplimit.Options{Rules: rules[:1], Headers: httplimit.HeadersLegacy})
	r = legacy.do(req{target: "/"})
	eq(t, "no IETF", r.Header.Get("RateLimit"), "")
	eq(t, "legacy", r.Header.Get("X-RateLimit-Remaining"), "19")
	// The legacy pair never shows more remaining than its limit: a
	// bucket's limit there is its burst, what it can hold.
	eq(t, "legacy limit of a bucket with a burst", r.Header.Get("X-RateLimit-Limit"), "20")
	small := newEnv(t, httplimit.Options{Headers: httplimit.HeadersLegacy, Rules: []httplimit.Rule{
		{Name: "small-burst", Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 60, Period: time.Minute, Burst: 5}},
	}})
	r = small.do(req{target: "/"})
	eq(t, "legacy limit of a burst below the rate", r.Header.Get("X-RateLimit-Limit"), "5")
	eq(t, "legacy remaining of a burst below the rate", r.Header.Get("X-RateLimit-Remaining"), "4")
	ietf := newEnv(t, httplimit.Options{Rules: rules[:1], Headers: httplimit.HeadersIETF})
	r = ietf.do(req{target: "/"})
	eq(t, "IETF with burst", r.Header.Get("RateLimit-Policy"), `"burst";q=10;w=1;sluice-burst=20`)
	eq(t, "no legacy", r.Header.Get("X-RateLimit-Remaining"), "")
}

func TestNewRejectsBadOptions(t *testing.T) {
	good := limit(sluice.FixedWindow, 1, time.Minute)
	store := memstore.New(memstore.Options{})
	defer store.Close()
	for _, tc := range []struct {
		name string
		opts httplimit.Options
		want string
	}{
		{"no store", httplimit.Options{}, "no store"},
		{"bad name", httplimit.Options{Store: store, Rules: []httplimit.Rule{{Name: "a b", Limit: good}}}, "rule name"},
		{"duplicate", httplimit.Options{Store: store, Rules: []httplimit.Rule{{Name: "a", Limit: good}, {Name: "a", Limit: good}}}, "two rules"},
		{"zero limit", httplimit.Options{Store: store, Rules: []httplimit.Rule{{Name: "a"}}}, "invalid limit"},
		{"delay on a window", httplimit.Options{Store: store, Rules: []httplimit.Rule{{Name: "a", Action: httplimit.Delay, MaxDelay: time.Second, Limit: good}}}, "token_bucket or gcra"},
		{"delay without max", httplimit.Options{Store: store, Rules: []httplimit.Rule{{Name: "a", Action: httplimit.Delay, Limit: limit(sluice.GCRA, 1, time.Second)}}}, "max delay"},
		{"exempt with limit", httplimit.Options{Store: store, Rules: []httplimit.Rule{{Name: "a", Action: httplimit.Exempt, Limit: good}}}, "exempt"},
		{"bad path", httplimit.Options{Store: store, Rules: []httplimit.Rule{{Name: "a", Match: httplimit.Match{Paths: []string{"/a*"}}, Limit: good}}}, "path"},
		{"bad tier limit", httplimit.Options{Store: store, Rules: []httplimit.Rule{{Name: "a", Limit: good, Tiers: map[string]sluice.Limit{"p": {Algorithm: sluice.GCRA}}}}}, `tier "p"`},
		{"bad header", httplimit.Options{Store: store, OverLimitHeader: "a b"}, "header"},
	} {
		_, err := httplimit.New(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestParseKeyPart(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"ip", "ip", ""},
		{"IP", "ip", ""},
		{"header:x-api-key", "header:X-Api-Key", ""},
		{"query:token", "query:token", ""},
		{"cookie:sid", "cookie:sid", ""},
		{"global", "global", ""},
		{"header", "", "needs a name"},
		{"header:", "", "needs a name"},
		{"header:a b", "", "valid HTTP token"},
		{"ip:x", "", "takes no name"},
		{"user", "", "unknown key part"},
	} {
		k, err := httplimit.ParseKeyPart(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, httplimit.ErrInvalidRule) {
				t.Errorf("ParseKeyPart(%q): got %v, want an ErrInvalidRule containing %q", tc.in, err, tc.err)
			}
		case err != nil:
			t.Errorf("ParseKeyPart(%q): %v", tc.in, err)
		default:
			eq(t, "ParseKeyPart("+tc.in+")", k.String(), tc.want)
		}
	}
}
