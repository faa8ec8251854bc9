package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/server"
)

// A rule rolled out to 10% of its clients, then 50%, through the gateway
// over real HTTP to a real upstream and through the forward-auth endpoint:
// the enforced clients are refused, the others reach the upstream and show
// in the shadow_limited metric, and the reload to 50% keeps every counter.
func TestGatewayRollout(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer up.Close()
	opts := func(pct float64) server.Options {
		return server.Options{
			Upstream: up.URL,
			Limiter: httplimit.Options{Rules: []httplimit.Rule{{
				Name: "orders", Key: []httplimit.KeyPart{httplimit.Header("X-Key")},
				Limit: fixed(2, time.Hour), Enforce: &sluice.Rollout{Percent: pct},
			}}},
			AdminToken:  []byte(token),
			ForwardAuth: &server.ForwardAuthOptions{Listen: "127.0.0.1:0", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
		}
	}
	g, gw := startGW(t, opts(10))
	enforcedAt := func(pct float64, client string) bool {
		t.Helper()
		key, err := gw.Limiter().RuleKey("orders", []string{client})
		if err != nil {
			t.Fatal(err)
		}
		return (&sluice.Rollout{Percent: pct}).Enforces("orders", key)
	}
	send := func(client string) int {
		t.Helper()
		return get(t, "GET", g.url+"/orders", map[string]string{"X-Key": client}).StatusCode
	}

	// Enough clients for both kinds at 10%, and one of each kind of
	// change at 50%.
	var clients []string
	var enforced, newly, stays string
	nEnforced := 0
	for i := 0; i < 60 || enforced == "" || newly == "" || stays == ""; i++ {
		c := fmt.Sprintf("client-%d", i)
		clients = append(clients, c)
		switch e10, e50 := enforcedAt(10, c), enforcedAt(50, c); {
		case e10:
			nEnforced++
			enforced = c
		case e50:
			newly = c
		default:
			stays = c
		}
	}
	for _, c := range clients {
		want := []int{200, 200, 200}
		if enforcedAt(10, c) {
			want[2] = 429
		}
		for i, w := range want {
			if got := send(c); got != w {
				t.Fatalf("%s request %d at 10%%: %d, want %d", c, i+1, got, w)
			}
		}
	}
	nShadow := len(clients) - nEnforced
	if got, want := hits.Load(), int64(2*nEnforced+3*nShadow); got != want {
		t.Errorf("requests that reached the upstream: %d, want %d", got, want)
	}
	for series, want := range map[string]string{
		`sluice_decisions_total{outcome="limited",rule="orders"}`:        fmt.Sprint(nEnforced),
		`sluice_decisions_total{outcome="shadow_limited",rule="orders"}`: fmt.Sprint(nShadow),
		`sluice_decisions_total{outcome="allowed",rule="orders"}`:        fmt.Sprint(2 * len(clients)),
	} {
		if got := metric(t, g.admin, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}

	// The admin API tells which clients run in shadow mode.
	for _, c := range []struct {
		client string
		shadow bool
	}{{enforced, false}, {stays, true}} {
		code, m, _ := call(t, "POST", g.admin+"/admin/v1/keys/show", fmt.Sprintf(`{"rule":"orders","key":[%q]}`, c.client))
		if code != 200 {
			t.Fatalf("keys/show %s: %d %v", c.client, code, m)
		}
		l := m["limits"].([]any)[0].(map[string]any)
		if shadow, _ := l["shadow"].(bool); shadow != c.shadow {
			t.Errorf("keys/show %s: shadow %v, want %v (%v)", c.client, shadow, c.shadow, l)
		}
		if used, _, _ := state(t, m, 0); used != 2 {
			t.Errorf("keys/show %s: used %v, want 2", c.client, used)
		}
	}

	// Forward-auth applies the same rule the same way.
	fa := "http://" + gw.Addr(server.ListenerForwardAuth).String() + "/auth"
	faSend := func(client string) int {
		t.Helper()
		return get(t, "GET", fa, map[string]string{"X-Key": client, "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/orders",
			"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Host": "api.example.com", "X-Forwarded-Proto": "https"}).StatusCode
	}
	faKinds := map[bool]bool{}
	for i := 0; len(faKinds) < 2; i++ {
		client := fmt.Sprint("fa-", i)
		e := enforcedAt(10, client)
		faKinds[e] = true
		for i := range 3 {
			want := 200
			if e && i == 2 {
				want = 429
			}
			if got := faSend(client); got != want {
				t.Fatalf("forward-auth %s (enforced %v) request %d: %d, want %d", client, e, i+1, got, want)
			}
		}
	}

	// 10% → 50% is a reload that keeps the counters: the newly enforced
	// client, which used its quota in shadow mode, is refused at once.
	if err := gw.Reload(func() (server.Options, error) {
		o := opts(50)
		o.Listen, o.Admin = "127.0.0.1:0", "127.0.0.1:0"
		return o, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		client string
		want   int
	}{{enforced, 429}, {newly, 429}, {stays, 200}} {
		if got := send(c.client); got != c.want {
			t.Errorf("%s after the reload to 50%%: %d, want %d", c.client, got, c.want)
		}
	}
}

// The service's descriptors roll out the same way, and the admin API
// tells which counters run in shadow mode.
func TestServiceRolloutInAdminAPI(t *testing.T) {
	roll := &sluice.Rollout{Percent: 40}
	rules, err := descriptor.New(descriptor.Domain{Name: "api", Descriptors: []descriptor.Descriptor{
		{Key: "client", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 1, Unit: descriptor.Hour}, Enforce: roll},
	}})
	if err != nil {
		t.Fatal(err)
	}
	o := adminOptions()
	o.Service = &server.ServiceOptions{GRPC: "127.0.0.1:0", Rules: rules}
	g, gw := startGW(t, o)
	ask := rlsClient(t, gw)
	seen := map[bool]bool{}
	for i := 0; len(seen) < 2; i++ {
		client := fmt.Sprint("c", i)
		enforced := roll.Enforces("api.client", client)
		seen[enforced] = true
		want := rlsOK
		if enforced {
			want = rlsOver
		}
		if a, b := ask("client", client, 1), ask("client", client, 1); a != rlsOK || b != want {
			t.Fatalf("%s (enforced %v): %v then %v, want OK then %v", client, enforced, a, b, want)
		}
		code, m, _ := call(t, "POST", g.admin+"/admin/v1/descriptors/show", fmt.Sprintf(`{"domain":"api","entries":[{"key":"client","value":%q}]}`, client))
		if code != 200 {
			t.Fatalf("descriptors/show: %d %v", code, m)
		}
		if shadow, _ := m["shadow"].(bool); shadow == enforced {
			t.Errorf("descriptors/show %s (enforced %v): shadow %v", client, enforced, shadow)
		}
		if pct, _ := m["rule"].(map[string]any)["enforce_percent"].(float64); pct != 40 {
			t.Errorf("descriptors/show: enforce_percent %v, want 40 (%v)", pct, m)
		}
	}
}
