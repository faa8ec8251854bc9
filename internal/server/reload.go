package server

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/server/backend"
)

// reloadMetrics describe the configuration the gateway runs and its
// reloads.
type reloadMetrics struct {
	reloads  *prometheus.CounterVec // result
	failures prometheus.Counter     // reloads{result="failure"}
	success  prometheus.Counter     // reloads{result="success"}
	last     prometheus.Gauge
	ok       prometheus.Gauge     // whether the last reload (or the start) applied
	info     *prometheus.GaugeVec // hash

	mu   sync.Mutex
	hash string // the label set on info
}

func newReloadMetrics(reg prometheus.Registerer) *reloadMetrics {
	m := &reloadMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Configuration reloads (SIGHUP or a change of the file), by result: success, or failure (the running configuration stayed).",
		}, []string{"result"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_success_timestamp_seconds",
			Help: "When the running configuration was applied (at start or by the last successful reload), in Unix seconds.",
		}),
		ok: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_successful",
			Help: "1 if the last reload applied (or none was tried since the start), 0 if it failed and the configuration before it still runs.",
		}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_config_info",
			Help: "1, labelled with the SHA-256 (first 16 hex digits) of the running configuration file.",
		}, []string{"hash"}),
	}
	m.failures = m.reloads.WithLabelValues("failure")
	m.success = m.reloads.WithLabelValues("success")
	reg.MustRegister(m.reloads, m.last, m.ok, m.info)
	return m
}

// failed records a reload that did not apply.
func (m *reloadMetrics) failed() {
	m.failures.Inc()
	m.ok.Set(0)
}

// applied records a configuration put in service at t, by a reload or at
// the start.
func (m *reloadMetrics) applied(hash string, t time.Time, reload bool) {
	if reload {
		m.success.Inc()
	}
	m.last.Set(float64(t.UnixNano()) / 1e9)
	m.ok.Set(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if hash != m.hash && m.hash != "" {
		m.info.DeleteLabelValues(m.hash)
	}
	m.hash = hash
	if hash != "" {
		m.info.WithLabelValues(hash).Set(1)
	}
}

// Reload builds a new generation from what load returns and swaps it in:
// requests that have started finish under the old one, later ones get the
// new one. A load error or a configuration that cannot be built leaves
// the running generation in place, is logged at ERROR and counted in
// sluice_config_reloads_total{result="failure"}, and is returned.
// Settings that only a restart can change (listener addresses, the store,
// server timeouts and sizes) are kept as they are and logged at WARN; all
// the rest applies. Reload is safe for concurrent use; reloads run one at
// a time.
func (g *Server) Reload(load func() (Options, error)) error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	// SIGHUP is also logrotate's way to say the access log was moved.
	if g.access != nil {
		if err := g.access.reopen(); err != nil {
			g.log.Error("reopening the access log failed", "error", err)
		}
	}
	opts, err := load()
	if err == nil {
		opts = withDefaults(opts)
		opts.Logger = g.opts.Logger
		restart := restartOnly(g.opts, opts)
		opts = g.keepListeners(opts)
		var gen *generation
		if gen, err = g.build(opts); err == nil {
			for _, f := range restart {
				g.log.Warn("configuration reload: this setting needs a restart to change; keeping the running value",
					"setting", f.name, "running", f.running, "file", f.file)
			}
			prev := g.gen.Swap(gen)
			g.shutdown.Store(int64(opts.ShutdownTimeout))
			g.delay.Store(int64(opts.ShutdownDelay))
			// Requests in flight keep their connections; idle ones would
			// otherwise linger until their timeout.
			prev.closeIdle()
			g.reloads.applied(opts.ConfigHash, time.Now(), true)
			g.health.reloaded(opts.ConfigHash, time.Now(), nil, true)
			// The heavy hitters of rules that are gone go with them.
			names := gen.lim.Rules()
			g.top.Retain(func(n string) bool { return slices.Contains(names, n) })
			g.log.Info("configuration reloaded", "hash", opts.ConfigHash, "rules", len(opts.Limiter.Rules))
			return nil
		}
	}
	g.reloads.failed()
	g.health.reloaded("", time.Now(), err, true)
	g.log.Error("configuration reload failed; the running configuration stays", "error", err)
	return err
}

// setting is one restart-only setting whose value changed.
type setting struct{ name, running, file string }

// restartOnly lists the settings that differ between the running options
// and new ones but that only a restart can change.
func restartOnly(run, file Options) []setting {
	var out []setting
	add := func(name string, a, b any) {
		as, bs := fmt.Sprint(a), fmt.Sprint(b)
		if as != bs {
			out = append(out, setting{name, as, bs})
		}
	}
	add("server.listen", run.Listen, file.Listen)
	add("server.admin", run.Admin, file.Admin)
	add("server.read_header_timeout", run.ReadHeaderTimeout, file.ReadHeaderTimeout)
	add("server.read_timeout", run.ReadTimeout, file.ReadTimeout)
	add("server.idle_timeout", run.IdleTimeout, file.IdleTimeout)
	add("server.max_header_bytes", run.MaxHeaderBytes, file.MaxHeaderBytes)
	add("store.backend", backendOr(run.Backend), backendOr(file.Backend))
	add("store.max_keys", run.MaxKeys, file.MaxKeys)
	add("store.on_error", run.Redis.OnError, file.Redis.OnError)
	add("upstream (the gateway listener, on or off)", run.Upstream != "", file.Upstream != "")
	add("server.forward_auth", faListen(run.ForwardAuth), faListen(file.ForwardAuth))
	rs, fs := run.Service, file.Service
	add("service", rs != nil, fs != nil)
	if rs != nil && fs != nil {
		add("service.grpc", rs.GRPC, fs.GRPC)
		add("service.http", rs.HTTP, fs.HTTP)
		add("service.on_store_error", rs.OnStoreError, fs.OnStoreError)
		add("service.headers", rs.Headers, fs.Headers)
		add("service.envoy_headers", rs.EnvoyHeaderNames, fs.EnvoyHeaderNames)
		add("service.anchor", rs.Anchor, fs.Anchor)
	}
	r, f := run.Redis, file.Redis
	if r.URL != f.URL || !slices.Equal(r.Addrs, f.Addrs) || r.MasterSet != f.MasterSet || r.Username != f.Username ||
		r.Password != f.Password || r.DB != f.DB || r.Timeout != f.Timeout || r.Prefix != f.Prefix ||
		r.HashKeys != f.HashKeys || !bytes.Equal(r.HashSecret, f.HashSecret) {
		// Never log the values: they may hold a password.
		out = append(out, setting{"store.redis", "(running)", "(changed)"})
	}
	if fmt.Sprint(run.BackendOptions) != fmt.Sprint(file.BackendOptions) {
		// Another backend's section, never logged either.
		out = append(out, setting{"store." + backendOr(run.Backend), "(running)", "(changed)"})
	}
	add("log.access", accessString(run.AccessLog), accessString(file.AccessLog))
	add("admin.show_keys", run.AdminShowKeys, file.AdminShowKeys)
	add("tracing", tracingString(run.Tracing), tracingString(file.Tracing))
	add("store.redis.quota.lease_rate", r.LeaseRate, f.LeaseRate)
	add("store.redis.quota.lease_fraction", r.LeaseFraction, f.LeaseFraction)
	add("store.redis.quota.lease_ttl", r.LeaseTTL, f.LeaseTTL)
	return out
}

func accessString(a *AccessLogOptions) string {
	if a == nil {
		return "off"
	}
	return fmt.Sprintf("%+v", *a)
}

func tracingString(t *TracingOptions) string {
	if t == nil {
		return "off"
	}
	return fmt.Sprintf("%+v", *t)
}

func faListen(fa *ForwardAuthOptions) string {
	if fa == nil {
		return "off"
	}
	return fa.Listen
}

// keepListeners returns file's options with the parts that only a restart
// can change kept as they run: whether the gateway, the forward-auth
// endpoint and the service run, and the service's listeners and answers.
// The gateway's upstream, the endpoint's trusted proxies and the service's
// rules change with a reload.
func (g *Server) keepListeners(file Options) Options {
	run := g.gen.Load().opts
	if (run.Upstream == "") != (file.Upstream == "") {
		file.Upstream = run.Upstream
		file.Proxy = run.Proxy
	}
	switch {
	case run.ForwardAuth == nil:
		file.ForwardAuth = nil
	case file.ForwardAuth == nil:
		file.ForwardAuth = run.ForwardAuth
	default:
		fa := *file.ForwardAuth
		fa.Listen = run.ForwardAuth.Listen
		file.ForwardAuth = &fa
	}
	switch {
	case run.Service == nil:
		file.Service = nil
	case file.Service == nil:
		file.Service = run.Service
	default:
		svc := *run.Service
		svc.Rules = file.Service.Rules
		file.Service = &svc
	}
	return file
}

// backendOr returns b, or the default backend's name for "".
func backendOr(b string) string {
	if b == "" {
		return backend.Default
	}
	return b
}
