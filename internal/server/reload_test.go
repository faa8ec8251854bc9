package server_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

// A request finishes under the generation it started with; the store and
// its counters outlive generations; a failed reload changes nothing.
func TestGatewayReload(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	}))
	defer up.Close()
	var released bool
	defer func() {
		if !released {
			close(release)
		}
	}()
	rules := func(n int64) []httplimit.Rule {
		return []httplimit.Rule{
			{Name: "r", Limit: fixed(n, time.Hour)},
			{Name: "k", Match: httplimit.Match{Paths: []string{"/k"}}, Key: []httplimit.KeyPart{httplimit.Header("X-K")}, Limit: fixed(1, time.Hour)},
		}
	}
	opts := func(n int64) server.Options {
		return server.Options{Upstream: up.URL, ConfigHash: fmt.Sprint("h", n), Limiter: httplimit.Options{Rules: rules(n)}}
	}
	g, gw := startGW(t, opts(10))

	if r := get(t, "GET", g.url+"/k", map[string]string{"X-K": "a"}); r.StatusCode != 200 {
		t.Fatalf("/k: %d", r.StatusCode)
	}
	slow := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Get(g.url + "/slow")
		if err != nil {
			slow <- nil
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		slow <- resp
	}()
	select {
	case <-entered:
	case resp := <-slow:
		t.Fatalf("the slow request did not reach the upstream: %v", resp)
	}
	reload := func(o server.Options, err error) error {
		return gw.Reload(func() (server.Options, error) {
			o.Listen, o.Admin = "127.0.0.1:0", "127.0.0.1:0"
			return o, err
		})
	}
	if err := reload(opts(20), nil); err != nil {
		t.Fatal(err)
	}
	close(release)
	released = true
	if resp := <-slow; resp == nil || resp.Header.Get("RateLimit-Policy") != `"r";q=10;w=3600` {
		t.Errorf("the request in flight: %v; want it to finish under the rules it started with (q=10)", resp)
	}
	if r := get(t, "GET", g.url+"/", nil); r.Header.Get("RateLimit-Policy") != `"r";q=20;w=3600` {
		t.Errorf("a request after the reload: RateLimit-Policy %q, want q=20", r.Header.Get("RateLimit-Policy"))
	}
	if r := get(t, "GET", g.url+"/k", map[string]string{"X-K": "a"}); r.StatusCode != 429 {
		t.Errorf("/k after the reload: %d, want 429 (its counter kept)", r.StatusCode)
	}

	// Failures: a load error, and options that cannot be built.
	if err := reload(server.Options{}, errors.New("config: broken")); err == nil {
		t.Error("a load error: Reload succeeded")
	}
	dup := opts(30)
	dup.Limiter.Rules = append(dup.Limiter.Rules, dup.Limiter.Rules[0])
	if err := reload(dup, nil); err == nil || !strings.Contains(err.Error(), "two rules are named") {
		t.Errorf("duplicate rules: Reload returned %v", err)
	}
	if got := metric(t, g.admin, `sluice_config_reloads_total{result="failure"}`); got != "2" {
		t.Errorf("failed reloads = %q, want 2", got)
	}
	if got := metric(t, g.admin, `sluice_config_reloads_total{result="success"}`); got != "1" {
		t.Errorf("successful reloads = %q, want 1", got)
	}
	if got := metric(t, g.admin, `sluice_config_last_reload_successful`); got != "0" {
		t.Errorf("sluice_config_last_reload_successful after failed reloads = %q, want 0", got)
	}
	if r := get(t, "GET", g.url+"/", nil); r.Header.Get("RateLimit-Policy") != `"r";q=20;w=3600` {
		t.Errorf("after failed reloads: RateLimit-Policy %q, want the running q=20", r.Header.Get("RateLimit-Policy"))
	}

	// A setting that needs a restart is reported and kept; the rest applies.
	o := opts(40)
	o.Backend, o.MaxKeys = "memory", 5
	o.Redis.LeaseTTL = 3 * time.Second
	if err := reload(o, nil); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, g.admin, `sluice_config_last_reload_successful`); got != "1" {
		t.Errorf("sluice_config_last_reload_successful after a reload that applied = %q, want 1", got)
	}
	for _, setting := range []string{"store.max_keys", "store.redis.quota.lease_ttl"} {
		if !strings.Contains(g.logs.String(), `"setting":"`+setting+`"`) {
			t.Errorf("no WARN that %s needs a restart: %s", setting, g.logs.String())
		}
	}
	if got := metric(t, g.admin, "sluice_max_keys"); got != "1e+06" {
		t.Errorf("sluice_max_keys after the reload = %q, want the running 1e+06", got)
	}
	if r := get(t, "GET", g.url+"/", nil); r.Header.Get("RateLimit-Policy") != `"r";q=40;w=3600` {
		t.Errorf("after a reload with a restart-only change: RateLimit-Policy %q, want q=40", r.Header.Get("RateLimit-Policy"))
	}
	if got := metric(t, g.admin, `sluice_config_info{hash="h40"}`); got != "1" {
		t.Errorf("sluice_config_info for the running hash = %q, want 1", got)
	}

	// A new upstream applies.
	up2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Upstream", "2") }))
	defer up2.Close()
	o = opts(40)
	o.Upstream = up2.URL
	if err := reload(o, nil); err != nil {
		t.Fatal(err)
	}
	if r := get(t, "GET", g.url+"/", nil); r.Header.Get("X-Upstream") != "2" {
		t.Errorf("after a reload to another upstream: %d %v; want the new upstream's answer", r.StatusCode, r.Header)
	}
}

func TestGatewayLogsRedisRecovery(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	g := start(t, server.Options{Backend: "redis", Redis: redisstore.Options{URL: srv.URL()}, Limiter: httplimit.Options{Rules: []httplimit.Rule{
		{Name: "r", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Hour}},
	}}})
	srv.Restart(t)
	g.logs.waitFor(t, "the log of Redis's recovery", func(log string) bool { return strings.Contains(log, "Redis recovered") })
	g.stop()
	if !strings.Contains(g.logs.String(), `"msg":"sluice stopped"`) {
		t.Errorf("no log of the end of the shutdown: %s", g.logs.String())
	}
}
