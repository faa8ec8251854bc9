package config_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

func TestPenalty(t *testing.T) {
	c, err := config.Parse([]byte(`upstream: builtin:echo
rules:
  - name: login
    key: [header:X-Account, ip]
    algorithm: gcra
    limit: 5
    period: 15m
    count: { status: [401, 403] }
    penalty: { after: 3, blocks: [1m, 10m, 1h], forget: 24h }
  - name: one
    algorithm: fixed_window
    limit: 5
    period: 1m
    penalty: { blocks: 5m, forget: 1h }
  - name: none
    algorithm: fixed_window
    limit: 5
    period: 1m
`), "penalty.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := c.Limiter.Rules[0].Penalty
	if got == nil || got.After != 3 || !slices.Equal(got.Blocks, []time.Duration{time.Minute, 10 * time.Minute, time.Hour}) || got.Forget != 24*time.Hour {
		t.Fatalf("rules[0].penalty: got %+v", got)
	}
	got = c.Limiter.Rules[1].Penalty
	if got == nil || got.After != 0 || !slices.Equal(got.Blocks, []time.Duration{5 * time.Minute}) || got.Forget != time.Hour {
		t.Fatalf("rules[1].penalty: got %+v", got)
	}
	if c.Limiter.Rules[2].Penalty != nil {
		t.Fatalf("rules[2].penalty: got %+v, want none", c.Limiter.Rules[2].Penalty)
	}
}

func TestPenaltyProblems(t *testing.T) {
	const head = "upstream: builtin:echo\nrules:\n  - name: a\n    algorithm: gcra\n    limit: 5\n    period: 1m\n"
	for _, tc := range []struct{ name, penalty, want string }{
		{"no blocks", "{forget: 1h}", "penalty.yaml:7:14: rules[0].penalty.blocks: missing"},
		{"no forget", "{blocks: [1m]}", "rules[0].penalty.forget: missing"},
		{"empty blocks", "{blocks: [], forget: 1h}", "rules[0].penalty.blocks: want 1 to 8 durations"},
		{"too many blocks", "{blocks: [1s, 2s, 3s, 4s, 5s, 6s, 7s, 8s, 9s], forget: 1h}", "got 9"},
		{"bad block", "{blocks: [1m, soon], forget: 1h}", "rules[0].penalty.blocks[1]: want a duration"},
		{"zero block", "{blocks: [0s], forget: 1h}", "rules[0].penalty.blocks[0]"},
		{"long forget", "{blocks: [1m], forget: 9000h}", "rules[0].penalty.forget"},
		{"bad after", "{after: 0, blocks: [1m], forget: 1h}", "rules[0].penalty.after: want a whole number from 1"},
		{"unknown field", "{blocks: [1m], forget: 1h, for: 1m}", "rules[0].penalty.for"},
		{"not a mapping", "[1m]", "rules[0].penalty"},
	} {
		_, err := config.Parse([]byte(head+"    penalty: "+tc.penalty+"\n"), "penalty.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a problem containing %q", tc.name, err, tc.want)
		}
	}
	_, err := config.Parse([]byte("upstream: builtin:echo\nrules: [{name: a, action: exempt, penalty: {blocks: [1m], forget: 1h}}]\n"), "penalty.yaml")
	if err == nil || !strings.Contains(err.Error(), "an exempt rule takes no penalty") {
		t.Errorf("exempt with penalty: got %v", err)
	}
	_, err = config.Parse([]byte("upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: 1m, action: delay, max_delay: 1s, penalty: {blocks: [1m], forget: 1h}}]\n"), "penalty.yaml")
	if err == nil || !strings.Contains(err.Error(), "rules[0].penalty: rule \"a\": a penalty is not for action delay") {
		t.Errorf("delay with penalty: got %v", err)
	}
}

// FuzzPenalty checks that no penalty mapping makes the parser panic, and
// that any it accepts validates.
func FuzzPenalty(f *testing.F) {
	for _, s := range []string{"{after: 1, blocks: [1m, 10m, 1h], forget: 24h}", "{blocks: 1s, forget: 1ms}", "{blocks: [[1m]], forget: 1h}", "{after: -1}", "{blocks: [-1s], forget: 1h}", "null"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, penalty string) {
		c, err := config.Parse([]byte("upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: 1m, penalty: "+penalty+"}]\n"), "f.yaml")
		if err != nil {
			return
		}
		for _, r := range c.Limiter.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("accepted %q, but the rule does not validate: %v", penalty, err)
			}
		}
	})
}
