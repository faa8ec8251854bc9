package rls

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
)

// rolloutConfig limits each to_number to 2 a minute, enforced on pct of
// the numbers.
func rolloutConfig(pct string) string {
	return `
domain: roll
descriptors:
  - key: to_number
    enforce: ` + pct + `
    rate_limit: {unit: minute, requests_per_unit: 2}
`
}

// A descriptor enforced on 30% of its counters rejects, over gRPC, exactly
// the numbers its rollout picks (salted with the descriptor's metric
// name, keyed by the value); the others are always OK, counted alike,
// measured as shadow_limited once over, and show no rate-limit headers.
func TestServiceEnforceOnAShareOfKeys(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Options{Rules: newSet(t, rolloutConfig("30%")), Observer: m})
	roll := &sluice.Rollout{Percent: 30}
	const n = 300
	nEnforced := 0
	for i := range n {
		num := fmt.Sprintf("+1555%07d", i)
		req := request(desc("to_number", num))
		req.Domain = "roll"
		enf := roll.Enforces("roll.to_number", num)
		first := h.call(t, req)
		_, hasHeader := headerMap(first)["RateLimit"]
		if hasHeader != enf {
			t.Fatalf("%s (enforced %v): RateLimit header present %v, want %v", num, enf, hasHeader, enf)
		}
		wantCodes(t, h.call(t, req), ok, ok)
		third := h.call(t, req)
		if enf {
			nEnforced++
			wantCodes(t, third, over, over)
		} else {
			wantCodes(t, third, ok, ok)
		}
	}
	for _, c := range []struct {
		outcome string
		want    int
	}{
		{"allowed", 2 * n},
		{"limited", nEnforced},
		{"shadow_limited", n - nEnforced},
	} {
		if got := counter(t, reg, "sluice_rls_decisions_total", "roll", "roll.to_number", c.outcome); got != float64(c.want) {
			t.Errorf("decisions{outcome=%q}: got %v, want %d", c.outcome, got, c.want)
		}
	}
	if nEnforced < 60 || nEnforced > 120 { // 90 ± 5 standard deviations (7.9)
		t.Errorf("%d of %d numbers enforced at 30%%", nEnforced, n)
	}
}

// Raising the share is a reload of the rules that keeps every counter: a
// number in shadow mode at 10% that used its quota is rejected at once
// when 50% enforces it.
func TestServiceEnforceRaisedKeepsCounters(t *testing.T) {
	h := start(t, Options{Rules: newSet(t, rolloutConfig("10%"))})
	var num string
	for i := 0; num == ""; i++ {
		k := fmt.Sprintf("+1555%07d", i)
		if !(&sluice.Rollout{Percent: 10}).Enforces("roll.to_number", k) && (&sluice.Rollout{Percent: 50}).Enforces("roll.to_number", k) {
			num = k
		}
	}
	req := request(desc("to_number", num))
	req.Domain = "roll"
	for range 3 {
		wantCodes(t, h.call(t, req), ok, ok)
	}
	h.reload(t, newSet(t, rolloutConfig("50")))
	wantCodes(t, h.call(t, req), over, over)
	if got := h.obs.last(t).Descriptors[0].Outcome; got != OutcomeLimited {
		t.Errorf("outcome at 50%%: %s, want limited", got)
	}
	h.reload(t, newSet(t, rolloutConfig("0%")))
	wantCodes(t, h.call(t, req), ok, ok)
	if got := h.obs.last(t).Descriptors[0].Outcome; got != OutcomeShadowLimited {
		t.Errorf("outcome at 0%%: %s, want shadow_limited", got)
	}
}
