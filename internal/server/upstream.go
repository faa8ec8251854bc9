package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/sluicehq/sluice/internal/proxy"
)

// newUpstream returns the handler admitted requests go to: the echo
// upstream, or a reverse proxy with opts.Proxy, counting its failures in m.
// It also returns a function that closes the proxy's idle connections, for
// when a reload replaces it.
func newUpstream(opts Options, log *slog.Logger, m *metrics) (http.Handler, func(), error) {
	if opts.Upstream == EchoUpstream {
		return proxy.Echo(), func() {}, nil
	}
	u, err := url.Parse(opts.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("server: upstream %q must be %s or an http(s) URL", opts.Upstream, EchoUpstream)
	}
	po := opts.Proxy
	if po.ClientIP == nil {
		po.ClientIP = opts.Limiter.ClientIP
	}
	if po.Logger == nil {
		po.Logger = log
	}
	po.BodyTimeout = opts.ReadTimeout
	po.OnFailure = func(kind string) { m.upstreamErrors.WithLabelValues(kind).Inc() }
	po.OnLogDropped = m.logDropped.Inc
	p := proxy.New(u, po)
	return oneValue(p), p.CloseIdleConnections, nil
}

// legacyFields are the rate-limit fields that hold one number each.
var legacyFields = [...]string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}

// oneValue wraps an upstream so that a legacy rate-limit field that both
// Sluice and the upstream set keeps only Sluice's value, which comes first:
// two numbers in a field meant to hold one would leave clients guessing.
// The IETF RateLimit and RateLimit-Policy fields are lists, and keep both
// Sluice's and the upstream's policies.
func oneValue(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&singleValued{ResponseWriter: w}, r)
	})
}

// singleValued trims the legacy fields to their first value before the
// header is written. Unwrap lets http.ResponseController reach the
// connection (flushing, upgrades).
type singleValued struct {
	http.ResponseWriter
	trimmed bool
}

func (s *singleValued) WriteHeader(code int) {
	s.trim()
	s.ResponseWriter.WriteHeader(code)
}

func (s *singleValued) Write(b []byte) (int, error) {
	s.trim()
	return s.ResponseWriter.Write(b)
}

func (s *singleValued) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *singleValued) trim() {
	if s.trimmed {
		return
	}
	s.trimmed = true
	h := s.ResponseWriter.Header()
	for _, k := range legacyFields {
		if v := h[k]; len(v) > 1 {
			h[k] = v[:1]
		}
	}
}
