//go:build !race

package forwardauth_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/internal/forwardauth"
)

// The endpoint's own work for an admitted auth request (rebuilding the
// original request, answering 200) allocates the original's one copy of
// the request, its URL, fields and connection address, and no more.
func TestEndpointAllocations(t *testing.T) {
	h, err := forwardauth.New(func(next http.Handler) http.Handler { return next },
		forwardauth.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/auth", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	for k, v := range forwarded("GET", "/api/search?q=x", "api.example.com", "10.1.2.3, 127.0.0.1") {
		r.Header[k] = v
	}
	r.Header.Set("X-Api-Key", "key-1")
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, r)
	if got := w.h.Get("Content-Length"); got != "0" {
		t.Fatalf("answer fields %v, want the 200's Content-Length: 0", w.h)
	}
	const most = 7
	if n := testing.AllocsPerRun(1000, func() { clear(w.h); h.ServeHTTP(w, r) }); n > most {
		t.Errorf("%.1f allocations an auth request, want at most %d", n, most)
	}
}
