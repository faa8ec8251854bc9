// Command gateway serves the roles of the gateway benchmark: the upstream
// alone (-role upstream), a plain reverse proxy in front of it (-role
// proxy -upstream URL: the very proxy the sluice gateway runs, with no rate
// limiting in front), and `sluice serve` itself, in process (-role sluice
// -config FILE), so that it can be profiled; and a forward-auth endpoint
// that admits everything (-role allow), to measure nginx's auth subrequest
// without a decision. With -cpuprofile and
// -memprofile a role writes its CPU and allocation profiles when it is
// interrupted (SIGINT or SIGTERM).
// run.sh and compare.sh start them beside the peers and drive all with wrk.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/proxy"
)

func main() {
	role := flag.String("role", "upstream", "upstream, allow, proxy or sluice")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on (upstream, allow, proxy)")
	upstream := flag.String("upstream", "", "the upstream URL, for -role proxy")
	config := flag.String("config", "", "the config file, for -role sluice")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file on SIGINT or SIGTERM")
	memProfile := flag.String("memprofile", "", "write an allocation profile to this file on SIGINT or SIGTERM")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			f, err := os.Create(*memProfile)
			if err != nil {
				log.Fatal(err)
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				log.Fatal(err)
			}
		}()
	}
	var h http.Handler
	switch *role {
	case "upstream":
		body := []byte(`{"ok":true,"items":[1,2,3],"note":"a small JSON answer of about one hundred bytes......."}` + "\n")
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		})
	case "allow":
		// A forward-auth endpoint that admits every request at once: the
		// cost of nginx's auth subrequest without a decision.
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Length"] = []string{"0"}
		})
	case "proxy":
		u, err := url.Parse(*upstream)
		if err != nil || u.Host == "" {
			log.Fatalf("-upstream %q: want a URL", *upstream)
		}
		// The gateway's own proxy (with its transport and buffer pool),
		// without the rate limiting around it.
		h = proxy.New(u, proxy.Options{Logger: slog.New(slog.DiscardHandler)})
	case "sluice":
		if code := cli.Run(ctx, []string{"serve", "--config", *config}, os.Stdout, os.Stderr); code != 0 {
			log.Printf("sluice serve exited %d", code)
		}
		return
	default:
		log.Fatalf("-role %q: want upstream, allow, proxy or sluice", *role)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Print(err)
	}
}
