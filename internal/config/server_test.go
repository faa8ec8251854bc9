package config_test

import (
	"strings"
	"testing"

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
