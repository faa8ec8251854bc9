package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

// What each backend shows an operator, whole: its metrics' names, types
// and help texts, its readiness, its log lines and its errors. They stay
// as they are whichever code opens the store.
func TestStoreSurface(t *testing.T) {
	rules := httplimit.Options{Rules: []httplimit.Rule{
		{Name: "per-key", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")}, Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Hour}},
	}}
	t.Run("memory", func(t *testing.T) {
		g := start(t, server.Options{MaxKeys: 64, Limiter: rules})
		want := []string{
			"# HELP sluice_evicted_keys_total Entries the in-memory store evicted to stay within max_keys while their state still mattered; while it rises, clients may get more than their limits.",
			"# TYPE sluice_evicted_keys_total counter",
			"# HELP sluice_live_keys Entries held by the in-memory store, one per limit per key.",
			"# TYPE sluice_live_keys gauge",
			"# HELP sluice_max_keys The most entries the in-memory store keeps (max_keys).",
			"# TYPE sluice_max_keys gauge",
			"# HELP sluice_store_errors_total Failed store operations, by backend.",
			"# TYPE sluice_store_errors_total counter",
		}
		if got := help(t, g.admin); !equal(got, want) {
			t.Errorf("metrics:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if got := metric(t, g.admin, `sluice_store_errors_total{backend="memory"}`); got != "0" {
			t.Errorf(`sluice_store_errors_total{backend="memory"}: %q, want 0`, got)
		}
		if got := readAll(get(t, "GET", g.admin+"/readyz?strict", nil)); got != "ready\n" {
			t.Errorf("readyz: %q", got)
		}
	})
	t.Run("redis down", func(t *testing.T) {
		srv := redistest.Start(t)
		srv.Stop()
		g := start(t, server.Options{Backend: "redis", Redis: redisstore.Options{URL: srv.URL()}, Limiter: rules})
		want := []string{
			"# HELP sluice_evicted_keys_total Entries the in-memory fallback store (Redis keeps the shared state) evicted to stay within max_keys while their state still mattered; while it rises, clients may get more than their limits.",
			"# TYPE sluice_evicted_keys_total counter",
			"# HELP sluice_live_keys Entries held by the in-memory fallback store (Redis keeps the shared state), one per limit per key.",
			"# TYPE sluice_live_keys gauge",
			"# HELP sluice_max_keys The most entries the in-memory fallback store (Redis keeps the shared state) keeps (max_keys).",
			"# TYPE sluice_max_keys gauge",
			"# HELP sluice_quota_leased_unused Units this gateway holds in live quota leases (sync: lease) and has not spent: what other gateways' clients may be refused while they are held.",
			"# TYPE sluice_quota_leased_unused gauge",
			"# HELP sluice_quota_local_decisions_total Decisions of sync: lease and async rules made without calling Redis.",
			"# TYPE sluice_quota_local_decisions_total counter",
			"# HELP sluice_quota_redis_calls_total Calls to Redis for sync: lease and async rules (leases, returns, syncs and the decisions of keys not hot), failed ones included.",
			"# TYPE sluice_quota_redis_calls_total counter",
			"# HELP sluice_store_degraded 1 while decisions follow on_error without calling Redis: the circuit breaker is open, or Redis has not answered since the start.",
			"# TYPE sluice_store_degraded gauge",
			"# HELP sluice_store_errors_total Failed store operations, by backend.",
			"# TYPE sluice_store_errors_total counter",
		}
		if got := help(t, g.admin); !equal(got, want) {
			t.Errorf("metrics:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if got := readAll(get(t, "GET", g.admin+"/readyz?strict", nil)); got != "store not ready: deciding per on_error (local): Redis is unreachable, or its return is not yet confirmed\n" {
			t.Errorf("readyz?strict: %q", got)
		}
		if got := readAll(get(t, "GET", g.admin+"/readyz", nil)); got != "ready, degraded: deciding per on_error (local): Redis is unreachable, or its return is not yet confirmed\n" {
			t.Errorf("readyz: %q", got)
		}
		if r := get(t, "GET", g.url+"/", map[string]string{"X-API-Key": "k"}); r.StatusCode != 200 {
			t.Errorf("a request with Redis down: %d, want 200 (on_error local)", r.StatusCode)
		}
		if got := metric(t, g.admin, `sluice_store_errors_total{backend="redis"}`); got == "" || got == "0" {
			t.Errorf(`sluice_store_errors_total{backend="redis"}: %q, want the failures counted`, got)
		}
		var lines []string
		for _, l := range strings.Split(g.logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) != nil || rec["level"] != "WARN" {
				continue
			}
			_, hasErr := rec["error"]
			line := fmt.Sprintf("%v on_error=%v", rec["msg"], rec["on_error"])
			if hasErr {
				line += " error=…"
			}
			lines = append(lines, line)
		}
		wantLogs := []string{
			"Redis unreachable at start; deciding per on_error until it answers on_error=local error=…",
			// The overrides are kept in Redis too.
			"reading the per-client overrides failed; the last ones read stay in force on_error=<nil> error=…",
			"Redis failed; deciding per on_error on_error=local error=…",
		}
		if len(lines) < len(wantLogs) || !equal(lines[:len(wantLogs)], wantLogs) {
			t.Errorf("warnings:\n%s\nwant first\n%s", strings.Join(lines, "\n"), strings.Join(wantLogs, "\n"))
		}
	})
	t.Run("unknown", func(t *testing.T) {
		_, err := server.New(server.Options{Backend: "mongo", Upstream: server.EchoUpstream, Limiter: rules})
		if err == nil || err.Error() != `server: unknown store backend "mongo" (want memory or redis)` {
			t.Errorf("got %v", err)
		}
	})
}

// help returns the HELP and TYPE lines of the store's metrics.
func help(t *testing.T, admin string) []string {
	t.Helper()
	resp := get(t, "GET", admin+"/metrics", nil)
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		for _, name := range []string{"sluice_evicted_keys_total", "sluice_live_keys", "sluice_max_keys", "sluice_quota_", "sluice_store_"} {
			if strings.HasPrefix(l, "# HELP "+name) || strings.HasPrefix(l, "# TYPE "+name) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

func equal(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }
