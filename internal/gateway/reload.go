package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// reloadMetrics describe the configuration the gateway runs and its
// reloads.
type reloadMetrics struct {
	reloads  *prometheus.CounterVec // result
	failures prometheus.Counter     // reloads{result="failure"}
	success  prometheus.Counter     // reloads{result="success"}
	last     prometheus.Gauge
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
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_config_info",
			Help: "1, labelled with the SHA-256 (first 16 hex digits) of the running configuration file.",
		}, []string{"hash"}),
	}
	m.failures = m.reloads.WithLabelValues("failure")
	m.success = m.reloads.WithLabelValues("success")
	reg.MustRegister(m.reloads, m.last, m.info)
	return m
}

// applied records a configuration put in service at t, by a reload or at
// the start.
func (m *reloadMetrics) applied(hash string, t time.Time, reload bool) {
	if reload {
		m.success.Inc()
	}
	m.last.Set(float64(t.UnixNano()) / 1e9)
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

// watchDegraded logs each change of degraded() (checked every second),
// until ctx is done: WARN when decisions start following on_error, INFO
// when the store answers again.
func watchDegraded(ctx context.Context, log *slog.Logger, every time.Duration, degraded func() bool, onError string) {
	was := degraded()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := degraded()
		switch {
		case now == was:
		case now:
			log.LogAttrs(ctx, slog.LevelWarn, "Redis unavailable; deciding per on_error until it recovers", slog.String("on_error", onError))
		default:
			log.LogAttrs(ctx, slog.LevelInfo, "Redis recovered; decisions use Redis again")
		}
		was = now
	}
}
