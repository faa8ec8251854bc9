package identity

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkLimiterTokenPath decides requests of 1,000 clients with the
// per-client rule keyed and tiered by the client's token (jwt:sub,
// jwt:plan: every token verified once, then from the cache), against the
// same rule keyed and tiered by headers, on the in-memory store: the
// difference is what the token path adds to a decision.
func BenchmarkLimiterTokenPath(b *testing.B) {
	v, _, _ := newVerifier(b)
	v.opts.Clock = wall{}
	v.opts.Claims = []string{"sub", "plan"}
	lim := sluice.Limit{Algorithm: sluice.TokenBucket, Count: 1_000_000, Period: time.Second}
	tiers := map[string]sluice.Limit{"premium": {Algorithm: sluice.TokenBucket, Count: 2_000_000, Period: time.Second}}
	const clients = 1000
	for _, bc := range []struct {
		name  string
		key   httplimit.KeyPart
		tier  httplimit.KeyPart
		setup func(r *http.Request, i int)
	}{
		{"header", httplimit.Header("X-User"), httplimit.Header("X-Plan"), func(r *http.Request, i int) {
			r.Header.Set("X-User", "user-"+strconv.Itoa(i))
			r.Header.Set("X-Plan", "premium")
		}},
		{"jwt", httplimit.JWT("sub"), httplimit.JWT("plan"), func(r *http.Request, i int) {
			tok := sign(b, "HS256", testKeys()["HS256"], "HS256", claims(map[string]any{"sub": "user-" + strconv.Itoa(i),
				"exp": time.Now().Add(time.Hour).Unix(), "nbf": nil, "iat": nil}))
			r.Header.Set("Authorization", "Bearer "+tok)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store := memstore.New(memstore.Options{})
			defer store.Close()
			l, err := httplimit.New(httplimit.Options{Store: store, Identity: v, Tiers: httplimit.Tiers{From: bc.tier},
				Rules: []httplimit.Rule{{Name: "api", Key: []httplimit.KeyPart{bc.key}, Limit: lim, Tiers: tiers}}})
			if err != nil {
				b.Fatal(err)
			}
			h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			reqs := make([]*http.Request, clients)
			for i := range reqs {
				reqs[i] = httptest.NewRequest("GET", "/api/search", nil)
				bc.setup(reqs[i], i)
				h.ServeHTTP(&discard{h: http.Header{}}, reqs[i]) // verified once, then cached
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := &discard{h: http.Header{}}
				i := 0
				for pb.Next() {
					clear(w.h)
					h.ServeHTTP(w, reqs[i%clients])
					i++
				}
			})
		})
	}
}

type wall struct{}

func (wall) Now() time.Time { return time.Now() }
