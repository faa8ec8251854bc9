// Package gateway is the sluice command's gateway: the httplimit middleware
// in front of a reverse proxy (or the built-in echo upstream), with an
// admin listener for Prometheus metrics and health checks.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// EchoUpstream is the Upstream value that selects the built-in echo handler.
const EchoUpstream = "builtin:echo"

// Options configure a Gateway. Limiter.Store and Limiter.Observer are set
// by the gateway.
type Options struct {
	// Listen is the gateway's address. Default 127.0.0.1:8080.
	Listen string
	// Admin is the admin listener's address (/metrics, /healthz, /readyz);
	// empty disables it.
	Admin string
	// Upstream is EchoUpstream or an http or https URL.
	Upstream string
	// ShutdownTimeout bounds the graceful shutdown. Default 10 s.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers. Default 10 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included, so that
	// a client trickling its body cannot hold a connection (here and
	// upstream) for long; such a request is answered 408. It is counted
	// again when the request is passed upstream, so a delay rule's wait
	// does not eat into it. An upgraded connection (WebSocket) is free of
	// it once upgraded. Default 60 s.
	ReadTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request. Default 2 min.
	IdleTimeout time.Duration
	// Proxy configures the reverse proxy to an http(s) Upstream: its
	// timeouts and Host header. Its ClientIP defaults to Limiter.ClientIP
	// and its Logger to Logger.
	Proxy ProxyOptions
	// MaxHeaderBytes bounds a request's headers. Default 64 KiB.
	MaxHeaderBytes int
	// Backend is "memory" (default) or "redis".
	Backend string
	// MaxKeys caps the in-memory store's entries (and, with Redis, the
	// local fallback's). Default 1,000,000.
	MaxKeys int
	// Redis configures the Redis store when Backend is "redis".
	Redis redisstore.Options
	// Limiter holds the rules, tiers, headers and client-IP settings.
	Limiter httplimit.Options
	// LogLinesPerSecond bounds the rejection log. Default 10.
	LogLinesPerSecond int64
	// Logger receives the gateway's logs. Default slog.Default().
	Logger *slog.Logger
}

// Gateway is a running configuration: build it with New, serve it with Run
// or use its handlers directly.
type Gateway struct {
	opts     Options
	log      *slog.Logger
	store    sluice.Store
	closer   func() error
	ready    func(context.Context) error
	handler  http.Handler
	admin    http.Handler
	draining atomic.Bool
}

// New builds the store, the limiter and the handlers. Close releases them.
func New(opts Options) (*Gateway, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:8080"
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = 10 * time.Second
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 60 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = 64 << 10
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.LogLinesPerSecond == 0 {
		opts.LogLinesPerSecond = 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	g := &Gateway{opts: opts, log: opts.Logger}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	backend := opts.Backend
	if backend == "" {
		backend = "memory"
	}
	m := newMetrics(reg, backend)
	next, err := newUpstream(opts, g.log, m)
	if err != nil {
		return nil, err
	}
	if err := g.openStore(backend, reg, m); err != nil {
		return nil, err
	}
	lo := opts.Limiter
	lo.Store = g.store
	lo.Observer = newObserver(m, backend, g.log, opts.LogLinesPerSecond)
	lim, err := httplimit.New(lo)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.handler = lim.Handler(next)

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if g.draining.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := g.ready(ctx); err != nil {
			http.Error(w, "store not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	g.admin = mux
	return g, nil
}

func (g *Gateway) openStore(backend string, reg prometheus.Registerer, m *metrics) error {
	switch backend {
	case "memory":
		s := memstore.New(memstore.Options{MaxKeys: g.opts.MaxKeys})
		g.store, g.closer = s, s.Close
		g.ready = func(context.Context) error { return nil }
		registerMemstore(reg, s, "the in-memory store")
	case "redis":
		ro := g.opts.Redis
		local := memstore.New(memstore.Options{MaxKeys: g.opts.MaxKeys})
		if ro.Fallback == nil {
			ro.Fallback = local
		}
		userHook := ro.OnFailure
		failLog := &logLimit{per: 1} // one line a second: a dead Redis fails every decision
		onError := ro.OnError.String()
		ro.OnFailure = func(err error) {
			m.storeErrors.WithLabelValues("redis").Inc()
			if failLog.allow(time.Now()) {
				g.log.LogAttrs(context.Background(), slog.LevelWarn, "Redis failed; deciding per on_error",
					slog.String("on_error", onError), slog.Any("error", err))
			}
			if userHook != nil {
				userHook(err)
			}
		}
		// A gateway starts during a Redis outage and decides per on_error
		// until Redis answers: refusing to start would turn the outage of
		// Redis into an outage of every API behind a restarted gateway.
		ro.ConnectLater = true
		s, err := redisstore.New(ro)
		if err != nil {
			local.Close()
			return fmt.Errorf("gateway: %w", err)
		}
		if s.Degraded() {
			g.log.LogAttrs(context.Background(), slog.LevelWarn, "Redis unreachable at start; deciding per on_error until it answers",
				slog.String("on_error", onError), slog.Any("error", s.Ping(context.Background())))
		}
		g.store = s
		g.closer = func() error { return errors.Join(s.Close(), local.Close()) }
		g.ready = s.Ping
		registerMemstore(reg, local, "the in-memory fallback store (Redis keeps the shared state)")
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_store_degraded",
			Help: "1 while decisions follow on_error without calling Redis: the circuit breaker is open, or Redis has not answered since the start.",
		}, func() float64 {
			if s.Degraded() {
				return 1
			}
			return 0
		}))
	default:
		return fmt.Errorf("gateway: unknown store backend %q (want memory or redis)", backend)
	}
	return nil
}

// registerMemstore registers the metrics of an in-memory store, which is
// what describes it in their help texts.
func registerMemstore(reg prometheus.Registerer, s *memstore.Store, what string) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_live_keys",
			Help: "Entries held by " + what + ", one per limit per key.",
		}, func() float64 { return float64(s.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_max_keys",
			Help: "The most entries " + what + " keeps (max_keys).",
		}, func() float64 { return float64(s.MaxKeys()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_evicted_keys_total",
			Help: "Entries " + what + " evicted to stay within max_keys while their state still mattered; while it rises, clients may get more than their limits.",
		}, func() float64 { return float64(s.Evicted()) }),
	)
}

// Handler returns the limited gateway handler.
func (g *Gateway) Handler() http.Handler { return g.handler }

// AdminHandler returns the admin handler: /metrics, /healthz, /readyz.
func (g *Gateway) AdminHandler() http.Handler { return g.admin }

// Close releases the store.
func (g *Gateway) Close() error {
	if g.closer == nil {
		return nil
	}
	c := g.closer
	g.closer = nil
	return c()
}

// Run listens on the configured addresses and serves until ctx is done,
// then shuts down gracefully: /readyz turns 503, the listeners stop
// accepting, and requests in flight get up to ShutdownTimeout to finish.
// It calls ready, if non-nil, with the bound addresses once listening.
func (g *Gateway) Run(ctx context.Context, ready func(listen, admin net.Addr)) error {
	ln, err := net.Listen("tcp", g.opts.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	servers := []*http.Server{g.server(g.handler)}
	listeners := []net.Listener{ln}
	var adminAddr net.Addr
	if g.opts.Admin != "" {
		aln, err := net.Listen("tcp", g.opts.Admin)
		if err != nil {
			ln.Close()
			return fmt.Errorf("gateway: admin listen: %w", err)
		}
		servers = append(servers, g.server(g.admin))
		listeners = append(listeners, aln)
		adminAddr = aln.Addr()
	}
	g.log.Info("sluice gateway listening", "listen", ln.Addr().String(), "admin", addrString(adminAddr), "upstream", redact(g.opts.Upstream))
	if ready != nil {
		ready(ln.Addr(), adminAddr)
	}
	errc := make(chan error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			if err := s.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		})
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	g.draining.Store(true)
	g.log.Info("sluice gateway shutting down", "timeout", g.opts.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.opts.ShutdownTimeout)
	defer cancel()
	var errs []error
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("gateway: shutdown: %w", err))
			s.Close()
		}
	}
	wg.Wait()
	return errors.Join(append([]error{runErr}, errs...)...)
}

func (g *Gateway) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: g.opts.ReadHeaderTimeout,
		ReadTimeout:       g.opts.ReadTimeout,
		IdleTimeout:       g.opts.IdleTimeout,
		MaxHeaderBytes:    g.opts.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func redact(upstream string) string {
	if u, err := url.Parse(upstream); err == nil && u.User != nil {
		return u.Redacted()
	}
	return upstream
}
