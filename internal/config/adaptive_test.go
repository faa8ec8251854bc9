package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
)

func TestAdaptiveRule(t *testing.T) {
	for _, tc := range []struct {
		name, rule string
		want       adaptive.Options
		fleet      int64
		lease      time.Duration
	}{
		{"defaults", "concurrency: adaptive", defaults(t, adaptive.Options{}), 0, 0},
		{"queue", "{concurrency: adaptive, action: delay, max_delay: 50ms}", defaults(t, adaptive.Options{MaxWait: 50 * time.Millisecond}), 0, 0},
		{"every field", `concurrency: adaptive
    adaptive: { min: 4, max: 400, initial: 40, tolerance: 25%, smoothing: 50%, window: 200ms, probe_interval: 30s, max_queue: 500,
                shares: { default: 80%, sheddable: 40% }, retry_after: 5s, fleet: 1000 }
    lease: 1m`, defaults(t, adaptive.Options{MinLimit: 4, MaxLimit: 400, InitialLimit: 40, Tolerance: 0.25, Smoothing: 0.5, Window: 200 * time.Millisecond,
			ProbeInterval: 30 * time.Second, MaxQueue: 500, Shares: adaptive.Shares{Default: 0.8, Sheddable: 0.4}, RetryAfter: 5 * time.Second}), 1000, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := ""
			if tc.fleet > 0 {
				store = "store: { backend: redis, redis: { url: \"redis://127.0.0.1:6379/0\" } }\n"
			}
			rule := "  - name: api\n    " + tc.rule + "\n"
			if strings.HasPrefix(tc.rule, "{") {
				rule = "  - {name: api, " + tc.rule[1:] + "\n"
			}
			c, err := config.Parse([]byte("upstream: builtin:echo\n"+store+"rules:\n"+rule), "c.yaml")
			if err != nil {
				t.Fatal(err)
			}
			r := c.Limiter.Rules[0]
			if r.Concurrency == nil || r.Concurrency.Adaptive == nil {
				t.Fatalf("concurrency %+v, want an adaptive limiter", r.Concurrency)
			}
			if got := r.Concurrency.Adaptive.Options(); got != tc.want {
				t.Errorf("options\n got %+v\nwant %+v", got, tc.want)
			}
			if r.Concurrency.Limit != tc.fleet || r.Concurrency.Lease != tc.lease || r.Action != httplimit.Reject || r.MaxDelay != 0 {
				t.Errorf("rule %+v, want fleet %d, lease %v, action reject without max delay", r, tc.fleet, tc.lease)
			}
		})
	}
}

// defaults returns o with its defaults, as a Limiter holds them.
func defaults(t *testing.T, o adaptive.Options) adaptive.Options {
	t.Helper()
	l, err := adaptive.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return l.Options()
}

func TestAdaptiveRuleProblems(t *testing.T) {
	for _, tc := range []struct{ rule, want string }{
		{"{name: a, concurrency: adaptiv}", `rules[0].concurrency: want a whole number (the most requests in flight per key) or adaptive`},
		{"{name: a, concurrency: 3, lease: 1s, adaptive: {min: 2}}", "rules[0].adaptive: only for a rule with concurrency: adaptive"},
		{"{name: a, concurrency: adaptive, key: [ip]}", "rules[0].key: an adaptive concurrency rule (concurrency: adaptive) takes no key"},
		{"{name: a, concurrency: adaptive, algorithm: gcra, limit: 5, period: 1s}", "rules[0].algorithm: an adaptive concurrency rule"},
		{"{name: a, concurrency: adaptive, tiers: {pro: {limit: 2}}}", "rules[0].tiers: an adaptive"},
		{"{name: a, concurrency: adaptive, action: shadow}", "rules[0].action: an adaptive concurrency rule's action is reject (shed at once) or delay"},
		{"{name: a, concurrency: adaptive, action: delay}", "rules[0].max_delay: missing: action delay needs max_delay"},
		{"{name: a, concurrency: adaptive, action: delay, max_delay: 2m}", "rules[0].max_delay: an adaptive concurrency rule's requests wait at most 1m0s"},
		{"{name: a, concurrency: adaptive, max_delay: 2s}", "rules[0].max_delay: max delay is only for action delay"},
		{"{name: a, concurrency: adaptive, lease: 1m}", "rules[0].lease: an adaptive concurrency rule takes a lease only with adaptive.fleet"},
		{"{name: a, concurrency: adaptive, adaptive: {fleet: 10}}", "rules[0].lease: missing: a fleet limit needs a lease"},
		{"{name: a, concurrency: adaptive, adaptive: {min: 0}}", "rules[0].adaptive.min"},
		{"{name: a, concurrency: adaptive, adaptive: {min: 50, max: 10}}", "c.yaml:2:67: rules[0].adaptive.max: max limit 10, want the min limit (50) to 1000000"},
		{"{name: a, concurrency: adaptive, adaptive: {initial: 2000}}", "rules[0].adaptive.initial: initial limit 2000"},
		{"{name: a, concurrency: adaptive, adaptive: {tolerance: 0%}}", "rules[0].adaptive.tolerance: want more than 0%"},
		{"{name: a, concurrency: adaptive, adaptive: {tolerance: 150%}}", "rules[0].adaptive.tolerance: want 0% to 100%"},
		{"{name: a, concurrency: adaptive, adaptive: {smoothing: fast}}", "rules[0].adaptive.smoothing: want a percentage"},
		{"{name: a, concurrency: adaptive, adaptive: {window: 100}}", "rules[0].adaptive.window"},
		{"{name: a, concurrency: adaptive, adaptive: {window: 1s, probe_interval: 5s}}", "rules[0].adaptive.probe_interval: probe interval 5s, want 10s (10 windows)"},
		{"{name: a, concurrency: adaptive, adaptive: {shares: {default: 50%, sheddable: 60%}}}", "rules[0].adaptive.shares: sheddable share 0.6, want above 0 and at most the default share (0.5)"},
		{"{name: a, concurrency: adaptive, adaptive: {shares: {critical: 50%}}}", `rules[0].adaptive.shares.critical: unknown field`},
		{"{name: a, concurrency: adaptive, adaptive: {retry_after: 1500ms}}", "rules[0].adaptive.retry_after: want whole seconds"},
		{"{name: a, concurrency: adaptive, adaptive: {fleet: 10}, lease: 1m}", "rules[0].adaptive.fleet: a fleet limit is shared by the gateways through Redis"},
		{"{name: a, concurrency: adaptive, adaptive: {speed: 2}}", `rules[0].adaptive.speed: unknown field`},
	} {
		_, err := config.Parse([]byte("upstream: builtin:echo\nrules: ["+tc.rule+"]\n"), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.rule, err, tc.want)
		}
	}
}

func TestPriority(t *testing.T) {
	c, err := config.Parse([]byte(`upstream: builtin:echo
tiers: { from: header:X-Plan }
priority:
  from: header:X-Priority
  routes:
    - { match: { path: /checkout/*, methods: [post] }, class: critical }
    - { match: { path: /recommendations/* }, class: sheddable }
  tiers: { enterprise: critical, free: sheddable }
  default: default
rules:
  - { name: api, concurrency: adaptive }
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := c.Limiter.Priority
	if p.From != httplimit.Header("X-Priority") || len(p.Routes) != 2 || p.Routes[0].Class != adaptive.Critical || p.Routes[0].Match.Paths[0] != "/checkout/*" ||
		p.Routes[0].Match.Methods[0] != "POST" || p.Routes[1].Class != adaptive.Sheddable || p.Tiers["enterprise"] != adaptive.Critical || p.Tiers["free"] != adaptive.Sheddable || p.Default != adaptive.Default {
		t.Errorf("priority %+v", p)
	}
}

func TestPriorityProblems(t *testing.T) {
	const rules = "rules: [{name: a, concurrency: adaptive}]\n"
	for _, tc := range []struct{ file, want string }{
		{"priority: { from: global }\n" + rules, "priority.from: a class cannot come from global"},
		{"priority: { from: jwt:priority }\n" + rules, "priority.from: jwt:priority needs identity.jwt"},
		{"priority: { default: urgent }\n" + rules, `priority.default: want critical, default or sheddable, got "urgent"`},
		{"priority: { tiers: { pro: critical } }\n" + rules, "priority.tiers: needs tiers.from"},
		{"tiers: { from: header:X-Plan }\npriority: { tiers: { pro: vip } }\n" + rules, `priority.tiers.pro: want critical, default or sheddable`},
		{"priority: { routes: [{ match: { path: api } , class: critical }] }\n" + rules, `priority.routes[0].match.path: path "api" must start with /`},
		{"priority: { routes: [{ match: { path: /api } }] }\n" + rules, "priority.routes[0].class: missing"},
		{"priority: { routes: { match: { path: /api } } }\n" + rules, "priority.routes: want a list"},
		{"priority: { from: header:X-Priority }\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n", "priority: only adaptive concurrency rules (concurrency: adaptive) use the classes"},
	} {
		_, err := config.Parse([]byte("upstream: builtin:echo\n"+tc.file), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.file, err, tc.want)
		}
	}
}
