package adaptive_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/adaptive"
)

// An upstream behind an adaptive limit. Requests are classed by a header
// that the authentication layer in front sets (and strips from clients'
// requests); here the limit is pinned at 2 to show what happens when it
// is reached: a default request beyond its 90% share is shed with 503,
// a critical one still passes.
func ExampleMiddleware() {
	lim, err := adaptive.New(adaptive.Options{MinLimit: 2, MaxLimit: 2, InitialLimit: 2})
	if err != nil {
		panic(err)
	}
	protect := adaptive.Middleware(lim, adaptive.MiddlewareOptions{
		Class: func(r *http.Request) adaptive.Class {
			c, _ := adaptive.ParseClass(r.Header.Get("X-Priority")) // Default if absent
			return c
		},
	})
	ask := func(h http.Handler, class string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Priority", class)
		h.ServeHTTP(w, r)
		return w
	}
	var during [2]*httptest.ResponseRecorder
	h := protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if during[0] == nil { // while this request is in flight, two more come
			during[0] = ask(protect(http.NotFoundHandler()), "default")
			during[1] = ask(protect(http.NotFoundHandler()), "critical")
		}
	}))
	first := ask(h, "default")
	fmt.Println("first:", first.Code)
	fmt.Println("default:", during[0].Code, during[0].Header().Get("Retry-After"))
	fmt.Println("critical:", during[1].Code)
	// Output:
	// first: 200
	// default: 503 1
	// critical: 404
}

// Acquire and Release protect any kind of call, not only HTTP: here a
// worker pool's jobs, with the limit learned from how long they take.
func ExampleLimiter_Acquire() {
	lim, err := adaptive.New(adaptive.Options{MaxWait: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	job := func(ctx context.Context, critical bool) error {
		class := adaptive.Default
		if critical {
			class = adaptive.Critical
		}
		slot, adm, err := lim.Acquire(ctx, class)
		if err != nil {
			return err // ctx ended while the job waited
		}
		if !adm.Admitted {
			return fmt.Errorf("shed (%s): retry in %v", adm.Reason, adm.RetryAfter)
		}
		outcome := adaptive.Succeeded
		defer func() { slot.Release(ctx, outcome) }()
		// ... call the upstream; on a timeout or a refusal:
		// outcome = adaptive.Overloaded
		return nil
	}
	fmt.Println(job(context.Background(), true))
	// Output: <nil>
}
