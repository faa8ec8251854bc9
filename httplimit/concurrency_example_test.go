package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// One export at a time per user: a second request while the first runs is
// answered 429.
func ExampleConcurrent() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	exports, err := sluice.NewConcurrency(store, "exports", 1, 30*time.Second)
	if err != nil {
		panic(err)
	}
	limit := httplimit.Concurrent(exports, httplimit.ConcurrencyOptions{
		Key: func(r *http.Request) (string, bool) { return r.Header.Get("User"), true },
	})
	var second *httptest.ResponseRecorder
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if second == nil { // while this export runs, the same user asks again
			second = httptest.NewRecorder()
			req := httptest.NewRequest("GET", "/export", nil)
			req.Header.Set("User", "ada")
			limit(http.NotFoundHandler()).ServeHTTP(second, req)
		}
	}))
	first := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/export", nil)
	req.Header.Set("User", "ada")
	h.ServeHTTP(first, req)
	fmt.Println("first:", first.Code, first.Header().Get("RateLimit"))
	fmt.Println("second:", second.Code, second.Header().Get("RateLimit-Policy"))
	// Output:
	// first: 200 "exports";r=0
	// second: 429 "exports";q=1;qu="concurrent-requests"
}
