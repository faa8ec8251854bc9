//go:build !race

package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// An admitted request of the quickstart's kind (two limits charged, five
// rate-limit fields set) allocates its keys' string, the fields' string,
// their values' array, and what the store and the context need: not the
// slice of fields, which the pooled call keeps.
func TestAdmittedRequestAllocations(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim, err := httplimit.New(httplimit.Options{Store: store, Rules: quickstartRules(), Tiers: httplimit.Tiers{From: httplimit.Header("X-Plan")}})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/api/search?q=x", nil)
	r.Header.Set("X-API-Key", "key-1")
	r.Header.Set("X-Plan", "enterprise") // high limits: every request is admitted
	w := &discard{h: make(http.Header)}
	h.ServeHTTP(w, r)
	if len(w.h["Ratelimit"]) != 1 {
		t.Fatalf("fields %v, want RateLimit among them", w.h)
	}
	const most = 5
	if n := testing.AllocsPerRun(1000, func() { clear(w.h); h.ServeHTTP(w, r) }); n > most {
		t.Errorf("%.1f allocations a request, want at most %d", n, most)
	}
}
