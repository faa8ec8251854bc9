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
	if c.Limiter.Tiers.From != httplimit.Header("X-Plan") || c.Limiter.Tiers.Client != httplimit.Header("X-API-Key") || c.Limiter.Tiers.Default != "free" {
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
		{"export", []string{"/api/export/*"}, nil, "ip,header:X-User-Id", httplimit.Delay, sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second, Burst: 1}, 5 * time.Second},
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
	nested, err := filepath.Glob("../../examples/*/sluice.yaml") // the Sluice configs of the proxy and service examples
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, nested...)
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

// A value of the wrong kind is described in its problem: what was found,
// not an empty string.
func TestWrongKindSaysWhatWasFound(t *testing.T) {
	const rule = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: 1s}]\n"
	for _, tc := range []struct {
		path, file string // X marks the value
		want       string
	}{
		{"rules[0].limit", "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: X, period: 1s}]\n", "want a whole number, got "},
		{"rules[0].burst", "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, burst: X, period: 1s}]\n", "want a whole number, got "},
		{"rules[0].tiers.p.limit", "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: 1s, tiers: {p: {limit: X}}}]\n", "want a whole number, got "},
		{"store.max_keys", "store: {max_keys: X}\n" + rule, "want a whole number, got "},
		{"store.redis.db", "store: {backend: redis, redis: {url: 'redis://x:1', db: X}}\n" + rule, "want a whole number, got "},
		{"server.max_header_bytes", "server: {max_header_bytes: X}\n" + rule, "want a whole number, got "},
		{"client_ip.ipv6_prefix", "client_ip: {ipv6_prefix: X}\n" + rule, "want a whole number, got "},
		{"log.rejections_per_second", "log: {rejections_per_second: X}\n" + rule, "want a whole number, got "},
		{"rules[0].period", "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: X}]\n", "want a duration such as 10s, 1m or 1h, got "},
		{"rules[0].max_delay", "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: 1s, action: delay, max_delay: X}]\n", "want a duration such as 10s, 1m or 1h, got "},
		{"server.shutdown_timeout", "server: {shutdown_timeout: X}\n" + rule, "want a duration such as 10s, 1m or 1h, got "},
		{"store.redis.timeout", "store: {backend: redis, redis: {url: 'redis://x:1', timeout: X}}\n" + rule, "want a duration such as 10s, 1m or 1h, got "},
		{"rules[0].name", "upstream: builtin:echo\nrules: [{name: X, algorithm: gcra, limit: 5, period: 1s}]\n", "want a string, got "},
		{"rules[0].algorithm", "upstream: builtin:echo\nrules: [{name: a, algorithm: X, limit: 5, period: 1s}]\n", "want a string, got "},
		{"server.listen", "server: {listen: X}\n" + rule, "want a string, got "},
		{"store.backend", "store: {backend: X}\n" + rule, "want a string, got "},
		{"tiers.default", "tiers: {default: X}\n" + rule, "want a string, got "},
		{"client_ip.header", "client_ip: {header: X}\n" + rule, "want a string, got "},
	} {
		for _, bad := range []struct{ value, got string }{{"[5]", "a list"}, {"{a: 1}", "a mapping"}, {"", "nothing"}} {
			file := strings.Replace(tc.file, "X", bad.value, 1)
			want := tc.path + ": " + tc.want + bad.got
			if _, err := config.Parse([]byte(file), "k.yaml"); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %s: got %v, want %q", tc.path, bad.value, err, want)
			}
		}
	}
	for _, tc := range []struct{ file, want string }{
		{"server: [a]\n" + rule, "server: want a mapping of listen, "},
		{"headers: {a: 1}\n" + rule, "headers: want a list, such as [a, b], got a mapping"},
		{"client_ip: {trusted_proxies: 10.0.0.0/8}\n" + rule, `client_ip.trusted_proxies: want a list, such as [a, b], got "10.0.0.0/8"`},
		{"upstream: builtin:echo\nrules: {a: 1}\n", "rules: want a list of rules, got a mapping"},
		{"tiers: {from: 'header:K', keys: [a]}\n" + rule, "tiers.keys: want a mapping from a value (such as an API key) to a tier name, got a list"},
		{"upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: 1s, tiers: [p]}]\n", "rules[0].tiers: want a mapping from tier name to { limit, burst, period, algorithm }, got a list"},
		{"- a\n", "want a mapping with server, upstream, store, client_ip, headers, tiers and rules, got a list"},
		{"upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5.5, period: 1s}]\n", `rules[0].limit: want a whole number, got "5.5"`},
	} {
		if _, err := config.Parse([]byte(tc.file), "k.yaml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.file, err, tc.want)
		}
	}
	// server: [a] lists the fields and says what it found.
	if _, err := config.Parse([]byte("server: [a]\n"+rule), "k.yaml"); err == nil || !strings.Contains(err.Error(), ", got a list") {
		t.Errorf("server: [a]: got %v, want it to say it got a list", err)
	}
}

// A syntax error is reported at the line and column of the mistake, not at
// the line where the YAML parser's enclosing collection began.
func TestSyntaxErrorPosition(t *testing.T) {
	const head = "upstream: builtin:echo\nrules:\n  - name: a\n    algorithm: gcra\n"
	for _, tc := range []struct{ name, file, want string }{
		{"misindented field in a list entry", head + "   limit: 5\n    period: 1s\n", "s.yaml:5:4: did not find expected '-' indicator"},
		{"misindented second entry", "rules:\n  - name: a\n  - name: b\n   x: 1\n", "s.yaml:4:4: did not find expected '-' indicator"},
		{"unclosed flow list", head + "    limit: [5\n    period: 1s\n", "s.yaml:5:13: did not find expected ',' or ']'"},
		{"unclosed flow mapping", "upstream: builtin:echo\nserver: {listen: 127.0.0.1:1\nrules: []\n", "s.yaml:2:10: did not find expected ',' or '}'"},
		{"tab indentation", "upstream: builtin:echo\nrules:\n\t- name: a\n", "s.yaml:3:1: found character that cannot start any token (indent with spaces, not tabs"},
		{"colon in a value", "upstream: builtin:echo\nrules:\n  - name: a: b\n", "s.yaml:3:12: mapping values are not allowed in this context"},
		{"unterminated quote", "upstream: builtin:echo\nrules:\n  - name: 'a\n    limit: 5\n", "s.yaml:3:11: found unexpected end of stream"},
		{"outdented key", "server:\n  listen: 127.0.0.1:1\n admin: off\n", "s.yaml:3:2: did not find expected key"},
		{"list item in a mapping", "upstream: builtin:echo\nstore: memory\n- rules\n", "s.yaml:3:1: did not find expected key"},
		{"reserved character", "upstream: builtin:echo\nrules:\n  - name: @a\n", "s.yaml:3:11: found character that cannot start any token"},
		{"unknown alias", "upstream: *nope\n", "s.yaml:1:"},
		{"no line ending", head + "   limit: 5", "s.yaml:5:4: did not find expected '-' indicator"},
		{"after multibyte characters", "# é\nupstream: builtin:echo # ééé\nrules:\n  - name: \"é\": x\n", "s.yaml:4:14: mapping values are not allowed"},
		// Lines end where YAML ends them, as in the positions of every
		// other problem: at a bare CR and at CRLF too.
		{"bare CR line breaks", strings.ReplaceAll(head+"   limit: 5\n", "\n", "\r"), "s.yaml:5:4: did not find expected '-' indicator"},
		{"CRLF line breaks", strings.ReplaceAll(head+"   limit: 5\n", "\n", "\r\n"), "s.yaml:5:4: did not find expected '-' indicator"},
		{"mixed line breaks", "upstream: builtin:echo\r\rrules:\r\n  - name: a\n   limit: 5\r", "s.yaml:5:4: did not find expected '-' indicator"},
		{"unterminated quote after bare CRs", "server: {}\rupstream: 'x\rrules: [\r", "s.yaml:2:11: found unexpected end of stream"},
	} {
		_, err := config.Parse([]byte(tc.file), "s.yaml")
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
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

// yamlLines counts the lines of s as the YAML parser does: a line ends at
// LF, CRLF or a bare CR (YAML 1.2's line breaks), or at NEL, LS or PS, which
// the parser also counts as YAML 1.1 did.
func yamlLines(s string) int {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	n := 1
	for _, r := range s {
		switch r {
		case '\n', '\r', '\u0085', '\u2028', '\u2029':
			n++
		}
	}
	return n
}

func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../../examples/quickstart.yaml"); err == nil {
		f.Add(string(b))
	}
	f.Add("upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s, tiers: {p: {burst: 3}}}]\n")
	f.Add("a: &a [*a, *a]\n")
	f.Add("upstream: builtin:echo\nrules: [{name: a, algorithm: fixed_window, limit: 9, period: month, calendar: {anchor: '31T02:30', timezone: Europe/Berlin}, tiers: {p: {period: week, calendar: {week_start: monday}}}}]\n")
	f.Add("upstream: builtin:echo\nlists: {a: {cidrs: [10.0.0.0/8, '::/0']}, k: {keys: [x], key: header:K}}\ndeny: [a]\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s, allow: k}]\n")
	f.Add("lists: {a: {cidrs: [10.0.0.0/8]}, k: {keys: [x]}}\nservice: {grpc: 127.0.0.1:1, descriptors: d, deny: {remote_address: a}, allow: {api_key: [k, a]}}\n")
	f.Add("upstream: builtin:echo\ntiers: {from: header:P}\npriority: {from: header:X-Priority, routes: [{match: {path: /c/*}, class: critical}], tiers: {p: sheddable}, default: default}\nrules: [{name: a, concurrency: adaptive, action: delay, max_delay: 20ms, adaptive: {min: 2, max: 90, tolerance: 25%, shares: {default: 80%, sheddable: 50%}, retry_after: 2s}}]\n")
	// Syntax errors, which are located by parsing prefixes of the file.
	f.Add("rules:\n  - name: a\n   limit: 5\n")
	f.Add("upstream: 'x\nrules: [\n")
	f.Add("a: b\r\n\tc: d\r\n")
	f.Add("# é\nupstream: builtin:echo\nrules:\n  - name: \"é\": x\n")
	f.Add("server: {read_timeout: 30s, path_case: sensitive}\nupstream: {url: http://x:1, dial_timeout: 1s, host: upstream}\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := config.Parse([]byte(s), "fuzz.yaml")
		if err != nil {
			var ce *config.Error
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			// A problem is in the file, or just after its end (where
			// YAML places an empty document's node).
			lines := yamlLines(s) + 1
			for _, p := range ce.Problems {
				if p.Line < 0 || p.Line > lines || p.Column < 0 || (p.Line > 0) != (p.Column > 0) {
					t.Fatalf("problem at %d:%d in a file of %d lines: %v", p.Line, p.Column, lines, p)
				}
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

func TestForwardAuth(t *testing.T) {
	const base = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"
	c, err := config.Parse([]byte(base+"server:\n  forward_auth: { listen: 127.0.0.1:8083, trusted_proxies: [127.0.0.1, 10.0.0.0/8] }\n"), "fa.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fa := c.Server.ForwardAuth
	if fa == nil || fa.Listen != "127.0.0.1:8083" || len(fa.TrustedProxies) != 2 || fa.TrustedProxies[0].String() != "127.0.0.1/32" || fa.TrustedProxies[1].String() != "10.0.0.0/8" {
		t.Errorf("got %+v", fa)
	}
	if c, err := config.Parse([]byte(base), "none.yaml"); err != nil || c.Server.ForwardAuth != nil {
		t.Errorf("without the section: got %+v, %v; want nil", c.Server.ForwardAuth, err)
	}
	for file, want := range map[string]string{
		"server:\n  forward_auth: { trusted_proxies: [127.0.0.1] }\n":                      "server.forward_auth.listen: missing",
		"server:\n  forward_auth: { listen: 127.0.0.1:8083 }\n":                            "server.forward_auth.trusted_proxies: missing",
		"server:\n  forward_auth: { listen: 127.0.0.1:8083, trusted_proxies: [] }\n":       "server.forward_auth.trusted_proxies: empty",
		"server:\n  forward_auth: { listen: nope, trusted_proxies: [127.0.0.1] }\n":        "server.forward_auth.listen: want host:port",
		"server:\n  forward_auth: { listen: 127.0.0.1:1, trusted_proxies: [bogus] }\n":     "server.forward_auth.trusted_proxies[0]: want a CIDR",
		"server:\n  forward_auth: { listen: 127.0.0.1:1, trusted_proxies: [x], pth: a }\n": "server.forward_auth.pth: unknown field",
	} {
		_, err := config.Parse([]byte(base+file), "fa.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", file, err, want)
		}
	}
}

func TestListenAndAdminCollide(t *testing.T) {
	const rules = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"
	for _, tc := range []struct {
		server string
		want   string // the problem; "" for none
	}{
		{"{listen: 127.0.0.1:8080, admin: 127.0.0.1:8080}", "c.yaml:1:41: server.admin: 127.0.0.1:8080 takes the port of server.listen (127.0.0.1:8080)"},
		{"{listen: ':8080', admin: 0.0.0.0:8080}", "server.admin: 0.0.0.0:8080 takes the port"},
		{"{listen: 0.0.0.0:8080, admin: 127.0.0.1:8080}", "server.admin: 127.0.0.1:8080 takes the port"},
		{"{listen: '[::]:8080', admin: 10.1.2.3:8080}", "server.admin: 10.1.2.3:8080 takes the port"},
		{"{listen: localhost:8080, admin: '[::1]:8080'}", "server.admin: [::1]:8080 takes the port"},
		{"{listen: '[::ffff:127.0.0.1]:80', admin: '127.0.0.1:http'}", "server.admin: 127.0.0.1:http takes the port"},
		{"{listen: Gateway.internal:8080, admin: gateway.internal:8080}", "server.admin: gateway.internal:8080 takes the port"},
		{"{listen: 127.0.0.1:9090}", "c.yaml:1:18: server.listen: 127.0.0.1:9090 takes the port of server.admin (127.0.0.1:9090, the default)"},
		{"{listen: 127.0.0.1:8080, admin: 127.0.0.1:9090}", ""},
		{"{listen: 127.0.0.1:8080, admin: 127.0.0.2:8080}", ""},
		{"{listen: 127.0.0.1:8080, admin: '[::1]:8080'}", ""},
		{"{listen: 127.0.0.1:0, admin: 127.0.0.1:0}", ""},
		{"{listen: 127.0.0.1:9090, admin: off}", ""},
		{"{listen: a.internal:8080, admin: b.internal:8080}", ""},
	} {
		_, err := config.Parse([]byte("server: "+tc.server+"\n"+rules), "c.yaml")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: got %v, want no problem", tc.server, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want a problem containing %q", tc.server, err, tc.want)
		}
	}
}
