// Command gateway serves the roles of the gateway benchmark: the upstream
// alone (-role upstream), a plain reverse proxy in front of it (-role
// proxy -upstream URL: the very proxy the sluice gateway runs, with no rate
// limiting in front), and `sluice serve` itself, in process (-role sluice
// -config FILE), so that it can be profiled; and a forward-auth endpoint
// that admits everything (-role allow), to measure nginx's auth subrequest
// without a decision; and -role load, which sends exactly -n requests of
// clients.lua's mix over -c keep-alive connections to -target and checks
// that each is answered 200, for counting a server's instructions per
// request under callgrind (callgrind.sh). With -cpuprofile and
// -memprofile a role writes its CPU and allocation profiles when it is
// interrupted (SIGINT or SIGTERM).
// run.sh and compare.sh start them beside the peers and drive all with wrk.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/proxy"
)

func main() {
	role := flag.String("role", "upstream", "upstream, allow, proxy, sluice or load")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on (upstream, allow, proxy)")
	upstream := flag.String("upstream", "", "the upstream URL, for -role proxy")
	config := flag.String("config", "", "the config file, for -role sluice")
	target := flag.String("target", "", "the host:port to load, for -role load")
	n := flag.Int("n", 10000, "requests to send, for -role load")
	conns := flag.Int("c", 8, "connections, for -role load")
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
	case "load":
		if err := load(*target, *n, *conns); err != nil {
			log.Fatal(err)
		}
		return
	case "sluice":
		if code := cli.Run(ctx, []string{"serve", "--config", *config}, os.Stdout, os.Stderr); code != 0 {
			log.Printf("sluice serve exited %d", code)
		}
		return
	default:
		log.Fatalf("-role %q: want upstream, allow, proxy, sluice or load", *role)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	// The settings sluice serve gives its gateway listener by default, so
	// that the proxy's cost beside sluice's is the limiter's.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Print(err)
	}
}

// load sends n requests, as clients.lua makes them, over conns keep-alive
// connections to addr, and fails on any answer but 200.
func load(addr string, n, conns int) error {
	var next atomic.Int64
	errc := make(chan error, conns)
	for range conns {
		go func() {
			errc <- func() error {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return err
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					i := next.Add(1)
					if i > int64(n) {
						return nil
					}
					ip := fmt.Sprintf("10.%d.%d.%d", i%250, i/250%250, i/62500%250+1)
					fmt.Fprintf(c, "GET /api/search?q=x HTTP/1.1\r\nHost: %s\r\nX-API-Key: key-%d\r\nX-Forwarded-For: %s\r\n\r\n", addr, i%200000, ip)
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						return err
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil {
						return err
					}
					if resp.StatusCode != http.StatusOK {
						return fmt.Errorf("request %d: status %d", i, resp.StatusCode)
					}
				}
			}()
		}()
	}
	for range conns {
		if err := <-errc; err != nil {
			return err
		}
	}
	return nil
}
