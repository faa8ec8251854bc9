package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
)

func TestCount(t *testing.T) {
	c, err := config.Parse([]byte(`upstream: builtin:echo
rules:
  - name: login
    key: [header:X-Account, ip]
    algorithm: gcra
    limit: 5
    period: 15m
    count: { status: [401, 403, 5XX], header: Sluice-Count, mode: reserve }
  - name: one
    algorithm: sliding_log
    limit: 5
    period: 15m
    count: { status: 4xx }
`), "count.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := c.Limiter.Rules[0].Count
	if got == nil || !slices.Equal(got.Statuses, []int{401, 403}) || !slices.Equal(got.Classes, []int{5}) || got.Header != "Sluice-Count" || got.Mode != httplimit.CountReserve {
		t.Fatalf("rules[0].count: got %+v", got)
	}
	got = c.Limiter.Rules[1].Count
	if got == nil || len(got.Statuses) != 0 || !slices.Equal(got.Classes, []int{4}) || got.Mode != httplimit.CountAfter {
		t.Fatalf("rules[1].count: got %+v", got)
	}
}

func TestCountProblems(t *testing.T) {
	const head = "upstream: builtin:echo\nrules:\n  - name: a\n    algorithm: gcra\n    limit: 5\n    period: 1m\n"
	for _, tc := range []struct{ name, count, want string }{
		{"bad status", "{status: [401, 600]}", "count.yaml:7:27: rules[0].count.status[1]: status \"600\""},
		{"bad class", "{status: 9xx}", "rules[0].count.status: status class \"9xx\""},
		{"empty", "{mode: after}", "rules[0].count: want a status"},
		{"bad mode", "{status: 401, mode: later}", "rules[0].count.mode: want after or reserve"},
		{"bad header", "{header: 'Bad Header'}", "rules[0].count: rule \"a\": count header"},
		{"empty header", "{status: 401, header: ''}", `count.yaml:7:34: rules[0].count.header: want a header name such as Sluice-Count, got ""`},
		{"unknown field", "{statuses: [401]}", "rules[0].count.statuses"},
		{"reserve on a window", "", ""},
	} {
		file := head + "    count: " + tc.count + "\n"
		if tc.name == "reserve on a window" {
			file = strings.Replace(head, "gcra", "fixed_window", 1) + "    count: {status: 401, mode: reserve}\n"
			tc.want = "count.yaml:7:12: rules[0].count: rule \"a\": count mode reserve needs algorithm token_bucket or gcra"
		}
		_, err := config.Parse([]byte(file), "count.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a problem containing %q", tc.name, err, tc.want)
		}
	}
	_, err := config.Parse([]byte("server:\n  forward_auth: { listen: 127.0.0.1:8083, trusted_proxies: [127.0.0.1] }\nrules:\n  - {name: a, algorithm: gcra, limit: 5, period: 1m}\n  - {name: b, algorithm: gcra, limit: 5, period: 1m, count: {status: 401}}\n"), "count.yaml")
	if err == nil || !strings.Contains(err.Error(), "count.yaml:5:") || !strings.Contains(err.Error(), "rules[1].count: counting by outcome needs the gateway") {
		t.Errorf("count with forward-auth: got %v", err)
	}
	_, err = config.Parse([]byte("upstream: builtin:echo\nrules: [{name: a, action: exempt, count: {status: 401}}]\n"), "count.yaml")
	if err == nil || !strings.Contains(err.Error(), "an exempt rule takes no count") {
		t.Errorf("exempt with count: got %v", err)
	}
}

// FuzzCount checks that no count mapping makes the parser panic, and that
// any it accepts validates.
func FuzzCount(f *testing.F) {
	for _, s := range []string{"{status: [401, 4xx]}", "{status: 5XX, header: Sluice-Count, mode: reserve}", "{status: [099]}", "{header: ''}", "{status: [[1]]}", "{status: 1x}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, count string) {
		c, err := config.Parse([]byte("upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: 1m, count: "+count+"}]\n"), "f.yaml")
		if err != nil {
			return
		}
		for _, r := range c.Limiter.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("accepted %q, but the rule does not validate: %v", count, err)
			}
		}
	})
}
