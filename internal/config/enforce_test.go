package config_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

func TestParsePercent(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{
		{"0%", 0}, {"0", 0}, {"25%", 25}, {"25", 25}, {"0.5%", 0.5}, {"0.5", 0.5},
		{"100%", 100}, {"100.0", 100}, {"12.3456%", 12.3456}, {"007%", 7},
	} {
		got, err := config.ParsePercent(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParsePercent(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "%", "-1%", "+5%", "100.01%", "101", "1e1", "0x10", "5 %", " 5%", "5%%", "%5", ".5%", "5.%",
		"NaN", "Inf", "1_0", "12.34567%", "five", "5‰", "99999999999999999999999%"} {
		if v, err := config.ParsePercent(in); !errors.Is(err, config.ErrPercent) {
			t.Errorf("ParsePercent(%q) = %v, %v; want an error wrapping ErrPercent", in, v, err)
		}
	}
}

// FuzzParsePercent checks that ParsePercent never panics, accepts only
// values from 0 to 100, and reads back what it accepted when formatted.
func FuzzParsePercent(f *testing.F) {
	for _, s := range []string{"25%", "0", "100%", "0.0001%", "100.0001", "1e2", "-0", "5.%", "", "%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := config.ParsePercent(s)
		if err != nil {
			return
		}
		if !(v >= 0 && v <= 100) || math.IsNaN(v) {
			t.Fatalf("ParsePercent(%q) = %v, outside 0 to 100", s, v)
		}
		again, err := config.ParsePercent(strconv.FormatFloat(v, 'f', -1, 64) + "%")
		if err != nil || again != v {
			t.Fatalf("ParsePercent(%q) = %v, but its formatted form reads %v, %v", s, v, again, err)
		}
	})
}

func TestRuleEnforce(t *testing.T) {
	c, err := config.Parse([]byte(`upstream: builtin:echo
rules:
  - name: orders
    key: header:X-Key
    algorithm: gcra
    limit: 10
    period: 1s
    enforce: 5%
  - name: search
    algorithm: gcra
    limit: 10
    period: 1s
    enforce: 50
  - name: all
    algorithm: gcra
    limit: 10
    period: 1s
`), "enforce.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rs := c.Limiter.Rules
	if rs[0].Enforce == nil || rs[0].Enforce.Percent != 5 {
		t.Errorf("rules[0].enforce: got %+v, want 5%%", rs[0].Enforce)
	}
	if rs[1].Enforce == nil || rs[1].Enforce.Percent != 50 {
		t.Errorf("rules[1].enforce: got %+v, want 50%%", rs[1].Enforce)
	}
	if rs[2].Enforce != nil {
		t.Errorf("rules[2].enforce: got %+v, want none (every key)", rs[2].Enforce)
	}
}

func TestRuleEnforceProblems(t *testing.T) {
	const head = "upstream: builtin:echo\nrules:\n  - name: a\n    algorithm: gcra\n    limit: 5\n    period: 1m\n"
	for _, tc := range []struct{ name, extra, want string }{
		{"above 100", "    enforce: 150%\n", `enforce.yaml:7:14: rules[0].enforce: want 0% to 100%, got "150%"`},
		{"negative", "    enforce: -5%\n", `enforce.yaml:7:14: rules[0].enforce: want a percentage such as 25% or 0.5%, got "-5%"`},
		{"words", "    enforce: half\n", `rules[0].enforce: want a percentage such as 25% or 0.5%, got "half"`},
		{"too precise", "    enforce: 0.123456%\n", `rules[0].enforce: "0.123456%" has more than 4 digits after the point`},
		{"empty", "    enforce:\n", "rules[0].enforce: want a percentage of keys such as 25%, got"},
		{"list", "    enforce: [5%]\n", "rules[0].enforce: want a percentage of keys such as 25%, got"},
		{"delay", "    action: delay\n    max_delay: 1s\n    enforce: 5%\n", `enforce.yaml:9:14: rules[0].enforce: rule "a": enforce is for action reject, not delay`},
		{"shadow", "    action: shadow\n    enforce: 5%\n", `enforce.yaml:8:14: rules[0].enforce: rule "a": enforce is for action reject, not shadow`},
	} {
		_, err := config.Parse([]byte(head+tc.extra), "enforce.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a problem containing %q", tc.name, err, tc.want)
		}
	}
	_, err := config.Parse([]byte("upstream: builtin:echo\nrules: [{name: a, action: exempt, enforce: 5%}]\n"), "enforce.yaml")
	if err == nil || !strings.Contains(err.Error(), "rules[0].enforce: an exempt rule takes no enforce") {
		t.Errorf("exempt with enforce: got %v", err)
	}
	_, err = config.Parse([]byte("upstream: builtin:echo\nrules: [{name: a, concurrency: 2, lease: 1m, enforce: 5%}]\n"), "enforce.yaml")
	if err == nil || !strings.Contains(err.Error(), "rules[0].enforce: a concurrency rule (one with concurrency and lease) takes no enforce") {
		t.Errorf("concurrency with enforce: got %v", err)
	}
}

// FuzzEnforce checks that no enforce value makes the parser panic, and that
// any it accepts validates.
func FuzzEnforce(f *testing.F) {
	for _, s := range []string{"5%", "0", "100", "0.5%", "'25%'", "101%", "-1", "[1]", "{a: 1}", "null", "1e2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, enforce string) {
		c, err := config.Parse([]byte("upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: 1m, enforce: "+enforce+"}]\n"), "f.yaml")
		if err != nil {
			return
		}
		for _, r := range c.Limiter.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("accepted %q, but the rule does not validate: %v", enforce, err)
			}
		}
	})
}

func TestDescriptorEnforce(t *testing.T) {
	d, err := config.ParseDescriptors([]byte(`domain: sms
descriptors:
  - key: to_number
    enforce: 5%
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        enforce: 0.5
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /api/*
    enforce: 100%
    rate_limit: {unit: minute, requests_per_unit: 10}
`), "sms.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		got  float64
		want float64
	}{
		{d.Descriptors[0].Enforce.Percent, 5},
		{d.Descriptors[1].Descriptors[0].Enforce.Percent, 0.5},
		{d.Descriptors[2].Enforce.Percent, 100},
	} {
		if c.got != c.want {
			t.Errorf("enforce: got %v, want %v", c.got, c.want)
		}
	}
}

func TestDescriptorEnforceProblems(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"one counter", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    enforce: 5%\n    rate_limit: {unit: day, requests_per_unit: 3}\n",
			"d.yaml:5:14: descriptors[0].enforce: needs a level counted per value"},
		{"shared wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v*\n    share_threshold: true\n    enforce: 5%\n    rate_limit: {unit: day, requests_per_unit: 3}\n",
			"d.yaml:6:14: descriptors[0].enforce: needs a level counted per value"},
		{"nested one counter", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    descriptors:\n      - key: u\n        value: w\n        enforce: 5%\n        rate_limit: {unit: day, requests_per_unit: 3}\n",
			"d.yaml:8:18: descriptors[0].descriptors[0].enforce: needs a level counted per value"},
		{"no rate_limit", "domain: d\ndescriptors:\n  - key: k\n    enforce: 5%\n",
			"d.yaml:4:14: descriptors[0].enforce: needs a rate_limit"},
		{"unlimited", "domain: d\ndescriptors:\n  - key: k\n    enforce: 5%\n    rate_limit: {unlimited: true}\n",
			"descriptors[0].enforce: not for an unlimited rate_limit"},
		{"shadow_mode", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    enforce: 5%\n    rate_limit: {unit: day, requests_per_unit: 3}\n",
			"descriptors[0].enforce: shadow_mode already leaves every counter in shadow mode"},
		{"above 100", "domain: d\ndescriptors:\n  - key: k\n    enforce: 101%\n    rate_limit: {unit: day, requests_per_unit: 3}\n",
			`d.yaml:4:14: descriptors[0].enforce: want 0% to 100%, got "101%"`},
		{"inside rate_limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 3, enforce: 5%}\n",
			"descriptors[0].rate_limit.enforce: belongs to the descriptor, beside rate_limit"},
	} {
		_, err := config.ParseDescriptors([]byte(tc.file), "d.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a problem containing %q", tc.name, err, tc.want)
		}
	}
}
