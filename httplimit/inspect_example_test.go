package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// An operator looks at a client's login counter without charging it, and
// resets it.
func ExampleLimiter_PeekKey() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim, _ := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{{
		Name:  "login",
		Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Count: 5, Period: time.Minute},
	}}})
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = "203.0.113.9:40000"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	ctx := context.Background()
	key, _ := lim.RuleKey("login", []string{"203.0.113.9"})
	st, _ := lim.PeekKey(ctx, "login", key, nil)
	fmt.Println("remaining:", st[0].Decision.Remaining)
	_ = lim.ResetKey(ctx, "login", key, nil)
	st, _ = lim.PeekKey(ctx, "login", key, nil)
	fmt.Println("after reset:", st[0].Decision.Remaining)
	// Output:
	// remaining: 2
	// after reset: 5
}

// overrideTable is the simplest httplimit.Overrides: a map.
type overrideTable struct {
	sync.RWMutex
	m map[string]*httplimit.ClientOverride
}

func (t *overrideTable) Override(client string) *httplimit.ClientOverride {
	t.RLock()
	defer t.RUnlock()
	return t.m[client]
}

// One API key gets a limit of its own, ahead of its tier.
func ExampleNewClientOverride() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	table := &overrideTable{m: map[string]*httplimit.ClientOverride{}}
	lim, _ := httplimit.New(httplimit.Options{
		Store:     store,
		Tiers:     httplimit.Tiers{From: httplimit.Header("X-API-Key")},
		Overrides: table,
		Rules: []httplimit.Rule{{
			Name:  "api",
			Key:   []httplimit.KeyPart{httplimit.Header("X-API-Key")},
			Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Hour},
		}},
	})
	big, _ := httplimit.NewClientOverride(store, "key-of-acme", httplimit.Override{
		Limits: map[string]sluice.Limit{"api": {Algorithm: sluice.FixedWindow, Count: 100, Period: time.Hour}},
	})
	table.Lock()
	table.m["key-of-acme"] = big
	table.Unlock()

	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "key-of-acme")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Header().Get("RateLimit-Policy"))
	// Output:
	// "api";q=100;w=3600
}
