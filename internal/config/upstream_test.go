package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

const oneRule = "rules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"

func TestUpstreamAndTimeouts(t *testing.T) {
	// Defaults, with the plain string form.
	c, err := config.Parse([]byte("upstream: http://127.0.0.1:3000\n"+oneRule), "u.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := config.Proxy{DialTimeout: 5 * time.Second, ResponseHeaderTimeout: 60 * time.Second, IdleTimeout: 90 * time.Second, PreserveHost: true}
	if c.Upstream != "http://127.0.0.1:3000" || c.Proxy != want {
		t.Errorf("string form: got %q %+v, want %+v", c.Upstream, c.Proxy, want)
	}
	if c.Server.ReadTimeout != 60*time.Second || c.Server.IdleTimeout != 2*time.Minute {
		t.Errorf("server timeouts: got %v %v, want 1m0s 2m0s", c.Server.ReadTimeout, c.Server.IdleTimeout)
	}

	// The mapping form sets everything.
	c, err = config.Parse([]byte(`server: { read_timeout: 30s, idle_timeout: 1m }
upstream:
  url: https://api.internal:8443
  dial_timeout: 2s
  response_header_timeout: 15s
  idle_timeout: 30s
  host: upstream
`+oneRule), "u.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want = config.Proxy{DialTimeout: 2 * time.Second, ResponseHeaderTimeout: 15 * time.Second, IdleTimeout: 30 * time.Second}
	if c.Upstream != "https://api.internal:8443" || c.Proxy != want {
		t.Errorf("mapping form: got %q %+v, want %+v", c.Upstream, c.Proxy, want)
	}
	if c.Server.ReadTimeout != 30*time.Second || c.Server.IdleTimeout != time.Minute {
		t.Errorf("server timeouts: got %v %v, want 30s 1m0s", c.Server.ReadTimeout, c.Server.IdleTimeout)
	}

	for _, tc := range []struct{ file, want string }{
		{"upstream: {dial_timeout: 1s}\n", "u.yaml:1:11: upstream.url: missing"},
		{"upstream: {url: ftp://x}\n", `u.yaml:1:17: upstream.url: want builtin:echo or an http:// or https:// URL`},
		{"upstream: {url: builtin:echo, dial_timeout: 2m}\n", "upstream.dial_timeout: want a duration from 1ms to 1m0s, got 2m0s"},
		{"upstream: {url: builtin:echo, response_header_timeout: 0s}\n", "upstream.response_header_timeout: want a duration from 1ms to 1h0m0s"},
		{"upstream: {url: builtin:echo, idle_timeout: 5}\n", "upstream.idle_timeout: want a duration with a unit"},
		{"upstream: {url: builtin:echo, host: client}\n", `upstream.host: want preserve or upstream, got "client"`},
		{"upstream: {url: builtin:echo, hots: preserve}\n", `upstream.hots: unknown field (did you mean "host"?)`},
		{"upstream: [a]\n", "upstream: want a mapping of url"},
		{"server: {read_timeout: 0s}\nupstream: builtin:echo\n", "server.read_timeout: want a duration from 1ms to 24h0m0s"},
		{"server: {idle_timeout: 48h}\nupstream: builtin:echo\n", "server.idle_timeout: want a duration from 1ms to 24h0m0s"},
	} {
		_, err := config.Parse([]byte(tc.file+oneRule), "u.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a problem containing %q", tc.file, err, tc.want)
		}
	}
}
