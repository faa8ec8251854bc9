package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

// With on_error deny and Redis down, the gateway answers 503 and counts the
// requests as errors, not as limited: no client went over a limit.
func TestGatewayOnErrorDenyAnswers503(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	g := start(t, server.Options{Backend: "redis", Redis: redisstore.Options{URL: srv.URL(), OnError: redisstore.Deny}, Limiter: httplimit.Options{Rules: []httplimit.Rule{
		{Name: "per-ip", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 100, Period: time.Hour}},
	}}})
	for range 3 {
		r := get(t, "GET", g.url+"/", nil)
		if r.StatusCode != 503 || r.Header.Get("Retry-After") == "" || r.Header.Get("RateLimit") != "" {
			t.Errorf("with Redis down: status %d, Retry-After %q, RateLimit %q; want 503 with Retry-After and no RateLimit",
				r.StatusCode, r.Header.Get("Retry-After"), r.Header.Get("RateLimit"))
		}
	}
	for series, want := range map[string]string{
		`sluice_requests_total{outcome="error"}`:                "3",
		`sluice_decisions_total{outcome="error",rule="per-ip"}`: "3",
		`sluice_requests_total{outcome="limited"}`:              "",
		`sluice_degraded_decisions_total{rule="per-ip"}`:        "3",
	} {
		if got := metric(t, g.admin, series); got != want {
			t.Errorf("%s: got %q, want %q", series, got, want)
		}
	}
	if logs := g.logs.String(); !strings.Contains(logs, "request refused with 503") {
		t.Errorf("log: want the refusals, got %s", logs)
	}
	// It refuses every request meanwhile: not ready.
	if r := get(t, "GET", g.admin+"/readyz", nil); r.StatusCode != 503 {
		t.Errorf("readyz with Redis down under on_error deny: status %d, want 503", r.StatusCode)
	}
}
