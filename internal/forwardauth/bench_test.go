package forwardauth_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/forwardauth"
	"github.com/sluicehq/sluice/memstore"
)

// discard is a ResponseWriter that keeps nothing but its header.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkForwardAuth answers auth requests as nginx's auth_request
// sends them for the gateway benchmark's clients (an API key, the client's
// address appended to its X-Forwarded-For), against the quickstart's search
// and per-ip rules on the in-memory store: "decide" through the limiter,
// "endpoint" with a limiter that admits everything unasked, which is the
// endpoint's own cost.
func BenchmarkForwardAuth(b *testing.B) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	ip, err := clientip.New(clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		b.Fatal(err)
	}
	lim, err := httplimit.New(httplimit.Options{Store: store, ClientIP: ip, Rules: []httplimit.Rule{
		{Name: "search", Match: httplimit.Match{Paths: []string{"/api/search"}}, Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")},
			Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Count: 1000, Period: 10 * time.Second, Burst: 2000}},
		{Name: "per-ip", Match: httplimit.Match{Paths: []string{"/*"}},
			Limit: sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 1000, Period: time.Hour}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	const clients = 10000
	reqs := make([]*http.Request, clients)
	for i := range reqs {
		r := httptest.NewRequest("GET", "/auth", nil)
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("X-Forwarded-Method", "GET")
		r.Header.Set("X-Forwarded-Uri", "/api/search?q=x")
		r.Header.Set("X-Forwarded-Host", "127.0.0.1:18092")
		r.Header.Set("X-Forwarded-Proto", "http")
		r.Header.Set("X-Forwarded-For", "10."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255)+".1, 127.0.0.1")
		r.Header.Set("X-Api-Key", "key-"+strconv.Itoa(i))
		r.Header.Set("User-Agent", "wrk")
		reqs[i] = r
	}
	for _, tc := range []struct {
		name  string
		limit func(http.Handler) http.Handler
	}{
		{"decide", lim.Handler},
		{"endpoint", func(next http.Handler) http.Handler { return next }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h, err := forwardauth.New(tc.limit, forwardauth.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
			if err != nil {
				b.Fatal(err)
			}
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%clients])
			}
		})
	}
}
