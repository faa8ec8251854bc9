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

// Rules built in code protect a standard ServeMux: five login attempts per
// minute per client IP, and 20 searches per 10 seconds per API key (100 for
// premium keys).
func Example() {
	store := memstore.New(memstore.Options{})
	defer store.Close()

	mw, err := httplimit.Middleware(httplimit.Options{
		Store: store,
		Rules: []httplimit.Rule{
			{
				Name:  "login",
				Match: httplimit.Match{Paths: []string{"/login"}, Methods: []string{http.MethodPost}},
				Key:   []httplimit.KeyPart{httplimit.IP()},
				Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Count: 5, Period: time.Minute},
			},
			{
				Name:  "search",
				Match: httplimit.Match{Paths: []string{"/api/search"}},
				Key:   []httplimit.KeyPart{httplimit.Header("X-API-Key")},
				Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Count: 20, Period: 10 * time.Second},
				Tiers: map[string]sluice.Limit{
					"premium": {Algorithm: sluice.TokenBucket, Count: 100, Period: 10 * time.Second},
				},
			},
		},
		Tiers: httplimit.Tiers{From: httplimit.Header("X-Plan")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "welcome") })
	handler := mw(mux)

	for i := 1; i <= 6; i++ {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("POST", "/login", nil))
		fmt.Printf("%d %d RateLimit: %s Retry-After: %q\n", i, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 1 200 RateLimit: "login";r=4;t=60 Retry-After: ""
	// 2 200 RateLimit: "login";r=3;t=60 Retry-After: ""
	// 3 200 RateLimit: "login";r=2;t=60 Retry-After: ""
	// 4 200 RateLimit: "login";r=1;t=60 Retry-After: ""
	// 5 200 RateLimit: "login";r=0;t=60 Retry-After: ""
	// 6 429 RateLimit: "login";r=0;t=60 Retry-After: "60"
}
