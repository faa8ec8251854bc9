// Command gateway serves the two baselines of the gateway benchmark: the
// upstream alone (-role upstream) and a plain httputil.ReverseProxy in front
// of it (-role proxy -upstream URL): the very proxy the sluice gateway runs,
// with no rate limiting in front.
// run.sh starts them beside `sluice serve` and drives all with wrk; see
// BENCHMARKS.md.
package main

import (
	"flag"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/sluicehq/sluice/internal/proxy"
)

func main() {
	role := flag.String("role", "upstream", "upstream or proxy")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := flag.String("upstream", "", "the upstream URL, for -role proxy")
	flag.Parse()
	var h http.Handler
	switch *role {
	case "upstream":
		body := []byte(`{"ok":true,"items":[1,2,3],"note":"a small JSON answer of about one hundred bytes......."}` + "\n")
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		})
	case "proxy":
		u, err := url.Parse(*upstream)
		if err != nil || u.Host == "" {
			log.Fatalf("-upstream %q: want a URL", *upstream)
		}
		// The gateway's own proxy (an httputil.ReverseProxy with its
		// transport and buffer pool), without the rate limiting around it.
		h = proxy.New(u, proxy.Options{Logger: slog.New(slog.DiscardHandler)})
	default:
		log.Fatalf("-role %q: want upstream or proxy", *role)
	}
	log.Fatal(http.ListenAndServe(*listen, h))
}
