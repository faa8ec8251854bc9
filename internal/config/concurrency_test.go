package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
)

func TestConcurrencyRule(t *testing.T) {
	c, err := config.Parse([]byte(`upstream: builtin:echo
rules:
  - name: exports
    match: { path: /export/* }
    concurrency: 3
    lease: 30s
    action: delay
    max_delay: 2s
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Limiter.Rules[0]
	if r.Concurrency == nil || *r.Concurrency != (httplimit.ConcurrencyRule{Limit: 3, Lease: 30 * time.Second}) {
		t.Fatalf("concurrency: got %+v, want limit 3, lease 30s", r.Concurrency)
	}
	if r.Action != httplimit.Delay || r.MaxDelay != 2*time.Second {
		t.Errorf("action: got %s, max delay %v", r.Action, r.MaxDelay)
	}
}

// A rule with a rate limit and concurrency limits both.
func TestConcurrencyRuleWithRate(t *testing.T) {
	c, err := config.Parse([]byte(`upstream: builtin:echo
rules:
  - name: exports
    match: { path: /export/* }
    algorithm: token_bucket
    limit: 10
    period: 1h
    burst: 3
    concurrency: 2
    lease: 30s
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Limiter.Rules[0]
	if r.Concurrency == nil || r.Concurrency.Limit != 2 {
		t.Fatalf("concurrency: got %+v, want limit 2", r.Concurrency)
	}
	if want := (sluice.Limit{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Hour, Burst: 3}); r.Limit != want {
		t.Errorf("rate: got %+v, want %+v", r.Limit, want)
	}
}

func TestConcurrencyRuleProblems(t *testing.T) {
	for _, tc := range []struct{ rule, want string }{
		{"{name: a, concurrency: 3}", "c.yaml:2:9: rules[0].lease: missing"},
		{"{name: a, lease: 1s}", "c.yaml:2:9: rules[0].concurrency: missing"},
		{"{name: a, concurrency: 0, lease: 1s}", "rules[0].concurrency"},
		{"{name: a, concurrency: 2, lease: 48h}", "rules[0].lease"},
		{"{name: a, concurrency: 2, lease: 1s, limit: 5}", "rules[0].algorithm: missing: a concurrency rule with a rate limit"},
		{"{name: a, concurrency: 2, lease: 1s, algorithm: gcra, period: 1s}", "rules[0].limit: missing"},
		{"{name: a, concurrency: 2, lease: 1s, algorithm: gcra, limit: 0, period: 1s}", "rules[0].limit"},
		{"{name: a, concurrency: 2, lease: 1s, algorithm: gcra, limit: 1, period: 1s, tiers: {pro: {limit: 2}}}", "rules[0].tiers: a concurrency rule"},
		{"{name: a, concurrency: 2, lease: 1s, action: shadow}", "rules[0].action: rule \"a\": a concurrency rule's action is reject or delay"},
		{"{name: a, concurrency: 2, lease: 1s, action: delay}", "rules[0].max_delay"},
		{"{name: a, action: exempt, concurrency: 2}", "rules[0].concurrency: an exempt rule takes no concurrency"},
		{"{name: a, concurrency: 2, lease: 1s, algorithm: fixed_window, limit: 5, period: month}", "rules[0].period: a concurrency rule (one with concurrency and lease) takes no calendar period"},
		{"{name: a, concurrency: 2, lease: 1s, algorithm: gcra, limit: 5, period: 1s, sync: lease}", "rules[0].sync: a concurrency rule (one with concurrency and lease) takes no sync"},
		{"{name: a, concurrency: 2, lease: 1s, enforce: 5%}", "rules[0].enforce: a concurrency rule"},
	} {
		_, err := config.Parse([]byte("upstream: builtin:echo\nrules: ["+tc.rule+"]\n"), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.rule, err, tc.want)
		}
	}
}

// Forward-auth never sees a response end, so a concurrency rule could not
// hold its slot there.
func TestConcurrencyRuleNotWithForwardAuth(t *testing.T) {
	_, err := config.Parse([]byte("server:\n  forward_auth: { listen: 127.0.0.1:8083, trusted_proxies: [127.0.0.1] }\nrules:\n  - {name: a, concurrency: 2, lease: 1m}\n"), "c.yaml")
	if err == nil || !strings.Contains(err.Error(), "rules[0].concurrency: a concurrency rule holds a slot") {
		t.Fatalf("got %v, want a problem at rules[0].concurrency", err)
	}
}

// FuzzConcurrencyRule checks that every concurrency rule the parser accepts
// validates, and that no input makes it panic.
func FuzzConcurrencyRule(f *testing.F) {
	for _, s := range []string{"concurrency: 2, lease: 30s", "concurrency: 1, lease: 1ms, action: delay, max_delay: 1s", "concurrency: -1, lease: 1s", "concurrency: 2, lease: [1s]", "lease: 1s, limit: 3", "concurrency: 2, lease: 1s, algorithm: fixed_window, limit: 3, period: 1m", "concurrency: 1000001, lease: 25h, action: soft"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, fields string) {
		c, err := config.Parse([]byte("upstream: builtin:echo\nrules: [{name: a, "+fields+"}]\n"), "f.yaml")
		if err != nil {
			return
		}
		for _, r := range c.Limiter.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("accepted %q, but the rule does not validate: %v", fields, err)
			}
		}
	})
}

// A concurrency rule without a rate limit runs on Redis: it has no rate
// for the Redis store to check.
func TestConcurrencyRuleOnRedis(t *testing.T) {
	c, err := config.Parse([]byte(`upstream: builtin:echo
store: { backend: redis, redis: { url: "redis://127.0.0.1:6379/0" } }
rules:
  - { name: exports, concurrency: 3, lease: 30s }
  - { name: search, concurrency: 3, lease: 30s, algorithm: gcra, limit: 10, period: 1500ns }
`), "c.yaml")
	if err == nil || !strings.Contains(err.Error(), "rules[1].period") || strings.Contains(err.Error(), "rules[0]") {
		t.Fatalf("got %v, want a problem with rules[1].period only", err)
	}
	if c, err = config.Parse([]byte(`upstream: builtin:echo
store: { backend: redis, redis: { url: "redis://127.0.0.1:6379/0" } }
rules:
  - { name: exports, concurrency: 3, lease: 30s }
`), "c.yaml"); err != nil {
		t.Fatal(err)
	}
	if r := c.Limiter.Rules[0]; r.Concurrency == nil || r.Concurrency.Limit != 3 {
		t.Errorf("rule %+v, want a concurrency rule of 3", r)
	}
}
