package config_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/config"
)

// A file with only a service section runs no gateway and needs no rules;
// its descriptor files are read relative to the config file.
func TestServiceOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rl"), 0o755); err != nil {
		t.Fatal(err)
	}
	desc := "domain: api\ndescriptors:\n  - key: client\n    rate_limit: { unit: second, requests_per_unit: 5 }\n"
	if err := os.WriteFile(filepath.Join(dir, "rl", "api.yaml"), []byte(desc), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "sluice.yaml")
	cfgText := "service:\n  grpc: 127.0.0.1:8081\n  http: 127.0.0.1:8082\n  descriptors: rl\n  on_store_error: on_error\n  headers: [ietf, legacy]\n  anchor: billing_anchor\n"
	if err := os.WriteFile(file, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Service
	if c.Gateway() || s == nil || s.GRPC != "127.0.0.1:8081" || s.HTTP != "127.0.0.1:8082" || !s.DecideOnError ||
		strings.Join(s.Headers, ",") != "ietf,legacy" || s.Rules == nil || s.Anchor != "billing_anchor" {
		t.Fatalf("got gateway %v, service %+v", c.Gateway(), s)
	}
	m := s.Rules.Match("api", []descriptor.Entry{{Key: "client", Value: "a"}})
	if m.Rule == nil || m.Rule.Policy == nil {
		t.Fatalf("the loaded tree has no limit for client: %+v", m)
	}
	files, err := s.Files(file)
	if err != nil || len(files) != 1 || !strings.HasSuffix(files[0], "api.yaml") {
		t.Errorf("Files: got %v, %v", files, err)
	}

	// Parse alone reads no descriptor file.
	c, err = config.Parse([]byte(cfgText), file)
	if err != nil || c.Service.Rules != nil {
		t.Errorf("Parse: got %v, rules %v", err, c.Service.Rules)
	}
	// A problem in a descriptor file names that file and its line.
	if err := os.WriteFile(filepath.Join(dir, "rl", "api.yaml"), []byte(desc+"  - key: client\n    rate_limit: { unit: fortnight, requests_per_unit: 5 }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(file); err == nil || !strings.Contains(err.Error(), "api.yaml:6:") {
		t.Errorf("a bad descriptor file: got %v, want its name and line 6", err)
	}
}

// service.headers' envoy sends envoyproxy/ratelimit's headers, under its
// default names or those service.envoy_headers gives, which may be the
// legacy set's names while that set is off.
func TestServiceEnvoyHeaders(t *testing.T) {
	for _, tc := range []struct {
		file string
		want config.EnvoyHeaders
	}{
		{"service: { grpc: 127.0.0.1:1, descriptors: x, headers: [ietf, envoy] }\n", config.DefaultEnvoyHeaders},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, headers: [envoy, retry_after], envoy_headers: { limit: X-RateLimit-Limit, remaining: X-RateLimit-Remaining, reset: X-RateLimit-Reset } }\n",
			config.EnvoyHeaders{Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining", Reset: "X-RateLimit-Reset"}},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, headers: [envoy], envoy_headers: { reset: Quota-Reset } }\n",
			config.EnvoyHeaders{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "Quota-Reset"}},
	} {
		c, err := config.Parse([]byte(tc.file), "s.yaml")
		if err != nil {
			t.Errorf("%q: %v", tc.file, err)
			continue
		}
		if !slices.Contains(c.Service.Headers, "envoy") || c.Service.EnvoyHeaders != tc.want {
			t.Errorf("%q: got headers %v named %+v, want envoy named %+v", tc.file, c.Service.Headers, c.Service.EnvoyHeaders, tc.want)
		}
	}
}

func TestServiceProblems(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"service: { grpc: 127.0.0.1:1 }\n", "service.descriptors: missing"},
		{"service: { descriptors: x }\n", "service: want grpc, http or both"},
		{"service: { grpc: nope, descriptors: x }\n", "service.grpc: want host:port"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, on_store_error: deny }\n", "service.on_store_error: want unavailable"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, headers: [ietf, none] }\n", "service.headers: none cannot be combined"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, headers: [loud] }\n", "service.headers[0]: want ietf, legacy, retry_after, envoy or none"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, envoy_headers: { limit: X-Limit } }\n", "service.envoy_headers: names the headers of service.headers' envoy, which is not on"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, headers: [envoy], envoy_headers: { limit: 'X Limit' } }\n", `service.envoy_headers.limit: want a header name, such as X-RateLimit-Limit, got "X Limit"`},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, headers: [envoy], envoy_headers: { limt: X-Limit } }\n", `service.envoy_headers.limt: unknown field (did you mean "limit"?)`},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, headers: [envoy, legacy], envoy_headers: { reset: x-ratelimit-reset } }\n", "service.envoy_headers.reset: x-ratelimit-reset is already a header of service.headers' legacy"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, headers: [envoy], envoy_headers: { limit: RateLimit-Reset } }\n", "service.envoy_headers.reset: RateLimit-Reset is already the name of service.envoy_headers.limit"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, grcp: 1 }\n", `service.grcp: unknown field (did you mean "grpc"?)`},
		{"service: { grpc: 127.0.0.1:9090, descriptors: x }\n", "service.grpc: 127.0.0.1:9090 takes the port of server.admin"},
		{"service: { grpc: 127.0.0.1:7000, http: 127.0.0.1:7000, descriptors: x }\n", "service.http: 127.0.0.1:7000 takes the port of service.grpc"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x }\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n", "rules: only the gateway (upstream) and forward-auth"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, anchor: \"\" }\n", "s.yaml:1:55: service.anchor: want the key of a descriptor entry"},
		{"service: { grpc: 127.0.0.1:1, descriptors: x, anchor: [a] }\n", "service.anchor: want a string"},
		{"store: { backend: memory }\n", "upstream: missing: want upstream (the gateway"},
		{"upstream: builtin:echo\n", "rules: missing"},
	} {
		_, err := config.Parse([]byte(tc.file), "s.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a problem containing %q", tc.file, err, tc.want)
		}
	}
}

// A limit the Redis store cannot run (a period that is not a whole number
// of microseconds) is a problem of the file when the backend is redis, in
// the rules, their tiers and the service's descriptor files alike; it used
// to pass check-config and then fail open on every request.
func TestRedisCannotRunIsAProblem(t *testing.T) {
	const redis = "store: { backend: redis, redis: { url: 'redis://127.0.0.1:1' } }\n"
	for _, tc := range []struct{ file, want string }{
		{redis + "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1500ns}]\n", "s.yaml:3:54: rules[0].period: redisstore: unsupported limit"},
		{redis + "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s, tiers: {p: {period: 2001ns}}}]\n", "rules[0].tiers.p.period: redisstore: unsupported limit"},
	} {
		_, err := config.Parse([]byte(tc.file), "s.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a problem containing %q", tc.file, err, tc.want)
		}
		// The memory store runs any period.
		if _, err := config.Parse([]byte(strings.Replace(tc.file, "backend: redis, redis: { url: 'redis://127.0.0.1:1' }", "backend: memory", 1)), "s.yaml"); err != nil {
			t.Errorf("memory backend: %v", err)
		}
	}

	dir := t.TempDir()
	desc := "domain: api\ndescriptors:\n  - key: client\n    rate_limit: { requests_per_unit: 5, period: 1500ns }\n"
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(desc), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(file, []byte(redis+"service: { grpc: 127.0.0.1:8081, descriptors: api.yaml }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(file); err == nil || !strings.Contains(err.Error(), "api.yaml:4:") || !strings.Contains(err.Error(), "unsupported limit") {
		t.Errorf("descriptor file: got %v, want a problem at api.yaml:4", err)
	}
}

// store.redis.hash_keys turns on hashed key names, and hash_secret_file's
// secret is read relative to the config file.
func TestRedisHashKeys(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "s.yaml")
	text := "store: { backend: redis, redis: { url: 'redis://127.0.0.1:1', hash_keys: true, hash_secret_file: secret } }\nupstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Store.Redis.HashKeys || string(c.Store.Redis.HashSecret) != "0123456789abcdef0123" {
		t.Errorf("got HashKeys %v, secret %q", c.Store.Redis.HashKeys, c.Store.Redis.HashSecret)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(file); err == nil || !strings.Contains(err.Error(), "store.redis.hash_secret_file") {
		t.Errorf("a short secret: got %v", err)
	}
}

// TestServiceLists: service.deny and service.allow apply the lists
// section's lists, inline and from files, to descriptor entries; a key
// list needs no key for the service.
func TestServiceLists(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "api.yaml"), "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: second, requests_per_unit: 5 }\n")
	writeFile(t, filepath.Join(dir, "bad.txt"), "# abusers\n192.0.2.0/24\n2001:db8::/32\n")
	file := filepath.Join(dir, "sluice.yaml")
	writeFile(t, file, `lists:
  bad-ips: { cidrs_file: bad.txt }
  partners: { keys: [k-acme, k-globex] }
service:
  grpc: 127.0.0.1:8081
  descriptors: api.yaml
  deny: { remote_address: bad-ips }
  allow: { api_key: [partners] }
`)
	c, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	set := c.Service.Rules
	for _, tt := range []struct {
		entries       []descriptor.Entry
		denied, allow string
	}{
		{[]descriptor.Entry{{Key: "remote_address", Value: "192.0.2.77"}}, "bad-ips", ""},
		{[]descriptor.Entry{{Key: "path", Value: "/"}, {Key: "remote_address", Value: "2001:db8::1"}}, "bad-ips", ""},
		{[]descriptor.Entry{{Key: "remote_address", Value: "198.51.100.1"}}, "", ""},
		{[]descriptor.Entry{{Key: "remote_address", Value: "not an address"}}, "", ""},
		{[]descriptor.Entry{{Key: "api_key", Value: "k-acme"}}, "", "partners"},
		{[]descriptor.Entry{{Key: "api_key", Value: "192.0.2.1"}}, "", ""},
		{[]descriptor.Entry{{Key: "user", Value: "k-acme"}}, "", ""},
	} {
		d, _ := set.Denied(tt.entries)
		a, _ := set.AllowListedBy(tt.entries)
		if d != tt.denied || a != tt.allow {
			t.Errorf("%v: denied by %q, allowed by %q; want %q, %q", tt.entries, d, a, tt.denied, tt.allow)
		}
	}
	if got := c.ListFiles(file); len(got) != 1 || !strings.HasSuffix(got[0], "bad.txt") {
		t.Errorf("ListFiles: got %v, want the deny list's file, watched for reloads", got)
	}
}

func TestServiceListsProblems(t *testing.T) {
	const base = "lists: { a: { cidrs: [10.0.0.0/8] }, k: { keys: [x] } }\n"
	for _, tt := range []struct {
		name, file string
		want       []string
	}{
		{"unknown list", "service: { grpc: 127.0.0.1:1, descriptors: d, deny: { remote_address: [b] } }",
			[]string{`service.deny.remote_address[0]: unknown list "b" (the lists are a, k)`}},
		{"not a mapping", "service: { grpc: 127.0.0.1:1, descriptors: d, allow: [a] }",
			[]string{"service.allow: want a mapping from a descriptor entry key to list names"}},
		{"empty names", "service: { grpc: 127.0.0.1:1, descriptors: d, allow: { api_key: [] } }",
			[]string{"service.allow.api_key: empty: name at least one list"}},
		{"top-level deny without gateway", "deny: [a]\nservice: { grpc: 127.0.0.1:1, descriptors: d }",
			[]string{"deny: only the gateway (upstream) and forward-auth (server.forward_auth) apply deny lists, and the file enables neither (the rate-limit service takes service.deny)"}},
		{"gateway key list without key", "upstream: builtin:echo\ndeny: [k]\nrules: [{ name: r, algorithm: gcra, limit: 1, period: 1s }]",
			[]string{`deny[0]: list "k" has keys but no key`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(base+tt.file), "c.yaml")
			if err == nil {
				t.Fatal("got no error")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Errorf("got %d problems, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, w := range tt.want {
				if i < len(lines) && !strings.Contains(lines[i], w) {
					t.Errorf("problem %d: got %q, want it to contain %q", i, lines[i], w)
				}
			}
		})
	}
}
