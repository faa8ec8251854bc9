package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// pinned returns an adaptive limiter whose limit stays at n.
func pinned(t *testing.T, n int, o adaptive.Options) *adaptive.Limiter {
	t.Helper()
	o.MinLimit, o.MaxLimit, o.InitialLimit = n, n, n
	l, err := adaptive.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func adaptiveRule(l *adaptive.Limiter) httplimit.Rule {
	return httplimit.Rule{Name: "upstream", Match: httplimit.Match{Paths: []string{"/api/*"}}, Concurrency: &httplimit.ConcurrencyRule{Adaptive: l}}
}

// leases records what a LeaseObserver sees.
type leases struct {
	recorder
	lmu sync.Mutex
	got []httplimit.LeaseEvent
}

func (o *leases) ObserveLease(e httplimit.LeaseEvent) {
	o.lmu.Lock()
	defer o.lmu.Unlock()
	o.got = append(o.got, e)
}

// An adaptive rule with its one default slot taken sheds the next default
// request with 503, Retry-After and the temporary-reduced-capacity
// problem, without rate-limit headers, and tells both observers; a
// critical request (from the header a trusted layer sets) still passes.
func TestAdaptiveRuleSheds(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	obs := &leases{}
	lim := pinned(t, 2, adaptive.Options{Shares: adaptive.Shares{Default: 0.5}, RetryAfter: 2 * time.Second})
	l, err := httplimit.New(httplimit.Options{
		Store: store,
		Rules: []httplimit.Rule{
			{Name: "per-ip", Limit: limit(sluice.GCRA, 100, time.Minute)},
			adaptiveRule(lim),
		},
		Priority: httplimit.Priority{From: httplimit.Header("X-Priority")},
		Headers:  httplimit.HeadersLegacy,
		Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	g := gated{started: make(chan struct{}, 16), release: make(chan struct{})}
	srv := httptest.NewServer(l.Handler(g))
	defer srv.Close()
	do := func(class string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/api/x", nil)
		req.Header.Set("X-Priority", class)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	held := make(chan *http.Response)
	go func() { held <- do("default") }()
	<-g.started

	resp := do("default")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p struct {
		Type   string
		Status int
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || p.Type != httplimit.ProblemTypeUnavailable || p.Status != 503 {
		t.Errorf("shed: %d, Retry-After %q, %s; want 503, 2, a temporary-reduced-capacity problem", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp.Header.Get("X-RateLimit-Remaining") != "" {
		t.Errorf("the shed request has rate-limit headers %v, which speak of no limit it broke", resp.Header)
	}
	e := obs.last(t)
	if e.Outcome != httplimit.OutcomeShed || e.Class != adaptive.Default || len(e.Rules) != 2 || e.Rules[1].Outcome != httplimit.OutcomeShed || e.Rules[1].Decision.Limit != 2 {
		t.Errorf("event %+v, want shed, class default, the adaptive rule shed under a limit of 2", e)
	}

	crit := make(chan *http.Response)
	go func() { crit <- do("critical") }()
	<-g.started
	close(g.release)
	(<-held).Body.Close()
	resp = <-crit
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("critical request: %d, want 200", resp.StatusCode)
	}
	classes := map[adaptive.Class]int{}
	obs.mu.Lock()
	for _, e := range obs.events {
		classes[e.Class]++
	}
	obs.mu.Unlock()
	if classes[adaptive.Critical] != 1 || classes[adaptive.Default] != 2 {
		t.Errorf("classes observed %v, want one critical and two default", classes)
	}
	// The per-ip rule charged all three: it admitted the shed one
	// before the adaptive rule shed it, and counts attempts.
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "97" {
		t.Errorf("X-RateLimit-Remaining %q after three requests, want 97", got)
	}

	obs.lmu.Lock()
	defer obs.lmu.Unlock()
	var shed, granted int
	for _, le := range obs.got {
		switch {
		case le.Rule == "upstream" && le.Outcome == httplimit.LeaseShed && le.Reason == adaptive.NoSlot && le.Class == adaptive.Default:
			shed++
		case le.Rule == "upstream" && le.Outcome == httplimit.LeaseGranted:
			granted++
		default:
			t.Errorf("lease event %+v", le)
		}
	}
	if shed != 1 || granted != 2 {
		t.Errorf("%d shed and %d granted lease events, want 1 and 2", shed, granted)
	}
	if st := lim.Stats(); st.InFlight != 0 {
		t.Errorf("%d in flight after every response, want 0", st.InFlight)
	}
}

// A request that waits in the adaptive rule's queue is delayed by that
// wait; one whose client leaves meanwhile is canceled and given back.
func TestAdaptiveRuleQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New(memstore.Options{SweepInterval: -1})
		defer store.Close()
		obs := &recorder{}
		l, err := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{adaptiveRule(pinned(t, 1, adaptive.Options{MaxWait: time.Second}))}, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(300 * time.Millisecond) }))
		serve := func(r *http.Request) int {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { serve(httptest.NewRequest("GET", "/api/a", nil)) })
		synctest.Wait()
		if code := serve(httptest.NewRequest("GET", "/api/b", nil)); code != 200 {
			t.Fatalf("queued request: %d, want 200", code)
		}
		e := obs.last(t)
		if e.Outcome != httplimit.OutcomeDelayed || e.Delay != 300*time.Millisecond || e.Rules[0].Outcome != httplimit.OutcomeDelayed {
			t.Errorf("event %+v, want delayed 300ms", e)
		}
		wg.Go(func() { serve(httptest.NewRequest("GET", "/api/a", nil)) })
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(100 * time.Millisecond); cancel() }()
		serve(httptest.NewRequest("GET", "/api/c", nil).WithContext(ctx))
		if e := obs.last(t); e.Outcome != httplimit.OutcomeCanceled || e.Delay != 100*time.Millisecond {
			t.Errorf("event %+v, want canceled after 100ms", e)
		}
	})
}

// Each request gets its class from, in order: the Priority's From
// attribute, its routes, the tier, the default.
func TestPriorityClasses(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	obs := &recorder{}
	l, err := httplimit.New(httplimit.Options{
		Store: store,
		Rules: []httplimit.Rule{adaptiveRule(pinned(t, 100, adaptive.Options{}))},
		Tiers: httplimit.Tiers{From: httplimit.Header("X-Plan"), Default: "pro"},
		Priority: httplimit.Priority{
			From: httplimit.Header("X-Priority"),
			Routes: []httplimit.PriorityRoute{
				{Match: httplimit.Match{Paths: []string{"/api/Checkout/*"}}, Class: adaptive.Critical},
				{Match: httplimit.Match{Paths: []string{"/api/recommend"}, Methods: []string{"GET"}}, Class: adaptive.Sheddable},
			},
			Tiers:   map[string]adaptive.Class{"enterprise": adaptive.Critical, "free": adaptive.Sheddable},
			Default: adaptive.Default,
		},
		Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := l.Handler(http.NotFoundHandler())
	for _, tc := range []struct {
		method, path, priority, plan string
		want                         adaptive.Class
	}{
		{"GET", "/api/x", "", "", adaptive.Default},
		{"GET", "/api/x", "critical", "free", adaptive.Critical},
		{"GET", "/api/checkout/pay", "Sheddable", "", adaptive.Sheddable},
		{"GET", "/api/checkout/pay", "", "free", adaptive.Critical},
		{"GET", "/API/CHECKOUT", "", "", adaptive.Critical},
		{"GET", "/api/checkout/pay", "urgent", "", adaptive.Critical}, // not a class: the next source
		{"GET", "/api/recommend", "", "enterprise", adaptive.Sheddable},
		{"POST", "/api/recommend", "", "enterprise", adaptive.Critical},
		{"GET", "/api/x", "", "free", adaptive.Sheddable},
		{"GET", "/api/x", "", "pro", adaptive.Default},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.priority != "" {
			r.Header.Set("X-Priority", tc.priority)
		}
		if tc.plan != "" {
			r.Header.Set("X-Plan", tc.plan)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if got := obs.last(t).Class; got != tc.want {
			t.Errorf("%s %s, priority %q, plan %q: class %v, want %v", tc.method, tc.path, tc.priority, tc.plan, got, tc.want)
		}
	}
}

// Two gateways on one store with a fleet limit of 4: default requests
// (90%) fill 3 slots across both, a critical one the last.
func TestAdaptiveRuleFleet(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	g := gated{started: make(chan struct{}, 16), release: make(chan struct{})}
	var srvs []*httptest.Server
	for range 2 {
		rule := adaptiveRule(pinned(t, 100, adaptive.Options{}))
		rule.Concurrency.Limit, rule.Concurrency.Lease = 4, time.Minute
		l, err := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{rule}, Priority: httplimit.Priority{From: httplimit.Header("X-Priority")}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(l.Handler(g))
		defer srv.Close()
		srvs = append(srvs, srv)
	}
	codes := make(chan int, 8)
	ask := func(i int, class string) {
		req, _ := http.NewRequest("GET", srvs[i%2].URL+"/api/x", nil)
		req.Header.Set("X-Priority", class)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			codes <- -1
			return
		}
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	for i := range 3 {
		go ask(i, "default")
		<-g.started
	}
	ask(3, "default")
	if code := <-codes; code != 503 {
		t.Errorf("a fourth default request across the fleet: %d, want 503", code)
	}
	go ask(4, "critical")
	<-g.started
	close(g.release)
	for range 4 {
		if code := <-codes; code != 200 {
			t.Errorf("held request: %d, want 200", code)
		}
	}
}

func TestAdaptiveRuleValidation(t *testing.T) {
	lim := pinned(t, 10, adaptive.Options{})
	for _, tc := range []struct {
		name string
		rule func(r *httplimit.Rule)
		want string
	}{
		{"delay", func(r *httplimit.Rule) { r.Action, r.MaxDelay = httplimit.Delay, time.Second }, "action is reject"},
		{"key", func(r *httplimit.Rule) { r.Key = []httplimit.KeyPart{httplimit.IP()} }, "no key"},
		{"rate", func(r *httplimit.Rule) { r.Limit = limit(sluice.GCRA, 1, time.Second) }, "no rate limit"},
		{"lease without a fleet", func(r *httplimit.Rule) { r.Concurrency.Lease = time.Minute }, "lease only with a fleet limit"},
		{"fleet without a lease", func(r *httplimit.Rule) { r.Concurrency.Limit = 10 }, "lease 0s"},
		{"negative fleet", func(r *httplimit.Rule) { r.Concurrency.Limit = -1 }, "fleet limit -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := adaptiveRule(lim)
			tc.rule(&r)
			err := r.Validate()
			if !errors.Is(err, httplimit.ErrInvalidRule) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrInvalidRule saying %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		p    httplimit.Priority
		want string
	}{
		{"global", httplimit.Priority{From: httplimit.Global()}, "priority cannot come from"},
		{"route path", httplimit.Priority{Routes: []httplimit.PriorityRoute{{Match: httplimit.Match{Paths: []string{"api"}}}}}, "priority route 0: path"},
		{"route class", httplimit.Priority{Routes: []httplimit.PriorityRoute{{Class: 5}}}, "unknown class 5"},
		{"tier name", httplimit.Priority{Tiers: map[string]adaptive.Class{"a b": adaptive.Critical}}, "tier name"},
		{"default", httplimit.Priority{Default: -4}, "unknown default class"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httplimit.New(httplimit.Options{Store: memstore.New(memstore.Options{}), Rules: []httplimit.Rule{adaptiveRule(lim)}, Priority: tc.p})
			if !errors.Is(err, httplimit.ErrInvalidRule) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrInvalidRule saying %q", err, tc.want)
			}
		})
	}
}
