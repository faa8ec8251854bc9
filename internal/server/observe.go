package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/identity"
	"github.com/sluicehq/sluice/internal/loglimit"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/topk"
)

// metrics are the gateway's Prometheus metrics. No label ever carries a
// client's key, address or anything else a client chooses.
type metrics struct {
	decisions   *prometheus.CounterVec // rule, outcome
	requests    *prometheus.CounterVec // outcome
	latency     prometheus.Histogram   // seconds spent deciding
	delay       prometheus.Histogram   // seconds delayed requests waited
	storeErrors *prometheus.CounterVec // backend
	degraded    *prometheus.CounterVec // rule
	logDropped  prometheus.Counter
	// upstreamErrors counts the proxy's failures by kind (proxy.FailureKinds).
	upstreamErrors *prometheus.CounterVec
	// listMatches counts deny-list refusals and allow-listed rule skips,
	// by list and action (deny, allow).
	listMatches *prometheus.CounterVec
	// The slots of concurrency rules, by rule: acquisitions by outcome,
	// leases held by this instance, leases lost (expired before their
	// release), and the time delay rules waited for a slot.
	leaseAcquisitions *prometheus.CounterVec
	leasesHeld        *prometheus.GaugeVec
	leasesLost        *prometheus.CounterVec
	leaseWait         *prometheus.HistogramVec
	// The adaptive concurrency rules' decisions by rule and class:
	// admitted or shed (and why), and the time spent in the queue. Their
	// limits, requests in flight and latencies are read from the
	// limiters at each scrape (adaptiveCollector).
	adaptiveRequests *prometheus.CounterVec
	adaptiveShed     *prometheus.CounterVec
	adaptiveQueue    *prometheus.HistogramVec
	// tokens counts the bearer tokens checked, by result; its series
	// appear (all at once, at zero) with the first identity section.
	tokens       *prometheus.CounterVec
	tokensOnce   sync.Once
	tokenResults []prometheus.Counter // by identity.Reason
}

// identity counts one request's token check (identity.Options.Observe).
func (m *metrics) identity(r identity.Reason) {
	if int(r) < len(m.tokenResults) {
		m.tokenResults[r].Inc()
	}
}

// identityOn creates the token counters' series, once.
func (m *metrics) identityOn() {
	m.tokensOnce.Do(func() {
		for _, r := range identity.Reasons() {
			m.tokenResults = append(m.tokenResults, m.tokens.WithLabelValues(r.String()))
		}
	})
}

// buildInfo registers sluice_build_info: 1, labelled with the version,
// the VCS revision and the Go version the binary was built with, as the
// build information a plain go build embeds tells them ("(devel)" and
// "unknown" where it does not).
func buildInfo(reg prometheus.Registerer) {
	version, revision, goVersion := "(devel)", "unknown", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_build_info",
		Help: "1, labelled with the version, the VCS revision and the Go version of the running binary.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(version, revision, goVersion).Set(1)
	reg.MustRegister(g)
}

func newMetrics(reg prometheus.Registerer, backend string) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rule decisions by rule and outcome (allowed, limited, delayed, shadow_limited, soft_limited, exempt, error, skipped, canceled, allow_listed, not_counted).",
		}, []string{"rule", "outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total",
			Help: "Requests that matched at least one rule, by outcome (allowed, limited, delayed, exempt, error, canceled, denied, allow_listed).",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_decision_duration_seconds",
			Help:    "Time spent deciding a request, not counting any delay, in seconds.",
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25},
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_delay_seconds",
			Help:    "Time delayed requests waited for their turn, in seconds; requests whose client left while waiting are not counted.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Failed store operations, by backend.",
		}, []string{"backend"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_degraded_decisions_total",
			Help: "Decisions made by the store's failure policy (on_error) instead of the store, by rule.",
		}, []string{"rule"}),
		logDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_log_suppressed_total",
			Help: "Log lines (rejections, store and upstream failures) dropped by the log rate limits.",
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_errors_total",
			Help: "Requests the upstream proxy could not complete, by kind: timeout (504), refused, reset, unreachable, other (502), client_aborted (the client went away), client_timeout (its body did not arrive within the read timeout: 408).",
		}, []string{"kind"}),
		listMatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_list_matches_total",
			Help: "Requests refused with 403 for a deny list (action deny), and rules skipped for an allow list (action allow: one per rule skipped), by list.",
		}, []string{"list", "action"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_identity_tokens_total",
			Help: "Requests whose bearer token a rule or tier asked for (identity.jwt), by result: valid, or why it did not verify and the request was treated as anonymous (missing, malformed, bad_signature, expired, not_yet_valid, wrong_issuer, wrong_audience, unknown_key, alg_not_allowed, no_expiry).",
		}, []string{"result"}),
	}
	m.leaseAcquisitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_lease_acquisitions_total",
		Help: "Requests asking concurrency rules for a slot, by rule and outcome (granted, refused, error, fallback: granted by the store's on_error path, not_asked: the rule's rate refused the request first).",
	}, []string{"rule", "outcome"})
	m.leasesHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_leases_held",
		Help: "Slots of concurrency rules held by requests in flight through this instance, by rule.",
	}, []string{"rule"})
	m.leasesLost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_leases_lost_total",
		Help: "Slots found expired (or reset) when their request ended: the request outlived the rule's lease, and its slot may have gone to another meanwhile; by rule.",
	}, []string{"rule"})
	m.leaseWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_lease_wait_seconds",
		Help:    "Time requests of delay concurrency rules waited for a slot, in seconds, whether they got one or not; by rule.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"rule"})
	m.adaptiveRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_adaptive_requests_total",
		Help: "Requests that adaptive concurrency rules decided, by rule, class (critical, default, sheddable) and outcome (admitted, shed).",
	}, []string{"rule", "class", "outcome"})
	m.adaptiveShed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_adaptive_shed_total",
		Help: "Requests shed by adaptive concurrency rules (answered 503), by rule, class and reason: limit (its class's share was full and it could not wait), queue_full, timeout (it waited max_delay), fleet (its class's share of the fleet limit was full).",
	}, []string{"rule", "class", "reason"})
	m.adaptiveQueue = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_adaptive_queue_seconds",
		Help:    "Time requests of adaptive concurrency rules waited in the queue, admitted or shed (zero when a slot was free at once), in seconds; by rule and class.",
		Buckets: []float64{0, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"rule", "class"})
	reg.MustRegister(m.tokens, m.decisions, m.requests, m.latency, m.delay, m.storeErrors, m.degraded, m.logDropped, m.upstreamErrors, m.listMatches,
		m.leaseAcquisitions, m.leasesHeld, m.leasesLost, m.leaseWait, m.adaptiveRequests, m.adaptiveShed, m.adaptiveQueue)
	m.storeErrors.WithLabelValues(backend)
	for _, k := range proxy.FailureKinds {
		m.upstreamErrors.WithLabelValues(k)
	}
	return m
}

// observer turns decisions into metrics and rate-limited logs.
type observer struct {
	m       *metrics
	backend string
	log     *slog.Logger
	logs    loglimit.Limit
	secret  []byte // keys are logged as HMAC-SHA256(secret, key)
	// counters caches the CounterVec children per rule and outcome.
	counters sync.Map // ruleOutcome -> prometheus.Counter
	// top holds the heavy hitters of the generation's rules, by name;
	// nil records none.
	top map[string]*topk.Sketch
	// access is the access log; nil when off.
	access *accessLog
	// byOutcome caches sluice_requests_total's children per outcome.
	byOutcome [outcomes]atomic.Pointer[prometheus.Counter]
}

// outcomes bounds the httplimit.Outcome values the observer caches.
const outcomes = 16

// requests returns sluice_requests_total's child for out.
func (o *observer) requests(out httplimit.Outcome) prometheus.Counter {
	if int(out) >= outcomes {
		return o.m.requests.WithLabelValues(out.String())
	}
	if c := o.byOutcome[out].Load(); c != nil {
		return *c
	}
	c := o.m.requests.WithLabelValues(out.String())
	o.byOutcome[out].Store(&c)
	return c
}

type ruleOutcome struct {
	rule    string
	outcome httplimit.Outcome
}

func newObserver(m *metrics, backend string, log *slog.Logger, linesPerSecond int64) *observer {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // crypto/rand.Read never fails
	return &observer{m: m, backend: backend, log: log, logs: loglimit.Limit{Per: linesPerSecond}, secret: secret}
}

var _ httplimit.Observer = (*observer)(nil)

// Observe implements httplimit.Observer.
func (o *observer) Observe(r *http.Request, e *httplimit.Event) {
	o.requests(e.Outcome).Inc()
	o.m.latency.Observe(e.Latency.Seconds())
	if e.Delay > 0 && e.Outcome != httplimit.OutcomeCanceled && e.Outcome != httplimit.OutcomeShed {
		o.m.delay.Observe(e.Delay.Seconds())
	}
	if e.Outcome == httplimit.OutcomeDenied {
		o.m.listMatches.WithLabelValues(e.List, "deny").Inc()
	}
	for i := range e.Rules {
		re := &e.Rules[i]
		o.counter(re.Rule, re.Outcome).Inc()
		if k := o.top[re.Rule]; k != nil {
			if c, ok := topOutcome(re.Outcome); ok {
				k.Record(re.Key, c)
			}
		}
		if re.Outcome == httplimit.OutcomeAllowListed {
			o.m.listMatches.WithLabelValues(re.List, "allow").Inc()
		}
		// A store that failed closed counted its own failure (Redis's
		// OnFailure hook), if it called Redis at all.
		if re.Err != nil && !errors.Is(re.Err, httplimit.ErrFailedClosed) {
			o.m.storeErrors.WithLabelValues(o.backend).Inc()
		}
		if re.Decision.Degraded {
			o.m.degraded.WithLabelValues(re.Rule).Inc()
		}
		switch re.Outcome {
		case httplimit.OutcomeLimited, httplimit.OutcomeShadowLimited:
			o.logRejection(r.Context(), re)
		case httplimit.OutcomeError:
			switch {
			case !o.logs.Allow(time.Now()):
				o.m.logDropped.Inc()
			case errors.Is(re.Err, httplimit.ErrFailedClosed) && e.Outcome == httplimit.OutcomeError:
				o.log.LogAttrs(r.Context(), slog.LevelWarn, "rate limit store could not decide; request refused with 503 (on_error deny)",
					slog.String("rule", re.Rule))
			case errors.Is(re.Err, httplimit.ErrFailedClosed):
				o.log.LogAttrs(r.Context(), slog.LevelWarn, "rate limit store could not decide; rule not applied (on_error deny)",
					slog.String("rule", re.Rule), slog.String("action", re.Action.String()))
			default:
				o.log.LogAttrs(r.Context(), slog.LevelError, "rate limit store failed; request let through",
					slog.String("rule", re.Rule), slog.Any("error", re.Err))
			}
		}
	}
	if o.access != nil {
		o.access.gateway(r, e)
	}
}

var _ httplimit.LeaseObserver = (*observer)(nil)

// ObserveLease implements httplimit.LeaseObserver.
func (o *observer) ObserveLease(e httplimit.LeaseEvent) {
	if e.Adaptive {
		o.observeAdaptive(e)
		return
	}
	switch e.Outcome {
	case httplimit.LeaseReleased, httplimit.LeaseLost:
		o.m.leasesHeld.WithLabelValues(e.Rule).Dec()
		if e.Outcome == httplimit.LeaseLost {
			o.m.leasesLost.WithLabelValues(e.Rule).Inc()
		}
		return
	case httplimit.LeaseGranted, httplimit.LeaseFallback:
		o.m.leasesHeld.WithLabelValues(e.Rule).Inc()
	}
	o.m.leaseAcquisitions.WithLabelValues(e.Rule, e.Outcome.String()).Inc()
	if e.Waited > 0 {
		o.m.leaseWait.WithLabelValues(e.Rule).Observe(e.Waited.Seconds())
	}
}

// observeAdaptive counts an adaptive concurrency rule's decision, and
// logs a shed request within the log rate limit.
func (o *observer) observeAdaptive(e httplimit.LeaseEvent) {
	class := e.Class.String()
	o.m.adaptiveQueue.WithLabelValues(e.Rule, class).Observe(e.Waited.Seconds())
	if e.Outcome != httplimit.LeaseShed {
		o.m.adaptiveRequests.WithLabelValues(e.Rule, class, "admitted").Inc()
		return
	}
	o.m.adaptiveRequests.WithLabelValues(e.Rule, class, "shed").Inc()
	o.m.adaptiveShed.WithLabelValues(e.Rule, class, e.Reason.String()).Inc()
	if !o.logs.Allow(time.Now()) {
		o.m.logDropped.Inc()
		return
	}
	o.log.LogAttrs(context.Background(), slog.LevelWarn, "request shed to protect the upstream (503)",
		slog.String("rule", e.Rule), slog.String("class", class), slog.String("reason", e.Reason.String()), slog.Duration("waited", e.Waited))
}

// adaptiveCollector reports the state of the current generation's
// adaptive concurrency rules at each scrape: their limits, requests in
// flight and queued, latencies and probes.
type adaptiveCollector struct {
	rules                                            func() []httplimit.Rule
	limit, inFlight, queued, noLoad, latency, probes *prometheus.Desc
}

func newAdaptiveCollector(rules func() []httplimit.Rule) *adaptiveCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"rule"}, nil)
	}
	return &adaptiveCollector{
		rules:    rules,
		limit:    d("sluice_adaptive_limit", "The limit an adaptive concurrency rule admits requests under now (the probe's, lower, while a probe measures the no-load latency; critical requests keep the limit), by rule."),
		inFlight: d("sluice_adaptive_in_flight", "Requests holding a slot of an adaptive concurrency rule in this gateway, by rule."),
		queued:   d("sluice_adaptive_queued", "Requests waiting in an adaptive concurrency rule's queue, by rule."),
		noLoad:   d("sluice_adaptive_no_load_latency_seconds", "The upstream's latency without load, as an adaptive concurrency rule last measured it, in seconds; by rule."),
		latency:  d("sluice_adaptive_latency_seconds", "The upstream's latency over an adaptive concurrency rule's last window, in seconds; by rule."),
		probes:   d("sluice_adaptive_probes_total", "Probes of the no-load latency an adaptive concurrency rule ran, by rule."),
	}
}

// Describe implements prometheus.Collector.
func (c *adaptiveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.limit, c.inFlight, c.queued, c.noLoad, c.latency, c.probes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *adaptiveCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.rules() {
		if r.Concurrency == nil || r.Concurrency.Adaptive == nil {
			continue
		}
		st := r.Concurrency.Adaptive.Stats()
		for _, m := range []struct {
			d *prometheus.Desc
			t prometheus.ValueType
			v float64
		}{
			{c.limit, prometheus.GaugeValue, float64(st.Limit)},
			{c.inFlight, prometheus.GaugeValue, float64(st.InFlight)},
			{c.queued, prometheus.GaugeValue, float64(st.Queued)},
			{c.noLoad, prometheus.GaugeValue, st.NoLoadLatency.Seconds()},
			{c.latency, prometheus.GaugeValue, st.Latency.Seconds()},
			{c.probes, prometheus.CounterValue, float64(st.Probes)},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, r.Name)
		}
	}
}

func (o *observer) counter(rule string, out httplimit.Outcome) prometheus.Counter {
	k := ruleOutcome{rule, out}
	if c, ok := o.counters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := o.m.decisions.WithLabelValues(rule, out.String())
	o.counters.Store(k, c)
	return c
}

func (o *observer) logRejection(ctx context.Context, re *httplimit.RuleEvent) {
	if !o.logs.Allow(time.Now()) {
		o.m.logDropped.Inc()
		return
	}
	msg := "request rejected by rate limit"
	if re.Outcome == httplimit.OutcomeShadowLimited {
		msg = "request over a shadow rate limit (not rejected)"
	}
	o.log.LogAttrs(ctx, slog.LevelWarn, msg,
		slog.String("rule", re.Rule),
		slog.String("key", o.hashKey(re.Key)),
		slog.String("tier", re.Tier),
		slog.Int64("limit", re.Decision.Limit),
		slog.Duration("retry_after", re.Decision.RetryAfter),
		slog.Bool("degraded", re.Decision.Degraded))
}

// hashKey returns a non-reversible form of a key: equal keys give equal
// strings within one process, so an operator can tell one noisy client from
// many, but no one can recover an address from the log, not even by trying
// every IPv4 address.
func (o *observer) hashKey(key string) string { return hashKey(o.secret, key) }

// hashKey returns HMAC-SHA256(secret, key), its first 12 bytes in
// base64url: see observer.hashKey.
func hashKey(secret []byte, key string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(key))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:12])
}

// outageLog logs the outcomes of a read that is repeated while it fails,
// such as the polls of the overrides, once per change rather than once per
// poll: the first failure of an outage at WARN, the failures after it at
// DEBUG, and the first success after them at INFO. It is safe for
// concurrent use.
type outageLog struct {
	log  *slog.Logger
	what string // what is read, such as "the per-client overrides"

	mu   sync.Mutex
	down bool // the last read failed
}

// observe records the outcome of one read: nil for a success.
func (o *outageLog) observe(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case err != nil && !o.down:
		o.down = true
		o.log.Warn("reading "+o.what+" failed; the last ones read stay in force", "error", err)
	case err != nil:
		o.log.Debug("reading "+o.what+" failed again", "error", err)
	case o.down:
		o.down = false
		o.log.Info("reading " + o.what + " works again")
	}
}
