package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/redisstore"
)

func TestQuickstartLoads(t *testing.T) {
	c, err := config.Load("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Listen != "127.0.0.1:8080" || c.Server.Admin != "127.0.0.1:9090" || c.Upstream != "builtin:echo" {
		t.Errorf("server/upstream: got %+v %q", c.Server, c.Upstream)
	}
	if c.Store.Backend != "memory" || c.Store.MaxKeys != 1_000_000 || c.ClientIP.IPv6Prefix != 64 || len(c.ClientIP.TrustedProxies) != 0 {
		t.Errorf("store/client_ip: got %+v %+v", c.Store, c.ClientIP)
	}
	if c.Limiter.Headers != httplimit.HeadersIETF|httplimit.HeadersLegacy {
		t.Errorf("headers: got %v", c.Limiter.Headers)
	}
	if c.Limiter.Tiers.From != httplimit.Header("X-Plan") || c.Limiter.Tiers.Default != "free" {
		t.Errorf("tiers: got %+v", c.Limiter.Tiers)
	}
	tb := func(n, burst int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.TokenBucket, Count: n, Period: 10 * time.Second, Burst: burst}
	}
	want := []struct {
		name   string
		paths  []string
		method []string
		key    string
		action httplimit.Action
		limit  sluice.Limit
		delay  time.Duration
	}{
		{"health", []string{"/healthz"}, nil, "", httplimit.Exempt, sluice.Limit{}, 0},
		{"login", []string{"/login"}, []string{"POST"}, "ip", httplimit.Reject, sluice.Limit{Algorithm: sluice.SlidingLog, Count: 5, Period: time.Minute}, 0},
		{"search", []string{"/api/search"}, nil, "header:X-Api-Key", httplimit.Reject, tb(20, 40), 0},
		{"export", []string{"/api/export/*"}, nil, "ip,header:X-User-Id", httplimit.Delay, sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Hour}, 5 * time.Second},
		{"per-ip", []string{"/*"}, nil, "ip", httplimit.Reject, sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 1000, Period: time.Hour}, 0},
		{"global-writes", nil, []string{"POST", "PUT", "PATCH", "DELETE"}, "global", httplimit.Shadow, sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10000, Period: time.Second}, 0},
	}
	rules := c.Limiter.Rules
	if len(rules) != len(want) {
		t.Fatalf("got %d rules, want %d", len(rules), len(want))
	}
	for i, w := range want {
		r := rules[i]
		var keys []string
		for _, k := range r.Key {
			keys = append(keys, k.String())
		}
		if r.Name != w.name || strings.Join(r.Match.Paths, ",") != strings.Join(w.paths, ",") ||
			strings.Join(r.Match.Methods, ",") != strings.Join(w.method, ",") || strings.Join(keys, ",") != w.key ||
			r.Action != w.action || r.Limit != w.limit || r.MaxDelay != w.delay {
			t.Errorf("rules[%d]: got %+v", i, r)
		}
	}
	// A tier that sets its limit but not its burst gets a burst of its own
	// limit (Burst 0), not the rule's 40.
	if got := rules[2].Tiers; len(got) != 2 || got["premium"] != tb(100, 0) || got["enterprise"] != tb(1000, 2000) {
		t.Errorf("search tiers: got %+v", got)
	}
}

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		if _, err := config.Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestProblemsNameFieldAndLine(t *testing.T) {
	const file = `server:
  listen: nope
upstream: ftp://x
store: { backend: memory, max_keys: -5 }
headers: [ietf, fancy]
rules:
  - name: a
    algorithm: leaky
    limit: abc
    perod: 1m
  - name: b
    match: { path: /x* }
    algorithm: sliding_window
    limit: 10
    period: 60
  - name: c
    algorithm: sliding_window
    limit: 10
    period: 1m
    burst: 5
  - name: d
    algorithm: fixed_window
    limit: 10
    period: 1s
    action: delay
    max_delay: 1s
  - name: d
    action: exempt
    limit: 4
  - name: f
    algorithm: gcra
    limit: 1000000000000
    period: 1ns
`
	_, err := config.Parse([]byte(file), "broken.yaml")
	var ce *config.Error
	if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("got %v, want a *config.Error wrapping ErrInvalid", err)
	}
	for _, want := range []string{
		`broken.yaml:2:11: server.listen: want host:port`,
		`broken.yaml:3:11: upstream: want builtin:echo or an http:// or https:// URL`,
		`broken.yaml:4:37: store.max_keys: want a whole number from 1 to 1000000000, got -5`,
		`broken.yaml:5:17: headers[1]: want ietf or legacy, got "fancy"`,
		`broken.yaml:8:16: rules[0].algorithm: unknown algorithm "leaky"`,
		`broken.yaml:9:12: rules[0].limit: want a whole number, got "abc"`,
		`broken.yaml:10:5: rules[0].perod: unknown field (did you mean "period"?)`,
		`broken.yaml:12:20: rules[1].match.path: path "/x*" must start with /`,
		`broken.yaml:15:13: rules[1].period: want a duration with a unit, such as 60s, got 60`,
		`broken.yaml:20:12: rules[2].burst:`,
		`broken.yaml:25:13: rules[3].action: rule "d": action delay needs algorithm token_bucket or gcra, not fixed_window`,
		`broken.yaml:28:13: rules[4].limit: an exempt rule takes no limit`,
		`broken.yaml:33:13: rules[5].period:`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "rules[0].limit: missing") {
		t.Errorf("a field given but invalid is also reported missing:\n%v", err)
	}
}

func TestOtherProblems(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"empty", ``, "the file is empty"},
		{"not a mapping", `- a`, "want a mapping"},
		{"syntax", "rules: [\n", "broken.yaml:"},
		{"no rules", "upstream: builtin:echo\n", "rules: missing"},
		{"no upstream", "rules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n", "upstream: missing"},
		{"duplicate names", "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}, {name: a, algorithm: gcra, limit: 1, period: 1s}]\n", `"a" is also the name of rules[0]`},
		{"redis without url", "upstream: builtin:echo\nstore: {backend: redis}\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n", "store.redis: missing"},
		{"redis section on memory", "upstream: builtin:echo\nstore: {redis: {url: 'redis://x:1'}}\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n", "only for backend redis"},
		{"bad on_error", "upstream: builtin:echo\nstore: {on_error: maybe}\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n", "want allow, deny or local"},
		{"bad proxy", "upstream: builtin:echo\nclient_ip: {trusted_proxies: [10.0.0.0/33]}\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n", "client_ip.trusted_proxies[0]"},
		{"bad key part", "upstream: builtin:echo\nrules: [{name: a, key: [user], algorithm: gcra, limit: 1, period: 1s}]\n", "rules[0].key[0]: unknown key part"},
		{"tier unreachable", "upstream: builtin:echo\ntiers: {from: header:X-API-Key, keys: {k1: gold}}\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s, tiers: {silver: {limit: 2}}}]\n", "no entry of tiers.keys maps to tier \"silver\""},
		{"keys without from", "upstream: builtin:echo\ntiers: {keys: {k1: gold}}\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n", "needs tiers.from"},
		{"huge", strings.Repeat("#", config.MaxSize+1), "larger than"},
		{"delay without max", "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s, action: delay}]\n", "rules[0].max_delay"},
	} {
		_, err := config.Parse([]byte(tc.file), "broken.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a problem containing %q", tc.name, err, tc.want)
		}
	}
}

func TestRedisSettings(t *testing.T) {
	c, err := config.Parse([]byte(`upstream: http://127.0.0.1:3000
store:
  backend: redis
  on_error: allow
  redis: { url: "redis://127.0.0.1:6379/0", timeout: 20ms, prefix: gw }
rules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]
`), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Store.Redis
	if c.Store.Backend != "redis" || r.URL != "redis://127.0.0.1:6379/0" || r.Timeout != 20*time.Millisecond || r.Prefix != "gw" || r.OnError != redisstore.Allow {
		t.Errorf("got %+v %+v", c.Store, r)
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := config.Load(filepath.Join(t.TempDir(), "nope.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want ErrNotExist", err)
	}
}

func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../../examples/quickstart.yaml"); err == nil {
		f.Add(string(b))
	}
	f.Add("upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s, tiers: {p: {burst: 3}}}]\n")
	f.Add("a: &a [*a, *a]\n")
	f.Add("server: {read_timeout: 30s, path_case: sensitive}\nupstream: {url: http://x:1, dial_timeout: 1s, host: upstream}\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := config.Parse([]byte(s), "fuzz.yaml")
		if err != nil {
			var ce *config.Error
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			return
		}
		// A file that parsed always builds.
		for _, r := range c.Limiter.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("rule %q parsed but does not validate: %v", r.Name, err)
			}
		}
	})
}
