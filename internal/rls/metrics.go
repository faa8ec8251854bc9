package rls

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is an Observer that counts decisions in Prometheus metrics. No
// label carries a value from a request: descriptors are labelled by their
// rule's configured name and domains only when the rule tree knows them.
type Metrics struct {
	decisions *prometheus.CounterVec // domain, descriptor, outcome
	requests  *prometheus.CounterVec // domain, code
	degraded  *prometheus.CounterVec // domain, descriptor
	lists     *prometheus.CounterVec // domain, list, action
	latency   prometheus.Histogram

	counters sync.Map // decisionLabels -> prometheus.Counter
}

type decisionLabels struct {
	domain, name string
	outcome      Outcome
}

// NewMetrics registers the service's metrics with reg:
// sluice_rls_decisions_total{domain,descriptor,outcome},
// sluice_rls_requests_total{domain,code},
// sluice_rls_degraded_decisions_total{domain,descriptor},
// sluice_rls_list_matches_total{domain,list,action} (as the gateway's
// sluice_list_matches_total: action deny once per refused request, allow
// once per descriptor an allow list exempted) and
// sluice_rls_request_duration_seconds.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rls_decisions_total",
			Help: "Descriptor decisions of the rate-limit service by domain, rule and outcome (allowed, limited, shadow_limited, skipped, unlimited, no_rule, replaced, error, denied, allow_listed).",
		}, []string{"domain", "descriptor", "outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rls_requests_total",
			Help: "Requests to the rate-limit service by domain and answer (ok, over_limit, denied, invalid, unavailable).",
		}, []string{"domain", "code"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rls_degraded_decisions_total",
			Help: "Descriptor decisions made by the store's failure policy (on_error) instead of the store, by domain and rule.",
		}, []string{"domain", "descriptor"}),
		lists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rls_list_matches_total",
			Help: "Requests of the rate-limit service refused (OVER_LIMIT) for a deny list (action deny), and descriptors not limited for an allow list (action allow: one per descriptor), by domain and list.",
		}, []string{"domain", "list", "action"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_rls_request_duration_seconds",
			Help:    "Time spent deciding a rate-limit service request, in seconds.",
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25},
		}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.requests, m.degraded, m.lists, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

var _ Observer = (*Metrics)(nil)

// Observe implements Observer.
func (m *Metrics) Observe(_ context.Context, e *Event) {
	m.requests.WithLabelValues(e.Domain, string(e.Code)).Inc()
	m.latency.Observe(e.Latency.Seconds())
	if e.DeniedBy != "" {
		m.lists.WithLabelValues(e.Domain, e.DeniedBy, "deny").Inc()
	}
	for i := range e.Descriptors {
		d := &e.Descriptors[i]
		m.counter(e.Domain, d.Name, d.Outcome).Inc()
		if d.AllowList != "" {
			m.lists.WithLabelValues(e.Domain, d.AllowList, "allow").Inc()
		}
		if d.Decision.Degraded {
			m.degraded.WithLabelValues(e.Domain, d.Name).Inc()
		}
	}
}

func (m *Metrics) counter(domain, name string, o Outcome) prometheus.Counter {
	k := decisionLabels{domain, name, o}
	if c, ok := m.counters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := m.decisions.WithLabelValues(domain, name, string(o))
	m.counters.Store(k, c)
	return c
}
