// Package server is what `sluice serve` runs: every listener of one
// configuration on one store. The gateway (the httplimit middleware in
// front of a reverse proxy to the upstream, or the built-in echo upstream),
// forward-auth, the Envoy rate-limit service over gRPC and HTTP, and the
// admin listener (Prometheus metrics, health and readiness and, when a
// token is set, the admin API of package admin), each only when the
// configuration asks for it. Reload swaps in a new configuration while the
// server runs, keeping the store and its counters.
package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/forwardauth"
	"github.com/sluicehq/sluice/internal/identity"
	"github.com/sluicehq/sluice/internal/loglimit"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/server/backend"
	"github.com/sluicehq/sluice/internal/topk"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// EchoUpstream is the Upstream value that selects the built-in echo handler.
const EchoUpstream = "builtin:echo"

// Options configure a Server. Limiter.Store, Limiter.Observer and
// Limiter.Overrides are set by the server. Listen, Admin, ReadHeaderTimeout, MaxHeaderBytes,
// Backend, MaxKeys, Redis and BackendOptions are fixed when the server is
// built; Reload changes the rest.
type Options struct {
	// Listen is the gateway's address. Default 127.0.0.1:8080.
	Listen string
	// Admin is the admin listener's address (/metrics, /healthz, /readyz);
	// empty disables it.
	Admin string
	// Upstream is EchoUpstream or an http or https URL.
	Upstream string
	// ShutdownTimeout bounds the graceful shutdown: how long requests and
	// calls in flight get to finish once the listeners stop accepting.
	// Default 10 s.
	ShutdownTimeout time.Duration
	// ShutdownDelay is how long, on shutdown, every listener keeps
	// serving after /readyz has turned 503 (and the service's health
	// NOT_SERVING), before they stop accepting: the time load balancers
	// need to see "not ready" and stop sending. ShutdownTimeout counts
	// from its end. Default 0: none.
	ShutdownDelay time.Duration
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
	Proxy proxy.Options
	// MaxHeaderBytes bounds a request's headers. Default 64 KiB.
	MaxHeaderBytes int
	// Backend names the store's backend in package backend's table:
	// "memory" (default) or "redis".
	Backend string
	// MaxKeys caps the in-memory store's entries (and, with Redis, the
	// local fallback's). Default 1,000,000.
	MaxKeys int
	// Clock tells the in-memory store the time (and, with Redis, the
	// local fallback). Default clock.Default(). Tests that decide at
	// exact times set a *clock.Fake.
	Clock memstore.Clock
	// Redis configures the Redis store when Backend is "redis".
	Redis redisstore.Options
	// BackendOptions are the options of another backend with a section
	// of its own (backend.Settings.Options, as its Decode left the config
	// file's store.<name>); nil for memory and redis. A reload compares
	// them as fmt.Sprint prints them: a value, not a pointer.
	BackendOptions any
	// Limiter holds the rules, tiers, headers and client-IP settings.
	Limiter httplimit.Options
	// LogLinesPerSecond bounds the rejection log. Default 10.
	LogLinesPerSecond int64
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// AdminToken is the bearer token of the admin API (package admin) on
	// the admin listener; empty turns the API off.
	AdminToken []byte
	// AdminAllowRemote lets the admin API run on an admin listener that is
	// not bound to a loopback address; without it, New and Reload refuse
	// options that would.
	AdminAllowRemote bool
	// OverridesPoll is how often a gateway on Redis looks for overrides
	// changed by other gateways. Default 500ms (with ±25% jitter).
	OverridesPoll time.Duration
	// ConfigHash identifies the configuration these options came from, in
	// logs and in the sluice_config_info metric. Optional.
	ConfigHash string
	// Service runs the rate-limit service for Envoy (package rls) on the
	// same store; nil runs none. Its listeners are fixed when the gateway
	// is built; Reload swaps its rules.
	Service *ServiceOptions
	// ForwardAuth runs the forward-auth endpoint (package forwardauth)
	// with the limiter's rules; nil runs none. Its listener is fixed when
	// the gateway is built; Reload changes its trusted proxies.
	ForwardAuth *ForwardAuthOptions
	// AdminShowKeys shows keys as they are in the admin API's top and
	// dashboard even when Redis hashes them (Redis.HashKeys); by default
	// they are shown as the digests Redis holds.
	AdminShowKeys bool
	// AccessLog writes a JSON line per decision; nil writes none. It is
	// fixed when the server is built; Reload reopens its file.
	AccessLog *AccessLogOptions
	// Tracing exports OpenTelemetry spans of the requests, their decisions
	// and their store calls over OTLP; nil exports none. It is fixed when
	// the server is built.
	Tracing *TracingOptions
	// Identity verifies the bearer tokens of the rules' and tiers'
	// jwt:CLAIM key parts, for the gateway and forward-auth alike; nil
	// for none. Its Observe is set by the gateway, which counts the
	// outcomes in sluice_identity_tokens_total. Each generation gets a
	// Verifier of its own (and so an empty cache): a reload picks up
	// rotated keys.
	Identity *identity.Options
}

// ServiceOptions configure the rate-limit service.
type ServiceOptions struct {
	// GRPC is the address of the RLS v3 gRPC listener, with health and
	// reflection; empty for none.
	GRPC string
	// HTTP is the address of POST /json and GET /healthcheck; empty for
	// none.
	HTTP string
	// Rules is the descriptor tree. Required.
	Rules *descriptor.Set
	// OnStoreError, Headers, EnvoyHeaderNames and Anchor are rls.Options'.
	OnStoreError     rls.Failure
	Headers          rls.Headers
	EnvoyHeaderNames rls.EnvoyHeaderNames
	Anchor           string
}

// ForwardAuthOptions configure the forward-auth endpoint.
type ForwardAuthOptions struct {
	// Listen is the endpoint's address. Required.
	Listen string
	// TrustedProxies are the proxies allowed to call it. Required.
	TrustedProxies []netip.Prefix
}

// Server serves a configuration and takes new ones while it runs. What
// the config file defines (the rules, tiers, headers, client addresses, the
// upstream, the admin token) forms an immutable generation, built whole and
// swapped in atomically by Reload; each request loads the generation once,
// at its start, and finishes under it. The store (and so every counter),
// the metrics registry and the listeners live across generations.
//
// A Server is safe for concurrent use.
type Server struct {
	opts   Options // as given to New, with defaults: the fixed settings
	log    *slog.Logger
	store  sluice.Store
	closer func() error
	ready  func(context.Context) error
	// storeFailsClosed: the store refuses what it cannot decide
	// (sluice.ClosedFailer), so it is not ready while it cannot.
	storeFailsClosed bool
	reg              *prometheus.Registry
	m                *metrics
	reloads          *reloadMetrics
	backend          string
	secret           []byte // keys are logged as HMAC-SHA256(secret, key) in every generation
	handler          http.Handler
	admin            http.Handler
	draining         atomic.Bool
	shutdown         atomic.Int64 // the current ShutdownTimeout, in ns
	delay            atomic.Int64 // the current ShutdownDelay, in ns
	// after waits out the shutdown delay: time.After, or a test's.
	after func(time.Duration) <-chan time.Time

	// backendStore is the open backend, asked what only some can do
	// (backend.Shared, Degradable, KeyHasher).
	backendStore backend.Opened
	ov           *overrides.Clients
	dov          *overrides.Descriptors // the service's; nil without a service section
	rlsm         *rls.Metrics           // the service's metrics; nil without a service section
	// top and dtop hold the heavy hitters of the gateway's rules and of
	// the service's descriptors, by name, across generations.
	top, dtop *topk.Set
	health    healthRecord
	access    *accessLog   // nil when off
	tracing   *tracing     // nil when off
	addrs     atomic.Value // map[string]net.Addr, once Run listens

	gen      atomic.Pointer[generation]
	reloadMu sync.Mutex      // serialises Reload
	bgCtx    context.Context // ends on Close
	stopBg   context.CancelFunc
	bg       sync.WaitGroup
}

// generation is everything a configuration derives, for every face, built
// whole by build and never changed after: the gateway's and forward-auth's
// limiter and handlers, and the rate-limit service with its descriptor
// tree. Each request and each call loads the generation once, at its
// start, and finishes under it; Reload builds the next one whole, swaps it
// in atomically, or refuses it whole.
type generation struct {
	opts     Options
	svc      *rls.Service // nil without a service section
	lim      *httplimit.Limiter
	handler  http.Handler // lim.Handler(upstream)
	upstream http.Handler
	// closeIdle closes the upstream's idle connections once a reload has
	// replaced it; connections in use finish their requests.
	closeIdle func()
	// fa is the forward-auth endpoint over lim; nil without one.
	fa http.Handler
}

// New builds the store, the first generation and the handlers. Close
// releases them.
func New(opts Options) (*Server, error) {
	opts = withDefaults(opts)
	g := &Server{opts: opts, log: opts.Logger}
	g.shutdown.Store(int64(opts.ShutdownTimeout))
	g.delay.Store(int64(opts.ShutdownDelay))
	g.after = time.After
	g.secret = make([]byte, 32)
	_, _ = rand.Read(g.secret) // crypto/rand.Read never fails

	g.reg = prometheus.NewRegistry()
	g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g.backend = backendOr(opts.Backend)
	g.m = newMetrics(g.reg, g.backend)
	buildInfo(g.reg)
	g.reg.MustRegister(newAdaptiveCollector(func() []httplimit.Rule {
		if gen := g.gen.Load(); gen != nil {
			return gen.opts.Limiter.Rules
		}
		return nil
	}))
	g.reloads = newReloadMetrics(g.reg)
	g.top, g.dtop = new(topk.Set), new(topk.Set)
	if err := g.openStore(); err != nil {
		return nil, err
	}
	if fc, ok := g.store.(sluice.ClosedFailer); ok {
		g.storeFailsClosed = fc.FailsClosed()
	}
	if opts.AccessLog != nil {
		var err error
		if g.access, err = newAccessLog(*opts.AccessLog, g.reg, func(key string) string { return hashKey(g.secret, key) }); err != nil {
			g.Close()
			return nil, err
		}
	}
	if opts.Tracing != nil {
		var err error
		if g.tracing, err = newTracing(*opts.Tracing, g.backend); err != nil {
			g.Close()
			return nil, err
		}
	}
	g.goBackground(g.tickTop)
	var err error
	g.ov, err = openOverrides(g, overrides.NewClients, "the per-client overrides", prometheus.GaugeOpts{
		Name: "sluice_overrides",
		Help: "Clients with a per-client override in force (set through the admin API).",
	})
	if err == nil && opts.Service != nil {
		if g.rlsm, err = rls.NewMetrics(g.reg); err != nil {
			err = fmt.Errorf("server: %w", err)
		} else {
			g.dov, err = openOverrides(g, overrides.NewDescriptors, "the descriptor overrides", prometheus.GaugeOpts{
				Name: "sluice_descriptor_overrides",
				Help: "Descriptors of the rate-limit service with limits of their own in force (set through the admin API).",
			})
		}
	}
	if err != nil {
		g.Close()
		return nil, err
	}
	gen, err := g.build(opts)
	if err != nil {
		g.Close()
		return nil, err
	}
	g.gen.Store(gen)
	g.reloads.applied(opts.ConfigHash, time.Now(), false)
	g.health.reloaded(opts.ConfigHash, time.Now(), nil, false)
	g.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.gen.Load().handler.ServeHTTP(w, r)
	})
	if g.tracing != nil {
		g.handler = g.tracing.handler(g.handler)
	}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg}))
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
			// A store that cannot decide: with on_error local or allow
			// this server still answers every request, and so does every
			// other server on the same Redis, so taking it out of its load
			// balancer helps no one and, fleet-wide, is an outage. It is
			// not ready when its failure policy refuses (deny), or when
			// the probe asks to be strict.
			if g.storeFailsClosed || r.URL.Query().Has("strict") {
				http.Error(w, "store not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready, degraded: "+err.Error())
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("/admin/", admin.Handler(admin.Options{
		State: func() admin.State {
			gen := g.gen.Load()
			return admin.State{Limiter: gen.lim, Service: gen.svc, Token: gen.opts.AdminToken}
		},
		Overrides:   g.ov,
		Descriptors: g.dov,
		Observed:    admin.Observed{Rules: g.top, Descriptors: g.dtop, ShowKey: g.showKey(), Health: g.adminHealth},
		Logger:      g.log,
	}))
	g.admin = mux
	return g, nil
}

// overridesSet is what the server does with a set of overrides of either
// kind.
type overridesSet interface {
	Refresh(context.Context) error
	Run(context.Context)
	Len() int
}

// openOverrides opens a set of overrides with open (NewClients or
// NewDescriptors) where the store keeps its counters, reads it, on a
// shared backend (Redis) keeps reading it for other processes' changes,
// and counts its overrides in force in the gauge. The
// set's reads are logged as reading what, once per outage (and once on
// recovery), and its entries that cannot be used at most once a second.
func openOverrides[S overridesSet](g *Server, open func(overrides.Options) (S, error), what string, gauge prometheus.GaugeOpts) (S, error) {
	reads := &outageLog{log: g.log, what: what}
	skipLog := &loglimit.Limit{Per: 1}
	o := overrides.Options{Store: g.store, Poll: g.opts.OverridesPoll, OnRefresh: reads.observe, OnError: func(err error) {
		if skipLog.Allow(time.Now()) {
			g.log.Warn("a stored override cannot be used; it is skipped", "error", err)
		}
	}}
	shared, isShared := g.backendStore.(backend.Shared)
	if isShared {
		o.Redis, o.Prefix = shared.Overrides()
	}
	set, err := open(o)
	if err != nil {
		return set, fmt.Errorf("server: %w", err)
	}
	reads.observe(set.Refresh(context.Background())) // Redis may be down: Run keeps trying
	if isShared {
		g.goBackground(set.Run)
	}
	if err := g.reg.Register(prometheus.NewGaugeFunc(gauge, func() float64 { return float64(set.Len()) })); err != nil {
		return set, fmt.Errorf("server: %w", err)
	}
	return set, nil
}

func withDefaults(opts Options) Options {
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
	return opts
}

// build makes a generation from opts on the server's store.
func (g *Server) build(opts Options) (*generation, error) {
	// The running listener's address counts: a reload cannot move it.
	if len(opts.AdminToken) > 0 {
		if err := config.CheckAdminListener(g.opts.Admin, opts.AdminAllowRemote); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	opts.Limiter.Rules = g.keepAdaptive(opts.Limiter.Rules)
	gen := &generation{opts: opts, closeIdle: func() {}}
	var err error
	if opts.Upstream != "" {
		if gen.upstream, gen.closeIdle, err = newUpstream(opts, g.log, g.m); err != nil {
			return nil, err
		}
	}
	lo := opts.Limiter
	lo.Store = g.store
	if opts.Identity != nil {
		g.m.identityOn()
		io := *opts.Identity
		io.Observe = g.m.identity
		io.Claims = claimsUsed(lo)
		v, err := identity.New(io)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		lo.Identity = v
	}
	obs := newObserver(g.m, g.backend, g.log, opts.LogLinesPerSecond)
	obs.secret = g.secret
	obs.access = g.access
	lo.Observer = obs
	var tracer engine.Tracer
	if g.tracing != nil {
		tracer = g.tracing.hook
		lo.Tracer = tracer
	}
	if lo.Tiers.From != (httplimit.KeyPart{}) {
		lo.Overrides = g.ov
	}
	if gen.lim, err = httplimit.New(lo); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	obs.top = make(map[string]*topk.Sketch)
	for _, name := range gen.lim.Rules() {
		obs.top[name] = g.top.Sketch(name)
	}
	if gen.upstream != nil {
		gen.handler = gen.lim.Handler(gen.upstream)
	}
	if fa := opts.ForwardAuth; fa != nil {
		h, err := forwardauth.New(gen.lim.Handler, forwardauth.Options{TrustedProxies: fa.TrustedProxies, OverLimitHeader: opts.Limiter.OverLimitHeader})
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		gen.fa = h
	}
	if so := opts.Service; so != nil {
		if so.Rules == nil {
			return nil, errors.New("server: the service has no descriptor rules")
		}
		gen.svc, err = rls.New(rls.Options{Store: g.store, Rules: so.Rules, Observer: &serviceObserver{m: g.rlsm, top: g.dtop, access: g.access}, OnStoreError: so.OnStoreError, Headers: so.Headers,
			EnvoyHeaderNames: so.EnvoyHeaderNames, Overrides: g.dov, Anchor: so.Anchor, Tracer: tracer})
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	return gen, nil
}

// keepAdaptive returns rules with each adaptive concurrency rule that the
// running generation has too (by name) sharing the running limiter's
// state, with the new rule's options (adaptive.Limiter.WithOptions): a
// reload keeps the limit learned, the no-load latency measured, and the
// requests in flight and queued counted. rules is not modified.
func (g *Server) keepAdaptive(rules []httplimit.Rule) []httplimit.Rule {
	prev := g.gen.Load()
	if prev == nil {
		return rules
	}
	running := map[string]*adaptive.Limiter{}
	for _, r := range prev.opts.Limiter.Rules {
		if r.Concurrency != nil && r.Concurrency.Adaptive != nil {
			running[r.Name] = r.Concurrency.Adaptive
		}
	}
	out := slices.Clone(rules)
	for i, r := range out {
		if r.Concurrency == nil || r.Concurrency.Adaptive == nil || running[r.Name] == nil {
			continue
		}
		lim, err := running[r.Name].WithOptions(r.Concurrency.Adaptive.Options())
		if err != nil {
			continue // valid options, as the new limiter holds them: never
		}
		cr := *r.Concurrency
		cr.Adaptive = lim
		out[i].Concurrency = &cr
	}
	return out
}

// claimsUsed returns the names of the claims the rules and tiers use, for
// the verifier to keep no others.
func claimsUsed(lo httplimit.Options) []string {
	var out []string
	add := func(k httplimit.KeyPart) {
		if k.Source == httplimit.SourceJWT && !slices.Contains(out, k.Name) {
			out = append(out, k.Name)
		}
	}
	add(lo.Tiers.From)
	add(lo.Tiers.Client)
	add(lo.Tiers.Anchor)
	add(lo.Priority.From)
	for _, r := range lo.Rules {
		for _, k := range r.Key {
			add(k)
		}
	}
	return out
}

// Limiter returns the current generation's limiter.
func (g *Server) Limiter() *httplimit.Limiter { return g.gen.Load().lim }

// Store returns the store, which every generation shares.
func (g *Server) Store() sluice.Store { return g.store }

// Registry returns the metrics registry, which every generation shares;
// other listeners register their metrics in it.
func (g *Server) Registry() *prometheus.Registry { return g.reg }

// Handler returns the limited gateway handler. Each request is served by
// the generation current when it starts.
func (g *Server) Handler() http.Handler { return g.handler }

// AdminHandler returns the admin handler: /metrics, /healthz, /readyz.
func (g *Server) AdminHandler() http.Handler { return g.admin }

// goBackground runs f on a goroutine until Close.
func (g *Server) goBackground(f func(ctx context.Context)) {
	if g.stopBg == nil {
		var ctx context.Context
		ctx, g.stopBg = context.WithCancel(context.Background())
		g.bgCtx = ctx
	}
	g.bg.Go(func() { f(g.bgCtx) })
}

// Close stops the server's background work and releases the store.
func (g *Server) Close() error {
	if g.stopBg != nil {
		g.stopBg()
		g.bg.Wait()
		g.stopBg = nil
	}
	if g.access != nil {
		g.access.close()
	}
	if g.tracing != nil {
		if err := g.tracing.shutdown(); err != nil {
			g.log.Warn("exporting the last spans failed", "error", err)
		}
		g.tracing = nil
	}
	if g.closer == nil {
		return nil
	}
	c := g.closer
	g.closer = nil
	return c()
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
