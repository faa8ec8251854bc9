package server_test

import (
	"context"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

// serviceOptions are adminOptions with a rate-limit service whose domain
// "api" limits each client value to 3 an hour, allow-lists "health" and
// never limits "free".
func serviceOptions(t *testing.T) server.Options {
	t.Helper()
	rules, err := descriptor.New(descriptor.Domain{Name: "api", Descriptors: []descriptor.Descriptor{
		{Key: "client", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 3, Unit: descriptor.Hour}},
		{Key: "health"},
		{Key: "free", RateLimit: &descriptor.RateLimit{Unlimited: true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	o := adminOptions()
	o.Service = &server.ServiceOptions{GRPC: "127.0.0.1:0", Rules: rules}
	return o
}

// rlsClient returns a function that asks the gateway's service about one
// descriptor {key: value} of domain api, charging hits (0 checks only).
func rlsClient(t *testing.T, g *server.Server) func(key, value string, hits uint64) rlsv3.RateLimitResponse_Code {
	t.Helper()
	conn, err := grpc.NewClient(g.Addr(server.ListenerGRPC).String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := rlsv3.NewRateLimitServiceClient(conn)
	return func(key, value string, hits uint64) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
				HitsAddend: wrapperspb.UInt64(hits),
			}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.OverallCode
	}
}

const (
	rlsOK   = rlsv3.RateLimitResponse_OK
	rlsOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

// descState returns applies, remaining and allowed of a show answer.
func descState(t *testing.T, m map[string]any) (applies string, remaining float64, allowed bool) {
	t.Helper()
	applies, _ = m["applies"].(string)
	st, ok := m["state"].(map[string]any)
	if !ok {
		return applies, -1, false
	}
	return applies, st["remaining"].(float64), st["allowed"].(bool)
}

func TestAdminAPIDescriptors(t *testing.T) {
	r, g := startGW(t, serviceOptions(t))
	ask := rlsClient(t, g)
	show := func(value string) map[string]any {
		t.Helper()
		code, m, _ := call(t, "POST", r.admin+"/admin/v1/descriptors/show", `{"domain":"api","entries":[{"key":"client","value":"`+value+`"}]}`)
		if code != 200 {
			t.Fatalf("show %s: %d %v", value, code, m)
		}
		return m
	}

	for i := range 2 {
		if got := ask("client", "a", 1); got != rlsOK {
			t.Fatalf("call %d: %v, want OK", i+1, got)
		}
	}
	m := show("a")
	if applies, rem, ok := descState(t, m); applies != "rule" || rem != 1 || !ok || m["key"] != "a" {
		t.Errorf("show after 2 of 3: applies %q, remaining %v, allowed %v, key %v; want rule, 1, true, a (%v)", applies, rem, ok, m["key"], m)
	}
	if rule, _ := m["rule"].(map[string]any); rule["path"] != "api.client" || rule["policy"] != "api/client" {
		t.Errorf("show: rule %v, want path api.client and policy api/client", rule)
	}
	// Show charges nothing: the third call still passes, the fourth not.
	if a, b := ask("client", "a", 1), ask("client", "a", 1); a != rlsOK || b != rlsOver {
		t.Fatalf("calls 3 and 4: %v, %v; want OK, OVER_LIMIT", a, b)
	}
	if _, rem, ok := descState(t, show("a")); rem != 0 || ok {
		t.Errorf("show when exhausted: remaining %v, allowed %v; want 0, false", rem, ok)
	}

	// Reset: the quota is back.
	if code, m, _ := call(t, "POST", r.admin+"/admin/v1/descriptors/reset", `{"domain":"api","entries":[{"key":"client","value":"a"}]}`); code != 200 || m["reset"] != true {
		t.Fatalf("reset: %d %v", code, m)
	}
	if _, rem, _ := descState(t, show("a")); rem != 3 {
		t.Errorf("show after reset: remaining %v, want 3", rem)
	}
	if got := ask("client", "a", 1); got != rlsOK {
		t.Errorf("after reset: %v, want OK", got)
	}

	// An override gives client a 5 an hour, on a counter of its own; b
	// keeps the tree's 3.
	id := url.PathEscape("api/client=a")
	code, m, _ := call(t, "PUT", r.admin+"/admin/v1/descriptors/overrides/"+id, `{"limits":[{"limit":5,"period":"1h"}]}`)
	if code != 200 || m["id"] != "api/client=a" {
		t.Fatalf("put override: %d %v", code, m)
	}
	if ls, _ := m["limits"].([]any); len(ls) != 1 || ls[0].(map[string]any)["algorithm"] != "fixed_window" {
		t.Errorf("put override: limits %v, want one with the tree's algorithm fixed_window", m["limits"])
	}
	for i := range 5 {
		if got := ask("client", "a", 1); got != rlsOK {
			t.Fatalf("under the override, call %d: %v, want OK", i+1, got)
		}
	}
	if got := ask("client", "a", 1); got != rlsOver {
		t.Errorf("under the override, call 6: %v, want OVER_LIMIT", got)
	}
	if got := ask("client", "b", 3); got != rlsOK {
		t.Errorf("client b, 3 hits: %v, want OK (the tree's limit)", got)
	}
	if got := ask("client", "b", 1); got != rlsOver {
		t.Errorf("client b, a fourth hit: %v, want OVER_LIMIT", got)
	}
	m = show("a")
	if applies, rem, _ := descState(t, m); applies != "override" || rem != 0 || m["override"] == nil {
		t.Errorf("show under the override: applies %q, remaining %v, override %v; want override, 0", applies, rem, m["override"])
	}
	if rule, _ := m["rule"].(map[string]any); rule["path"] != "api.client" {
		t.Errorf("show under the override: rule %v, want the one it overrides, api.client", m["rule"])
	}
	if code, m, _ := call(t, "GET", r.admin+"/admin/v1/descriptors/overrides", ""); code != 200 || len(m["overrides"].([]any)) != 1 {
		t.Errorf("list: %d %v, want one override", code, m)
	}
	if code, m, _ := call(t, "GET", r.admin+"/admin/v1/descriptors/overrides/"+id, ""); code != 200 || m["domain"] != "api" {
		t.Errorf("get: %d %v", code, m)
	}
	if got := scrape(t, r.admin, "sluice_descriptor_overrides"); got != "1" {
		t.Errorf("sluice_descriptor_overrides = %q, want 1", got)
	}

	// Removed, the tree's counter applies again: 1 of 3 used.
	if code, _, _ := call(t, "DELETE", r.admin+"/admin/v1/descriptors/overrides/"+id, ""); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, _, _ := call(t, "DELETE", r.admin+"/admin/v1/descriptors/overrides/"+id, ""); code != 404 {
		t.Errorf("delete twice: %d, want 404", code)
	}
	if applies, rem, _ := descState(t, show("a")); applies != "rule" || rem != 2 {
		t.Errorf("show after removal: applies %q, remaining %v; want rule, 2", applies, rem)
	}

	// No limit applies: an allow-list entry, an unlimited rule, no rule.
	// Reset says so too.
	if code, m, _ := call(t, "POST", r.admin+"/admin/v1/descriptors/reset", `{"domain":"api","entries":[{"key":"health","value":"x"}]}`); code != 200 || m["reset"] != false || !strings.Contains(m["no_limit"].(string), "allow-list") {
		t.Errorf("reset of an allow-listed descriptor: %d %v; want reset false, naming the allow-list", code, m)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"domain":"api","entries":[{"key":"health","value":"x"}]}`, "allow-list"},
		{`{"domain":"api","entries":[{"key":"free","value":"x"}]}`, "unlimited"},
		{`{"domain":"api","entries":[{"key":"nope","value":"x"}]}`, "matches no rule"},
		{`{"domain":"api","entries":[{"key":"client","value":"x"},{"key":"deeper","value":"y"}]}`, "matches no rule"},
	} {
		code, m, _ := call(t, "POST", r.admin+"/admin/v1/descriptors/show", tc.body)
		if nl, _ := m["no_limit"].(string); code != 200 || m["applies"] != "none" || !strings.Contains(nl, tc.want) {
			t.Errorf("show %s: %d %v; want applies none and no_limit naming %q", tc.body, code, m, tc.want)
		}
	}
}

func TestAdminAPIDescriptorErrors(t *testing.T) {
	r, _ := startGW(t, serviceOptions(t))
	big := strings.Repeat("x", 2000)
	for _, tc := range []struct {
		method, path, body string
		code               int
		detail             string
	}{
		{"POST", "/admin/v1/descriptors/show", `{"domain":"nope","entries":[{"key":"client","value":"a"}]}`, 404, "unknown domain"},
		{"POST", "/admin/v1/descriptors/reset", `{"domain":"nope","entries":[{"key":"client","value":"a"}]}`, 404, "unknown domain"},
		{"PUT", "/admin/v1/descriptors/overrides/nope%2Fclient=a", `{"limits":[{"limit":5,"period":"1h"}]}`, 404, "unknown domain"},
		{"POST", "/admin/v1/descriptors/show", `{"domain":"","entries":[{"key":"client","value":"a"}]}`, 400, "domain"},
		{"POST", "/admin/v1/descriptors/show", `{"domain":"api","entries":[]}`, 400, "entries"},
		{"POST", "/admin/v1/descriptors/show", `{"domain":"api","entries":[{"key":"","value":"a"}]}`, 400, "empty key"},
		{"POST", "/admin/v1/descriptors/show", `{"domain":"api","entries":[{"key":"client","value":"` + big + `"}]}`, 400, "at most 1024"},
		{"POST", "/admin/v1/descriptors/show", `{"domain":"api","entries":[{"key":"client","value":"a"}],"x":1}`, 400, "unknown field"},
		{"PUT", "/admin/v1/descriptors/overrides/api%2Fclient=a", `{"limits":[]}`, 400, "limits"},
		{"PUT", "/admin/v1/descriptors/overrides/api%2Fclient=a", `{"limits":[{"limit":0,"period":"1h"}]}`, 400, "limits[0]"},
		{"PUT", "/admin/v1/descriptors/overrides/api%2Fclient=a", `{"limits":[{"limit":5,"period":"soon"}]}`, 400, "period"},
		{"PUT", "/admin/v1/descriptors/overrides/api%2Fclient=a", `{"limits":[{"limit":5,"period":"1h"}],"until":"2000-01-01T00:00:00Z"}`, 400, "not in the future"},
		{"PUT", "/admin/v1/descriptors/overrides/api", `{"limits":[{"limit":5,"period":"1h"}]}`, 400, "domain/key=value"},
		{"PUT", "/admin/v1/descriptors/overrides/api%2Fclient", `{"limits":[{"limit":5,"period":"1h"}]}`, 400, "no ="},
		{"GET", "/admin/v1/descriptors/overrides/api%2Fclient=zz", ``, 404, "no override"},
	} {
		code, m, h := call(t, tc.method, r.admin+tc.path, tc.body)
		detail, _ := m["detail"].(string)
		if code != tc.code || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(detail, tc.detail) {
			t.Errorf("%s %s %s: %d %q; want a %d problem naming %q", tc.method, tc.path, tc.body, code, detail, tc.code, tc.detail)
		}
	}
	for _, path := range []string{"/admin/v1/descriptors/show", "/admin/v1/descriptors/overrides"} {
		method := "POST"
		if strings.HasSuffix(path, "overrides") {
			method = "GET"
		}
		if code, _, _ := callWith(t, method, r.admin+path, `{"domain":"api","entries":[{"key":"client","value":"a"}]}`, "wrong-token-wrong-token"); code != 401 {
			t.Errorf("%s with a wrong token: %d, want 401", path, code)
		}
	}
	// Without a service, the routes say so.
	off, _ := startGW(t, adminOptions())
	if code, m, _ := call(t, "GET", off.admin+"/admin/v1/descriptors/overrides", ""); code != 404 || !strings.Contains(m["detail"].(string), "service") {
		t.Errorf("without a service: %d %v; want 404 naming the service section", code, m)
	}
}

// An override set on one instance applies on another on the same Redis
// within its poll interval, and so does its removal.
func TestDescriptorOverridesShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	opts := func() server.Options {
		o := serviceOptions(t)
		o.Backend, o.Redis, o.OverridesPoll = "redis", redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second}, 20*time.Millisecond
		return o
	}
	a, _ := startGW(t, opts())
	_, gb := startGW(t, opts())
	askB := rlsClient(t, gb)
	for range 3 {
		askB("client", "c", 1)
	}
	if got := askB("client", "c", 1); got != rlsOver {
		t.Fatalf("b, fourth call: %v, want OVER_LIMIT", got)
	}
	if code, m, _ := call(t, "PUT", a.admin+"/admin/v1/descriptors/overrides/api%2Fclient=c", `{"limits":[{"algorithm":"gcra","limit":10,"period":"1h"}]}`); code != 200 {
		t.Fatalf("put on a: %d %v", code, m)
	}
	// b polls Redis for overrides every 20ms. Checking (0 hits) charges
	// nothing while waiting.
	eventually(t, func() bool { return askB("client", "c", 0) == rlsOK }, func() string { return "b does not apply a's override" })
	if got := askB("client", "c", 10); got != rlsOK {
		t.Errorf("b under the override, 10 hits: %v, want OK", got)
	}
	if got := askB("client", "c", 1); got != rlsOver {
		t.Errorf("b under the override, an 11th hit: %v, want OVER_LIMIT", got)
	}
	if code, _, _ := call(t, "DELETE", a.admin+"/admin/v1/descriptors/overrides/api%2Fclient=c", ""); code != 204 {
		t.Fatalf("delete on a: %d", code)
	}
	// The tree's counter, exhausted before, applies again.
	eventually(t, func() bool { return askB("client", "c", 0) == rlsOver }, func() string { return "b does not see the removal" })
}

// scrape returns the value of an unlabelled metric on the admin listener.
func scrape(t *testing.T, admin, name string) string {
	t.Helper()
	resp := get(t, "GET", admin+"/metrics", nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// A descriptor override outlives a reload, which builds a new tree; its
// counter carries on.
func TestDescriptorOverrideSurvivesReload(t *testing.T) {
	r, g := startGW(t, serviceOptions(t))
	ask := rlsClient(t, g)
	if code, m, _ := call(t, "PUT", r.admin+"/admin/v1/descriptors/overrides/api%2Fclient=a", `{"limits":[{"limit":5,"period":"1h"}]}`); code != 200 {
		t.Fatalf("put: %d %v", code, m)
	}
	if got := ask("client", "a", 4); got != rlsOK {
		t.Fatalf("4 hits under the override: %v, want OK", got)
	}
	if err := g.Reload(func() (server.Options, error) { return serviceOptions(t), nil }); err != nil {
		t.Fatal(err)
	}
	if got := ask("client", "a", 1); got != rlsOK {
		t.Errorf("after the reload, the fifth hit: %v, want OK", got)
	}
	if got := ask("client", "a", 1); got != rlsOver {
		t.Errorf("after the reload, the sixth hit: %v, want OVER_LIMIT", got)
	}
}

// A reload builds one generation for both faces: the service's new rules
// apply with the gateway's, and a configuration one face cannot take is
// refused whole, the other face keeping its running rules too.
func TestReloadSwapsBothFaces(t *testing.T) {
	_, g := startGW(t, serviceOptions(t))
	ask := rlsClient(t, g)
	withLimits := func(service uint32, loginRule string) server.Options {
		o := serviceOptions(t)
		rules, err := descriptor.New(descriptor.Domain{Name: "api", Descriptors: []descriptor.Descriptor{
			{Key: "client", RateLimit: &descriptor.RateLimit{RequestsPerUnit: service, Unit: descriptor.Hour}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		o.Service.Rules = rules
		o.Limiter.Rules[1].Name = loginRule
		return o
	}
	if err := g.Reload(func() (server.Options, error) { return withLimits(1, "signin"), nil }); err != nil {
		t.Fatal(err)
	}
	if got := g.Limiter().Rules(); !slices.Contains(got, "signin") {
		t.Fatalf("the gateway's rules after the reload: %v, want signin among them", got)
	}
	if got := ask("client", "a", 1); got != rlsOK {
		t.Fatalf("first hit under 1 an hour: %v, want OK", got)
	}
	if got := ask("client", "a", 1); got != rlsOver {
		t.Fatalf("second hit under 1 an hour: %v, want OVER_LIMIT: the service's rules were not reloaded", got)
	}
	// The gateway cannot take two rules of one name: the reload is refused,
	// and the service keeps 1 an hour although the file says 10.
	if err := g.Reload(func() (server.Options, error) { return withLimits(10, "api"), nil }); err == nil {
		t.Fatal("a reload with two rules named api succeeded")
	}
	if got := ask("client", "b", 1); got != rlsOK {
		t.Fatalf("after the refused reload, b's first hit: %v, want OK", got)
	}
	if got := ask("client", "b", 1); got != rlsOver {
		t.Errorf("after the refused reload, b's second hit: %v, want OVER_LIMIT (the running 1 an hour)", got)
	}
}
