package config_test

import (
	"strings"
	"testing"
	"time"

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

func TestConcurrencyRuleProblems(t *testing.T) {
	for _, tc := range []struct{ rule, want string }{
		{"{name: a, concurrency: 3}", "c.yaml:2:9: rules[0].lease: missing"},
		{"{name: a, lease: 1s}", "c.yaml:2:9: rules[0].concurrency: missing"},
		{"{name: a, concurrency: 0, lease: 1s}", "rules[0].concurrency"},
		{"{name: a, concurrency: 2, lease: 48h}", "rules[0].lease"},
		{"{name: a, concurrency: 2, lease: 1s, limit: 5}", "rules[0].limit: a concurrency rule"},
		{"{name: a, concurrency: 2, lease: 1s, algorithm: gcra, period: 1s}", "rules[0].algorithm: a concurrency rule"},
		{"{name: a, concurrency: 2, lease: 1s, action: shadow}", "rules[0].action: rule \"a\": a concurrency rule's action is reject or delay"},
		{"{name: a, concurrency: 2, lease: 1s, action: delay}", "rules[0].max_delay"},
		{"{name: a, action: exempt, concurrency: 2}", "rules[0].concurrency: an exempt rule takes no concurrency"},
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
	for _, s := range []string{"concurrency: 2, lease: 30s", "concurrency: 1, lease: 1ms, action: delay, max_delay: 1s", "concurrency: -1, lease: 1s", "concurrency: 2, lease: [1s]", "lease: 1s, limit: 3", "concurrency: 1000001, lease: 25h, action: soft"} {
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
