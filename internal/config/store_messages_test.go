package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// storeMessages are files with mistakes in the store section, or in what
// the chosen store cannot run, each with every problem check-config
// reports for it, whole and in order: the wording, the paths, the lines
// and the columns are what users see, and stay as they are whichever code
// decodes the store section.
var storeMessages = []struct{ name, file, want string }{
	{"unknown backend", "store: {backend: mongo}\n",
		`s.yaml:1:18: store.backend: want memory or redis, got "mongo"`},
	{"backend not a string", "store: {backend: [redis]}\n",
		`s.yaml:1:18: store.backend: want a string, got a list`},
	{"redis without its section", "store: {backend: redis}\n",
		`s.yaml:1:8: store.redis: missing: the redis backend needs a url, or addrs for a cluster or Sentinel`},
	{"redis section on memory", "store: {redis: {url: 'redis://x:1'}}\n",
		`s.yaml:1:16: store.redis: only for backend redis; the backend is memory`},
	{"redis section before an explicit memory", "store:\n  redis: {url: 'redis://x:1'}\n  backend: memory\n",
		`s.yaml:2:10: store.redis: only for backend redis; the backend is memory`},
	{"misspelt field", "store: {bakend: redis}\n",
		`s.yaml:1:9: store.bakend: unknown field (did you mean "backend"?)`},
	{"unknown field", "store: {frobnicate: 1}\n",
		`s.yaml:1:9: store.frobnicate: unknown field (want one of backend, max_keys, redis, on_error)`},
	{"field twice", "store: {backend: memory, backend: redis}\n",
		`s.yaml:1:26: store.backend: appears twice`},
	{"store not a mapping", "store: 5\n",
		`s.yaml:1:8: store: want a mapping of backend, max_keys, redis, on_error, got "5"`},
	{"max_keys", "store: {max_keys: 0}\n",
		`s.yaml:1:19: store.max_keys: want a whole number from 1 to 1000000000, got 0`},
	{"on_error", "store: {on_error: maybe}\n",
		`s.yaml:1:19: store.on_error: want allow, deny or local, got "maybe"`},
	{"redis not a mapping", "store: {backend: redis, redis: 5}\n",
		`s.yaml:1:32: store.redis: want a mapping of url, addrs, master_set, username, password, db, timeout, prefix, hash_keys, hash_secret_file, quota, got "5"`},
	{"redis empty", "store: {backend: redis, redis: {}}\n",
		`s.yaml:1:32: store.redis: want url, or addrs for a cluster or Sentinel`},
	{"redis null", "store: {backend: redis, redis: ~}\n",
		`s.yaml:1:32: store.redis: want url, or addrs for a cluster or Sentinel`},
	{"redis misspelt", "store: {backend: redis, redis: {urll: 'redis://x:1'}}\n",
		`s.yaml:1:33: store.redis.urll: unknown field (did you mean "url"?)` + "\n" +
			"s.yaml:1:32: store.redis: want url, or addrs for a cluster or Sentinel"},
	{"redis url scheme", "store: {backend: redis, redis: {url: 'http://x:1'}}\n",
		"s.yaml:1:38: store.redis.url: want a redis://, rediss:// or unix:// URL\n" +
			"s.yaml:1:32: store.redis: want url, or addrs for a cluster or Sentinel"},
	{"redis addrs", "store: {backend: redis, redis: {addrs: [a, 'b:1', 7]}}\n",
		`s.yaml:1:41: store.redis.addrs[0]: want host:port, got "a"` + "\n" +
			`s.yaml:1:51: store.redis.addrs[2]: want host:port, got "7"`},
	{"redis url and addrs", "store: {backend: redis, redis: {url: 'redis://x:1', addrs: ['b:1']}}\n",
		`s.yaml:1:32: store.redis: give url or addrs, not both`},
	{"redis scalars", "store:\n  backend: redis\n  redis:\n    url: redis://x:1\n    master_set: [a]\n    username: {}\n    password: ~\n    db: -1\n    timeout: 0s\n    prefix: 'a b'\n    hash_keys: maybe\n    hash_secret_file: ''\n",
		"s.yaml:5:17: store.redis.master_set: want a string, got a list\n" +
			"s.yaml:6:15: store.redis.username: want a string, got a mapping\n" +
			"s.yaml:7:15: store.redis.password: want a string, got nothing\n" +
			"s.yaml:8:9: store.redis.db: want a whole number from 0 to 1048576, got -1\n" +
			"s.yaml:9:14: store.redis.timeout: want a duration from 1ms to 1m0s, got 0s\n" +
			`s.yaml:10:13: store.redis.prefix: want 1 to 64 characters without braces or spaces, got "a b"` + "\n" +
			`s.yaml:11:16: store.redis.hash_keys: want true or false, got "maybe"` + "\n" +
			"s.yaml:12:23: store.redis.hash_secret_file: want the path of a file holding the secret"},
	{"redis timeout without a unit", "store: {backend: redis, redis: {url: 'redis://x:1', timeout: 50}}\n",
		`s.yaml:1:62: store.redis.timeout: want a duration with a unit, such as 50s, got 50`},
	{"quota", "store:\n  backend: redis\n  redis:\n    url: redis://x:1\n    quota: {lease_rate: 0, lease_fraction: 0%, lease_ttl: 1ms, lease_size: 5}\n",
		"s.yaml:5:25: store.redis.quota.lease_rate: want a whole number from 1 to 1000000, got 0\n" +
			"s.yaml:5:44: store.redis.quota.lease_fraction: want more than 0%: a lease of nothing leases nothing\n" +
			"s.yaml:5:59: store.redis.quota.lease_ttl: want a duration from 10ms to 1m0s, got 1ms\n" +
			`s.yaml:5:64: store.redis.quota.lease_size: unknown field (want one of lease_rate, lease_fraction, lease_ttl)`},
	{"quota fractions", "store:\n  backend: redis\n  redis:\n    url: redis://x:1\n    quota: {lease_fraction: 150%}\n",
		`s.yaml:5:29: store.redis.quota.lease_fraction: want 0% to 100%, got "150%"`},
	{"quota fraction word", "store:\n  backend: redis\n  redis:\n    url: redis://x:1\n    quota: {lease_fraction: half}\n",
		`s.yaml:5:29: store.redis.quota.lease_fraction: want a percentage such as 25% or 0.5%, got "half"`},
	{"quota fraction digits", "store:\n  backend: redis\n  redis:\n    url: redis://x:1\n    quota: {lease_fraction: 1.23456%}\n",
		`s.yaml:5:29: store.redis.quota.lease_fraction: "1.23456%" has more than 4 digits after the point`},
	// An alias is reported where it is used.
	{"quota fraction alias", "x: &five [5]\nstore:\n  backend: redis\n  redis:\n    url: redis://x:1\n    quota:\n      lease_fraction: *five\n",
		"s.yaml:1:1: x: unknown field (want one of server, upstream, service, store, client_ip, headers, tiers, priority, rules, log, admin, lists, deny, identity, tracing)\n" +
			"s.yaml:7:23: store.redis.quota.lease_fraction: want a percentage of the limit such as 5%, got a list"},
	{"quota not a mapping", "store:\n  backend: redis\n  redis:\n    url: redis://x:1\n    quota: 5\n",
		`s.yaml:5:12: store.redis.quota: want a mapping of lease_rate, lease_fraction, lease_ttl, got "5"`},
	{"problems in order", "store:\n  redis: {url: 'http://x'}\n  on_error: never\n  backend: memory\n  max_keys: -1\n",
		"s.yaml:2:16: store.redis.url: want a redis://, rediss:// or unix:// URL\n" +
			"s.yaml:2:10: store.redis: want url, or addrs for a cluster or Sentinel\n" +
			`s.yaml:3:13: store.on_error: want allow, deny or local, got "never"` + "\n" +
			"s.yaml:5:13: store.max_keys: want a whole number from 1 to 1000000000, got -1\n" +
			"s.yaml:2:10: store.redis: only for backend redis; the backend is memory"},
}

// Every problem of the store section, whole, in order and at its place.
func TestStoreMessages(t *testing.T) {
	const tail = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"
	for _, tc := range storeMessages {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.file+tail), "s.yaml")
			if err == nil || err.Error() != tc.want {
				t.Errorf("got\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

// What the chosen store cannot run, and what only a store shared by the
// gateways can do, are problems reported whole at their places.
func TestStoreLimitMessages(t *testing.T) {
	const redis = "store: { backend: redis, redis: { url: 'redis://127.0.0.1:1' } }\nupstream: builtin:echo\n"
	for _, tc := range []struct{ name, file, want string }{
		{"rule period", redis + "rules: [{name: a, algorithm: gcra, limit: 1, period: 1500ns}]\n",
			"s.yaml:3:54: rules[0].period: redisstore: unsupported limit: period 1.5µs is not a whole number of microseconds (Redis keeps time in microseconds)"},
		{"tier period", redis + "rules:\n  - {name: a, algorithm: gcra, limit: 1, period: 1s, tiers: {p: {period: 2001ns}, q: {limit: 3}}}\n",
			"s.yaml:4:74: rules[0].tiers.p.period: redisstore: unsupported limit: period 2.001µs is not a whole number of microseconds (Redis keeps time in microseconds)"},
		{"fleet on memory", "upstream: builtin:echo\nrules: [{name: a, concurrency: adaptive, adaptive: {fleet: 10}, lease: 1m}]\n",
			"s.yaml:2:60: rules[0].adaptive.fleet: a fleet limit is shared by the gateways through Redis (store.backend: redis); with the memory store there is one gateway, whose own limit is the rule's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.file), "s.yaml")
			if err == nil || err.Error() != tc.want {
				t.Errorf("got\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

// The files the store section and the service name are read, and their
// problems reported, as before.
func TestStoreFileMessages(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("short", "0123\n")
	write("api.yaml", "domain: api\ndescriptors:\n  - key: client\n    rate_limit: { requests_per_unit: 5, period: 1500ns }\n")
	const rule = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"
	for _, tc := range []struct{ name, file, want string }{
		{"no secret file", "store: { backend: redis, redis: { url: 'redis://127.0.0.1:1', hash_secret_file: nope } }\n" + rule,
			"config: store.redis.hash_secret_file: open DIR/nope: no such file or directory"},
		{"short secret", "store: { backend: redis, redis: { url: 'redis://127.0.0.1:1', hash_secret_file: short } }\n" + rule,
			"config: store.redis.hash_secret_file: the secret in DIR/short is 4 bytes; want at least 16 (such as the output of: openssl rand -hex 32)"},
		{"descriptor period on redis", "store: { backend: redis, redis: { url: 'redis://127.0.0.1:1' } }\nservice: { grpc: 127.0.0.1:8081, descriptors: api.yaml }\n",
			"DIR/api.yaml:4:49: descriptors[0].rate_limit.period: redisstore: unsupported limit: period 1.5µs is not a whole number of microseconds (Redis keeps time in microseconds)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(write("sluice.yaml", tc.file))
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			if err == nil || err.Error() != want {
				t.Errorf("got\n%v\nwant\n%s", err, want)
			}
		})
	}
}
