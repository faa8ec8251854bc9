// The store every generation shares, and its metrics.

package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/loglimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// openStore opens the store of the backend and registers its metrics.
func (g *Server) openStore(backend string, reg prometheus.Registerer, m *metrics) error {
	switch backend {
	case "memory":
		s := memstore.New(memstore.Options{MaxKeys: g.opts.MaxKeys, Clock: g.opts.Clock})
		g.store, g.closer = s, s.Close
		g.ready = func(context.Context) error { return nil }
		registerMemstore(reg, s, "the in-memory store")
	case "redis":
		ro := g.opts.Redis
		local := memstore.New(memstore.Options{MaxKeys: g.opts.MaxKeys, Clock: g.opts.Clock})
		if ro.Fallback == nil {
			ro.Fallback = local
		}
		userHook := ro.OnFailure
		failLog := &loglimit.Limit{Per: 1} // one line a second: a dead Redis fails every decision
		onError := ro.OnError.String()
		ro.OnFailure = func(err error) {
			m.storeErrors.WithLabelValues("redis").Inc()
			if failLog.Allow(time.Now()) {
				g.log.LogAttrs(context.Background(), slog.LevelWarn, "Redis failed; deciding per on_error",
					slog.String("on_error", onError), slog.Any("error", err))
			}
			if userHook != nil {
				userHook(err)
			}
		}
		// A gateway starts during a Redis outage and decides per on_error
		// until Redis answers: refusing to start would turn the outage of
		// Redis into an outage of every API behind a restarted server.
		ro.ConnectLater = true
		s, err := redisstore.New(ro)
		if err != nil {
			local.Close()
			return fmt.Errorf("server: %w", err)
		}
		if s.Degraded() {
			g.health.degraded(time.Now(), true)
			g.log.LogAttrs(context.Background(), slog.LevelWarn, "Redis unreachable at start; deciding per on_error until it answers",
				slog.String("on_error", onError), slog.Any("error", s.Ping(context.Background())))
		}
		g.store, g.redis = s, s
		g.closer = func() error { return errors.Join(s.Close(), local.Close()) }
		g.goBackground(func(ctx context.Context) {
			watchDegraded(ctx, g.log, time.Second, s.Degraded, onError, g.health.degraded)
		})
		g.ready = func(ctx context.Context) error {
			// Degraded first: after an outage Redis may answer a ping
			// before the store has seen it back (within about a second),
			// and decisions until then still follow on_error.
			if s.Degraded() {
				return fmt.Errorf("deciding per on_error (%s): Redis is unreachable, or its return is not yet confirmed", onError)
			}
			return s.Ping(ctx)
		}
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
		registerQuota(reg, s)
	default:
		return fmt.Errorf("server: unknown store backend %q (want memory or redis)", backend)
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

// registerQuota registers the metrics of the Redis store's quota leases
// and async counts (rules with sync: lease or async).
func registerQuota(reg prometheus.Registerer, s *redisstore.Store) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_quota_leased_unused",
			Help: "Units this gateway holds in live quota leases (sync: lease) and has not spent: what other gateways' clients may be refused while they are held.",
		}, func() float64 { return float64(s.QuotaStats().LeasedUnused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_quota_local_decisions_total",
			Help: "Decisions of sync: lease and async rules made without calling Redis.",
		}, func() float64 { return float64(s.QuotaStats().Local) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_quota_redis_calls_total",
			Help: "Calls to Redis for sync: lease and async rules (leases, returns, syncs and the decisions of keys not hot), failed ones included.",
		}, func() float64 { return float64(s.QuotaStats().Calls) }),
	)
}
