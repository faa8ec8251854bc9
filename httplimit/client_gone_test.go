package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// TestDecisionsOutliveTheClient sends requests whose client has already
// gone through a limiter on a real Redis: each is still decided and
// charged, and none is counted as a store error.
func TestDecisionsOutliveTheClient(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(redisstore.Options{URL: srv.URL(), OnError: redisstore.Deny, DenyCache: -1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	obs := &recorder{}
	lim, err := httplimit.New(httplimit.Options{Store: store, Observer: obs, Rules: []httplimit.Rule{{
		Name: "per-ip", Key: []httplimit.KeyPart{httplimit.IP()}, Limit: limit(sluice.FixedWindow, 3, time.Hour),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 2 {
		r := httptest.NewRequestWithContext(gone, "GET", "/", nil)
		r.RemoteAddr = "192.0.2.7:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		eq(t, "status", w.Code, http.StatusOK)
		ev := obs.last(t)
		eq(t, "outcome of request "+string(rune('1'+i)), ev.Outcome, httplimit.OutcomeAllowed)
		eq(t, "remaining after request "+string(rune('1'+i)), ev.Rules[0].Decision.Remaining, int64(2-i))
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.7:1234"
	h.ServeHTTP(httptest.NewRecorder(), r)
	eq(t, "remaining seen by a client that stays", obs.last(t).Rules[0].Decision.Remaining, int64(0))
}

// TestDelayEndsWhenClientGoes checks that a request waiting out a Delay
// rule's delay stops waiting when its client goes away, is not served, and
// gives its turn back to the next request.
func TestDelayEndsWhenClientGoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New(memstore.Options{Clock: wallClock{}, SweepInterval: -1})
		defer store.Close()
		var mu sync.Mutex
		served := 0
		obs := &recorder{}
		lim, err := httplimit.New(httplimit.Options{Store: store, Observer: obs, Rules: []httplimit.Rule{{
			Name: "export", Action: httplimit.Delay, MaxDelay: 5 * time.Second,
			Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: 2 * time.Second},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			mu.Lock()
			served++
			mu.Unlock()
		}))
		start := time.Now()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/export", nil)) // takes the slot at 0 s

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan time.Duration)
		go func() {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, "GET", "/export", nil)) // waits for the slot at 2 s
			done <- time.Since(start)
		}()
		time.Sleep(time.Second)
		cancel()
		eq(t, "the waiting request returned at", <-done, time.Second)
		gone := obs.last(t)
		eq(t, "outcome of the request whose client went", gone.Outcome, httplimit.OutcomeCanceled)
		eq(t, "its rule's outcome", gone.Rules[0].Outcome, httplimit.OutcomeCanceled)
		eq(t, "its wait", gone.Delay, time.Second)
		eq(t, "its store error", gone.Rules[0].Err, error(nil))
		mu.Lock()
		eq(t, "requests served", served, 1)
		mu.Unlock()

		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/export", nil))
		eq(t, "the next request was served at", time.Since(start), 2*time.Second)
		eq(t, "its delay", obs.last(t).Delay, time.Second)
	})
}
