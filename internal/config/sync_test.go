package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
)

func TestRuleSync(t *testing.T) {
	c, err := config.Parse([]byte(`upstream: builtin:echo
rules:
  - name: global
    key: global
    algorithm: gcra
    limit: 10000
    period: 1s
    sync: lease
  - name: approx
    algorithm: fixed_window
    limit: 100
    period: 1s
    sync: async
    sync_interval: 50ms
  - name: plain
    algorithm: sliding_window
    limit: 5
    period: 1m
`), "sync.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules := c.Limiter.Rules
	if got := rules[0].Sync; got != (sluice.Sync{Mode: sluice.SyncLease}) {
		t.Errorf("rules[0].sync: got %+v", got)
	}
	if got := rules[1].Sync; got != (sluice.Sync{Mode: sluice.SyncAsync, Interval: 50 * time.Millisecond}) {
		t.Errorf("rules[1].sync: got %+v", got)
	}
	if got := rules[2].Sync; got != (sluice.Sync{}) {
		t.Errorf("rules[2].sync: got %+v, want exact", got)
	}
}

func TestRuleSyncProblems(t *testing.T) {
	const head = "upstream: builtin:echo\nrules:\n  - name: a\n    period: 1m\n    limit: 5\n"
	for _, tc := range []struct{ name, rest, want string }{
		{"unknown mode", "    algorithm: gcra\n    sync: eventual\n", `sync.yaml:7:11: rules[0].sync: want exact, lease or async, got "eventual"`},
		{"sliding", "    algorithm: sliding_log\n    sync: lease\n", "sync.yaml:7:11: rules[0].sync: "},
		{"interval without async", "    algorithm: gcra\n    sync: lease\n    sync_interval: 1s\n", "rules[0].sync_interval: sync_interval is only for sync: async"},
		{"interval too short", "    algorithm: gcra\n    sync: async\n    sync_interval: 10µs\n", "rules[0].sync_interval"},
		{"with a penalty", "    algorithm: gcra\n    sync: lease\n    penalty: { blocks: 1m, forget: 1h }\n", "rules[0].sync: "},
		{"calendar quota", "    algorithm: fixed_window\n    sync: lease\n    tiers: { pro: { period: month } }\n", "sync.yaml:7:11: rules[0].sync: rule \"a\": sync lease does not apply to a calendar quota (period month)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(head+tc.rest), "sync.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// store.redis.quota reaches the Redis store's lease options; every bound
// is refused at its line.
func TestStoreQuota(t *testing.T) {
	const head = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 5, period: 1m}]\nstore:\n  backend: redis\n  redis:\n    url: redis://127.0.0.1:6379\n"
	c, err := config.Parse([]byte(head+"    quota: {lease_rate: 200, lease_fraction: 2.5%, lease_ttl: 500ms}\n"), "q.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Store.Redis
	if r.LeaseRate != 200 || r.LeaseFraction != 0.025 || r.LeaseTTL != 500*time.Millisecond {
		t.Errorf("got lease_rate %d, lease_fraction %v, lease_ttl %v; want 200, 0.025, 500ms", r.LeaseRate, r.LeaseFraction, r.LeaseTTL)
	}
	for _, tc := range []struct{ name, quota, want string }{
		{"rate zero", "{lease_rate: 0}", "q.yaml:7:25: store.redis.quota.lease_rate: want a whole number from 1 to 1000000, got 0"},
		{"rate huge", "{lease_rate: 2000000}", "store.redis.quota.lease_rate: want a whole number from 1 to 1000000"},
		{"fraction zero", "{lease_fraction: 0%}", "q.yaml:7:29: store.redis.quota.lease_fraction: want more than 0%"},
		{"fraction over", "{lease_fraction: 150%}", "store.redis.quota.lease_fraction: want 0% to 100%"},
		{"fraction word", "{lease_fraction: half}", "store.redis.quota.lease_fraction: want a percentage"},
		{"fraction list", "{lease_fraction: [5]}", "store.redis.quota.lease_fraction: want a percentage of the limit such as 5%"},
		{"ttl short", "{lease_ttl: 1ms}", "q.yaml:7:24: store.redis.quota.lease_ttl: "},
		{"ttl long", "{lease_ttl: 2m}", "store.redis.quota.lease_ttl: "},
		{"unknown", "{lease_size: 5}", "store.redis.quota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(head+"    quota: "+tc.quota+"\n"), "q.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
