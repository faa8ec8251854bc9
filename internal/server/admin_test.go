package server_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

const token = "0123456789abcdef-test-token"

// startGW is start on ports of its own, keeping the gateway for Reload.
func startGW(t *testing.T, opts server.Options) (*running, *server.Server) {
	t.Helper()
	opts.Listen, opts.Admin = "127.0.0.1:0", "127.0.0.1:0"
	return launch(t, opts, slog.LevelInfo)
}

func adminOptions() server.Options {
	return server.Options{AdminToken: []byte(token), Limiter: httplimit.Options{
		Tiers: httplimit.Tiers{From: httplimit.Header("X-API-Key"), Keys: map[string]string{"k-gold": "premium"}},
		Rules: []httplimit.Rule{
			{Name: "health", Match: httplimit.Match{Paths: []string{"/healthz"}}, Action: httplimit.Exempt},
			{Name: "login", Match: httplimit.Match{Paths: []string{"/login"}}, Limit: fixed(5, time.Hour)},
			{Name: "api", Match: httplimit.Match{Paths: []string{"/api"}}, Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")},
				Limit: fixed(2, time.Hour), Tiers: map[string]sluice.Limit{"premium": fixed(4, time.Hour)}},
		},
	}}
}

// call sends a JSON request to the admin API with the token.
func call(t *testing.T, method, url, body string) (int, map[string]any, http.Header) {
	t.Helper()
	return callWith(t, method, url, body, token)
}

func callWith(t *testing.T, method, url, body, tok string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, url, b, err)
		}
	}
	return resp.StatusCode, m, resp.Header
}

// allowed sends n requests and counts the 200s.
func allowed(t *testing.T, url, apiKey string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if get(t, "GET", url, map[string]string{"X-API-Key": apiKey}).StatusCode == 200 {
			ok++
		}
	}
	return ok
}

// state returns the used and remaining fields of the i-th limit of a show.
func state(t *testing.T, m map[string]any, i int) (used, remaining float64, tier string) {
	t.Helper()
	ls, _ := m["limits"].([]any)
	if len(ls) <= i {
		t.Fatalf("show: want at least %d limits, got %v", i+1, m)
	}
	l := ls[i].(map[string]any)
	st := l["state"].(map[string]any)
	tier, _ = l["tier"].(string)
	return st["used"].(float64), st["remaining"].(float64), tier
}

func TestAdminAPIAuth(t *testing.T) {
	g, _ := startGW(t, adminOptions())
	for _, tok := range []string{"", "wrong-token-wrong-token", token + "x"} {
		code, m, h := callWith(t, "GET", g.admin+"/admin/v1/clients", "", tok)
		if code != 401 || m["status"] != 401.0 || h.Get("Content-Type") != "application/problem+json" || h.Get("WWW-Authenticate") == "" {
			t.Errorf("token %q: %d %v %v; want a 401 problem with WWW-Authenticate", tok, code, m, h)
		}
	}
	if code, _, _ := call(t, "GET", g.admin+"/admin/v1/clients", ""); code != 200 {
		t.Errorf("with the token: %d", code)
	}
	off, _ := startGW(t, server.Options{Limiter: adminOptions().Limiter})
	if code, m, _ := call(t, "GET", off.admin+"/admin/v1/clients", ""); code != 404 || !strings.Contains(m["detail"].(string), "admin.api") {
		t.Errorf("API off: %d %v; want 404 naming admin.api", code, m)
	}
	// /metrics stays open: Prometheus needs no token.
	if r := get(t, "GET", g.admin+"/metrics", nil); r.StatusCode != 200 {
		t.Errorf("/metrics: %d", r.StatusCode)
	}
}

func TestAdminAPIKeys(t *testing.T) {
	g, _ := startGW(t, adminOptions())
	for range 2 {
		get(t, "GET", g.url+"/login", nil)
	}
	show := `{"rule":"login","key":["127.0.0.1"]}`
	for range 2 { // showing charges nothing
		code, m, _ := call(t, "POST", g.admin+"/admin/v1/keys/show", show)
		if code != 200 {
			t.Fatalf("show: %d %v", code, m)
		}
		if used, rem, _ := state(t, m, 0); used != 2 || rem != 3 {
			t.Errorf("show: used %v, remaining %v; want 2 and 3", used, rem)
		}
	}
	// The same key, from a description of a request.
	code, m, _ := call(t, "POST", g.admin+"/admin/v1/keys/show", `{"request":{"method":"GET","path":"/login","remote_addr":"127.0.0.1:5555"}}`)
	if code != 200 {
		t.Fatalf("show request: %d %v", code, m)
	}
	if used, _, _ := state(t, m, 0); used != 2 {
		t.Errorf("show request: used %v, want 2", used)
	}
	// Without a rule, a key of one value reaches every rule keyed by one part.
	code, m, _ = call(t, "POST", g.admin+"/admin/v1/keys/reset", `{"key":["127.0.0.1"]}`)
	if code != 200 || len(m["reset"].([]any)) != 2 {
		t.Fatalf("reset: %d %v; want login and api", code, m)
	}
	_, m, _ = call(t, "POST", g.admin+"/admin/v1/keys/show", show)
	if used, rem, _ := state(t, m, 0); used != 0 || rem != 5 {
		t.Errorf("after reset: used %v, remaining %v; want 0 and 5", used, rem)
	}

	big := `{"rule":"login","key":["` + strings.Repeat("x", 70<<10) + `"]}`
	for _, c := range []struct {
		body   string
		code   int
		detail string
	}{
		{`{"rule":"nope","key":["1.2.3.4"]}`, 404, `no rule is named "nope"`},
		{`{"rule":"login","key":["1.2.3.4","x"]}`, 400, "want 1 values, got 2"},
		{`{"rule":"login","key":["not-an-ip"]}`, 400, "not an IP address"},
		{`{"rule":"health","key":[]}`, 400, "exempt"},
		{`{"key":["a","b","c"]}`, 400, "no rule is keyed by 3 values"},
		{`{}`, 400, "give key"},
		{`{"rule":"login","key":["1.2.3.4"],"extra":1}`, 400, "unknown field"},
		{`{"request":{"path":"login","remote_addr":"1.2.3.4"}}`, 400, "starting with /"},
		{`{"request":{"path":"/login"}}`, 400, "remote_addr"},
		{big, 413, "larger than"},
	} {
		code, m, h := call(t, "POST", g.admin+"/admin/v1/keys/show", c.body)
		if code != c.code || !strings.Contains(m["detail"].(string), c.detail) || h.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%.60s: %d %v; want %d with %q", c.body, code, m["detail"], c.code, c.detail)
		}
	}
}

func TestAdminAPIOverrides(t *testing.T) {
	opts := adminOptions()
	g, gw := startGW(t, opts)
	base := g.admin + "/admin/v1/clients/"
	if n := allowed(t, g.url+"/api", "k-1", 10); n != 2 {
		t.Fatalf("free client: %d allowed, want 2", n)
	}
	// A tier for a client, ahead of tiers.keys.
	code, m, _ := call(t, "PATCH", base+"k-2", `{"tier":"premium"}`)
	if code != 200 || m["tier"] != "premium" {
		t.Fatalf("set tier: %d %v", code, m)
	}
	if n := allowed(t, g.url+"/api", "k-2", 10); n != 4 {
		t.Errorf("client set to premium: %d allowed, want 4", n)
	}
	// Limits of its own, for a client whose tier comes from tiers.keys,
	// kept beside its tier by a second PATCH.
	if code, m, _ := call(t, "PATCH", base+"k-gold", `{"limits":{"api":{"limit":7,"period":"1h"}},"until":"2999-01-01T00:00:00Z"}`); code != 200 {
		t.Fatalf("set limit: %d %v", code, m)
	}
	if n := allowed(t, g.url+"/api", "k-gold", 10); n != 7 {
		t.Errorf("client with its own limit: %d allowed, want 7", n)
	}
	_, m, _ = call(t, "POST", g.admin+"/admin/v1/keys/show", `{"rule":"api","key":["k-gold"],"client":"k-gold"}`)
	if used, _, tier := state(t, m, 2); used != 7 || tier != "override" {
		t.Errorf("show with the client: the override's used %v, tier %q; want 7, override", used, tier)
	}
	if got := metric(t, g.admin, "sluice_overrides"); got != "2" {
		t.Errorf("sluice_overrides = %q, want 2", got)
	}
	code, m, _ = call(t, "GET", g.admin+"/admin/v1/clients", "")
	if cs := m["clients"].([]any); code != 200 || len(cs) != 2 || cs[0].(map[string]any)["client"] != "k-2" {
		t.Errorf("list: %d %v", code, m)
	}
	// Overrides survive a reload.
	if err := gw.Reload(func() (server.Options, error) {
		o := adminOptions()
		o.Listen, o.Admin, o.Upstream = opts.Listen, opts.Admin, server.EchoUpstream
		return o, nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := allowed(t, g.url+"/api", "k-2", 2); n != 0 {
		t.Errorf("after a reload, the premium client at its limit got %d more, want 0", n)
	}
	if code, m, _ := call(t, "GET", base+"k-2", ""); code != 200 || m["tier"] != "premium" {
		t.Errorf("after a reload: %d %v", code, m)
	}
	// Removed, the client is back in its tier.
	if code, _, _ := call(t, "DELETE", base+"k-gold", ""); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code, _, _ := call(t, "DELETE", base+"k-gold", ""); code != 404 {
		t.Errorf("delete twice: %d, want 404", code)
	}
	if n := allowed(t, g.url+"/api", "k-gold", 10); n != 4 {
		t.Errorf("client back in premium: %d allowed, want 4", n)
	}

	for _, c := range []struct {
		method, body string
		code         int
		detail       string
	}{
		{"PUT", `{"tier":"platinum"}`, 400, `unknown tier "platinum"`},
		{"PUT", `{"limits":{"nope":{"limit":1,"period":"1m"}}}`, 400, `no rule is named "nope"`},
		{"PUT", `{"limits":{"health":{"limit":1,"period":"1m"}}}`, 400, "exempt"},
		{"PUT", `{"limits":{"api":{"limit":0,"period":"1m"}}}`, 400, "must be positive"},
		{"PUT", `{"limits":{"api":{"limit":1000000000000000,"period":"1ns"}}}`, 400, "rule \"api\""},
		{"PUT", `{"limits":{"api":{"limit":5,"period":"forever"}}}`, 400, "period"},
		{"PUT", `{"tier":"premium","until":"2001-01-01T00:00:00Z"}`, 400, "not in the future"},
		{"PUT", `{"tier":"premium","until":"tomorrow"}`, 400, "RFC 3339"},
		{"PUT", `{}`, 400, "give a tier, limits or an anchor"},
		{"PUT", `{"tier":5}`, 400, "JSON"},
		{"GET", ``, 404, "has no override"},
	} {
		code, m, _ := call(t, c.method, base+"k-x", c.body)
		if code != c.code || !strings.Contains(m["detail"].(string), c.detail) {
			t.Errorf("%s %s: %d %v; want %d with %q", c.method, c.body, code, m["detail"], c.code, c.detail)
		}
	}
}

func TestAdminAPIOverridesNeedTierSource(t *testing.T) {
	opts := adminOptions()
	opts.Limiter.Tiers = httplimit.Tiers{}
	g, _ := startGW(t, opts)
	if code, m, _ := call(t, "PUT", g.admin+"/admin/v1/clients/k", `{"tier":"free"}`); code != 409 || !strings.Contains(m["detail"].(string), "tiers.from") {
		t.Errorf("without tiers.from: %d %v; want 409 naming tiers.from", code, m)
	}
}

func TestTwoGatewaysShareOverridesThroughRedis(t *testing.T) {
	srv := redistest.Start(t)
	opts := func() server.Options {
		o := adminOptions()
		o.Backend, o.Redis, o.OverridesPoll = "redis", redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second}, 20*time.Millisecond
		return o
	}
	a, _ := startGW(t, opts())
	b, _ := startGW(t, opts())
	if code, m, _ := call(t, "PUT", a.admin+"/admin/v1/clients/k-shared", `{"tier":"premium"}`); code != 200 {
		t.Fatalf("set on a: %d %v", code, m)
	}
	// Each gateway polls Redis for overrides every 20ms.
	eventually(t, func() bool {
		code, _, _ := call(t, "GET", b.admin+"/admin/v1/clients/k-shared", "")
		return code == 200
	},
		func() string { return "gateway b does not see gateway a's override" })
	// b applies it: premium is 4, and the counter is shared with a.
	if n := allowed(t, b.url+"/api", "k-shared", 3) + allowed(t, a.url+"/api", "k-shared", 3); n != 4 {
		t.Errorf("premium client across both gateways: %d allowed, want 4", n)
	}
	if code, _, _ := call(t, "DELETE", b.admin+"/admin/v1/clients/k-shared", ""); code != 204 {
		t.Fatalf("delete on b: %d", code)
	}
	eventually(t, func() bool {
		code, _, _ := call(t, "GET", a.admin+"/admin/v1/clients/k-shared", "")
		return code == 404
	},
		func() string { return "gateway a does not see the removal" })
}

// A reload cannot turn the API on while the running admin listener is off
// loopback, whatever address the new file names.
func TestAdminAPINeedsLoopbackListener(t *testing.T) {
	opts := adminOptions()
	opts.Admin = "0.0.0.0:0"
	opts.Listen = "127.0.0.1:0"
	opts.Upstream = server.EchoUpstream
	if _, err := server.New(opts); err == nil || !strings.Contains(err.Error(), "is not a loopback address") {
		t.Fatalf("New with the API on 0.0.0.0: %v", err)
	}
	opts.AdminToken = nil
	g, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	err = g.Reload(func() (server.Options, error) {
		o := adminOptions()
		o.Admin, o.Upstream = "127.0.0.1:9090", server.EchoUpstream
		return o, nil
	})
	if err == nil || !strings.Contains(err.Error(), "is not a loopback address") {
		t.Errorf("Reload turning the API on: %v", err)
	}
	err = g.Reload(func() (server.Options, error) {
		o := adminOptions()
		o.Admin, o.Upstream, o.AdminAllowRemote = "0.0.0.0:0", server.EchoUpstream, true
		return o, nil
	})
	if err != nil {
		t.Errorf("Reload with allow_remote: %v", err)
	}
}
