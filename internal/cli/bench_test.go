package cli

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/server"
)

// BenchmarkGateway measures what the gateway adds to a proxied request:
// "proxy" is the gateway's reverse proxy alone, "quickstart" the gateway
// built from examples/quickstart.yaml in front of the same proxy, both
// forwarding GET /api/search over loopback to a real upstream. Every request
// comes from another client with another API key, so every one is admitted
// and proxied. The response recorder stands in for the client connection.
func BenchmarkGateway(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true,"items":[1,2,3],"note":"a small JSON answer of about one hundred bytes......."}`+"\n")
	}))
	b.Cleanup(upstream.Close)
	u, err := url.Parse(upstream.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Load("../../examples/quickstart.yaml")
	if err != nil {
		b.Fatal(err)
	}
	opts, err := options(cfg)
	if err != nil {
		b.Fatal(err)
	}
	opts.Upstream = upstream.URL
	opts.Admin = ""
	opts.Logger = slog.New(slog.DiscardHandler)
	g, err := server.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"proxy", proxy.New(u, proxy.Options{Logger: opts.Logger})},
		{"quickstart", g.Handler()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := 0
				for pb.Next() {
					n++
					r := httptest.NewRequest("GET", "/api/search?q=x", nil)
					r.RemoteAddr = "10." + strconv.Itoa(n%250) + "." + strconv.Itoa(n/250%250) + ".1:40000"
					r.Header.Set("X-API-Key", "key-"+strconv.Itoa(n%200000))
					w := httptest.NewRecorder()
					c.h.ServeHTTP(w, r)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}
