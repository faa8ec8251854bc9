package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

func TestPathCase(t *testing.T) {
	for _, tc := range []struct {
		line      string
		sensitive bool
		problem   string
	}{
		{"", false, ""},
		{"server: {path_case: insensitive}\n", false, ""},
		{"server: {path_case: sensitive}\n", true, ""},
		{"server: {path_case: upper}\n", false, `r.yaml:1:21: server.path_case: want insensitive or sensitive, got "upper"`},
	} {
		c, err := config.Parse([]byte(tc.line+"upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"), "r.yaml")
		switch {
		case tc.problem != "":
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("%q: got %v, want %q", tc.line, err, tc.problem)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.line, err)
		case c.Limiter.CaseSensitivePaths != tc.sensitive:
			t.Errorf("%q: CaseSensitivePaths %v, want %v", tc.line, c.Limiter.CaseSensitivePaths, tc.sensitive)
		}
	}
}

// Every listener's port is a number from 0 to 65535, refused at the line of
// its field otherwise: serve would fail to bind it.
func TestListenerPorts(t *testing.T) {
	const rules = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"
	for _, tc := range []struct{ file, problem string }{
		{"server: {listen: 127.0.0.1:0}\n", ""},
		{"server: {listen: '[::1]:65535'}\n", ""},
		{"server: {listen: ':8080', admin: off}\n", ""},
		{"server: {listen: 127.0.0.1:99999}\n", `p.yaml:1:18: server.listen: port 99999: want a number from 0 to 65535`},
		{"server:\n  admin: 127.0.0.1:65536\n", `p.yaml:2:10: server.admin: port 65536: want a number from 0 to 65535`},
		{"server: {listen: 127.0.0.1:-1}\n", `p.yaml:1:18: server.listen: port -1: want a number from 0 to 65535`},
		{"server: {listen: 127.0.0.1:http}\n", ""},
		{"server: {listen: 127.0.0.1:htttp}\n", `p.yaml:1:18: server.listen: port "htttp": want a number from 0 to 65535 or a known service name`},
		{"server: {listen: 127.0.0.1:}\n", `p.yaml:1:18: server.listen: want host:port, such as 127.0.0.1:8080`},
		{"server: {forward_auth: {listen: 127.0.0.1:70000, trusted_proxies: [127.0.0.1]}}\n", `p.yaml:1:33: server.forward_auth.listen: port 70000: want a number from 0 to 65535`},
		{"server: {admin: [a]}\n", `p.yaml:1:17: server.admin: want a string, got a list`},
	} {
		_, err := config.Parse([]byte(tc.file+rules), "p.yaml")
		switch {
		case tc.problem == "" && err != nil:
			t.Errorf("%q: %v", tc.file, err)
		case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
			t.Errorf("%q: got %v, want %q", tc.file, err, tc.problem)
		}
	}
	const svc = "service: {grpc: 127.0.0.1:100000, descriptors: d}\n"
	if _, err := config.Parse([]byte(svc), "p.yaml"); err == nil || !strings.Contains(err.Error(), `p.yaml:1:17: service.grpc: port 100000: want a number from 0 to 65535`) {
		t.Errorf("%q: got %v", svc, err)
	}
}

func TestShutdownDelay(t *testing.T) {
	for _, tc := range []struct {
		line    string
		delay   time.Duration
		problem string
	}{
		{"", 0, ""},
		{"server: {shutdown_delay: 5s}\n", 5 * time.Second, ""},
		{"server: {shutdown_delay: 0s}\n", 0, ""},
		{"server: {shutdown_delay: 2h}\n", 0, "r.yaml:1:26: server.shutdown_delay: want a duration from 0s to 1h0m0s"},
		{"server: {shutdown_delay: -1s}\n", 0, "r.yaml:1:26: server.shutdown_delay: want a duration from 0s to 1h0m0s"},
		// A shutdown timeout of 0 would cut every request off: refused,
		// where the server read it as the default 10s.
		{"server: {shutdown_timeout: 0s}\n", 0, "r.yaml:1:28: server.shutdown_timeout: want a duration from 1ms to 1h0m0s"},
	} {
		c, err := config.Parse([]byte(tc.line+"upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"), "r.yaml")
		switch {
		case tc.problem != "":
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("%q: got %v, want %q", tc.line, err, tc.problem)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.line, err)
		case c.Server.ShutdownDelay != tc.delay:
			t.Errorf("%q: ShutdownDelay %v, want %v", tc.line, c.Server.ShutdownDelay, tc.delay)
		}
	}
}
