package httplimit_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/accesslist"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func ipList(t testing.TB, name string, nets ...string) *httplimit.List {
	t.Helper()
	s, err := accesslist.ParseNetworks(strings.NewReader(strings.Join(nets, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return &httplimit.List{Name: name, Addrs: s}
}

func keyList(name string, key httplimit.KeyPart, keys ...string) *httplimit.List {
	return &httplimit.List{Name: name, Key: key, Keys: accesslist.NewKeySet(keys)}
}

func TestDenyList(t *testing.T) {
	proxies, _ := clientip.ParsePrefixes([]string{"10.0.0.1"})
	ip, err := clientip.New(clientip.Options{TrustedProxies: proxies})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, httplimit.Options{
		ClientIP: ip,
		Deny:     []*httplimit.List{keyList("stolen-keys", httplimit.Header("X-API-Key"), "k-stolen"), ipList(t, "abusers", "203.0.113.0/24", "2001:db8:bad::/48")},
		Rules:    []httplimit.Rule{{Name: "all", Key: []httplimit.KeyPart{httplimit.Global()}, Limit: limit(sluice.FixedWindow, 2, time.Minute)}},
	})
	for _, q := range []struct {
		req
		list string
	}{
		{req{target: "/", remote: "203.0.113.9:1234"}, "abusers"},
		{req{target: "/", remote: "[::ffff:203.0.113.10]:1234"}, "abusers"},
		{req{target: "/", remote: "[2001:db8:bad:1::5]:1234"}, "abusers"},
		// Behind the trusted proxy, the forwarded address is the client's.
		{req{target: "/", remote: "10.0.0.1:1234", header: map[string]string{"X-Forwarded-For": "203.0.113.77"}}, "abusers"},
		{req{target: "/", remote: "192.0.2.1:1234", header: map[string]string{"X-API-Key": "k-stolen"}}, "stolen-keys"},
	} {
		resp := q.do(e)
		body, _ := io.ReadAll(resp.Body)
		eq(t, "status", resp.StatusCode, http.StatusForbidden)
		eq(t, "content type", resp.Header.Get("Content-Type"), "application/problem+json")
		if !strings.Contains(string(body), `"status":403`) {
			t.Errorf("body %s, want a 403 problem", body)
		}
		ev := e.obs.last(t)
		eq(t, "outcome", ev.Outcome, httplimit.OutcomeDenied)
		eq(t, "list", ev.List, q.list)
		eq(t, "rules", len(ev.Rules), 0)
	}
	eq(t, "requests that reached the handler", len(e.seen), 0)
	// None of them was counted: the global limit of 2 is untouched.
	// A client the untrusted peer names in X-Forwarded-For is not believed.
	got := e.statuses(3, req{target: "/", remote: "192.0.2.1:1", header: map[string]string{"X-Forwarded-For": "203.0.113.9", "X-API-Key": "k-fine"}})
	eq(t, "statuses", fmt.Sprint(got), "[200 200 429]")
}

func (q req) do(e *env) *http.Response { return e.do(q) }

func TestAllowList(t *testing.T) {
	partners := keyList("partners", httplimit.Header("X-API-Key"), "k-partner")
	monitoring := ipList(t, "monitoring", "198.51.100.0/24")
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "per-key", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")}, Allow: []*httplimit.List{monitoring, partners}, Limit: limit(sluice.FixedWindow, 1, time.Minute)},
		{Name: "global", Key: []httplimit.KeyPart{httplimit.Global()}, Limit: limit(sluice.FixedWindow, 4, time.Minute)},
	}})
	partner := req{target: "/", remote: "192.0.2.1:1", header: map[string]string{"X-API-Key": "k-partner"}}
	got := e.statuses(2, partner)
	eq(t, "partner statuses", fmt.Sprint(got), "[200 200]")
	ev := e.obs.last(t)
	eq(t, "request outcome", ev.Outcome, httplimit.OutcomeAllowed)
	eq(t, "per-key outcome", ev.Rules[0].Outcome, httplimit.OutcomeAllowListed)
	eq(t, "per-key list", ev.Rules[0].List, "partners")
	eq(t, "global outcome", ev.Rules[1].Outcome, httplimit.OutcomeAllowed) // the other rule still applies
	got = e.statuses(2, req{target: "/", remote: "192.0.2.1:1", header: map[string]string{"X-API-Key": "k-other"}})
	eq(t, "other client's statuses", fmt.Sprint(got), "[200 429]")
	eq(t, "its outcome", e.obs.last(t).Rules[0].Outcome, httplimit.OutcomeLimited)
	// The global rule has counted 3 of 4; the partner's next request
	// takes the last, and the one after is limited by the global rule.
	got = e.statuses(2, partner)
	eq(t, "partner under the global rule", fmt.Sprint(got), "[200 429]")
	eq(t, "global rule limits partners too", e.obs.last(t).Rules[1].Outcome, httplimit.OutcomeLimited)

	// A monitoring address skips per-key, whatever its key.
	e2 := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "per-ip", Allow: []*httplimit.List{monitoring}, Limit: limit(sluice.FixedWindow, 1, time.Minute)},
	}})
	got = e2.statuses(3, req{target: "/", remote: "198.51.100.7:1"})
	eq(t, "monitoring statuses", fmt.Sprint(got), "[200 200 200]")
	eq(t, "monitoring outcome", e2.obs.last(t).Outcome, httplimit.OutcomeAllowListed)
	got = e2.statuses(2, req{target: "/", remote: "198.51.101.7:1"})
	eq(t, "others' statuses", fmt.Sprint(got), "[200 429]")
}

func TestListValidation(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	good := limit(sluice.FixedWindow, 1, time.Minute)
	keys := accesslist.NewKeySet([]string{"a"})
	for _, tt := range []struct {
		name string
		opts httplimit.Options
		want string
	}{
		{"empty list", httplimit.Options{Deny: []*httplimit.List{{Name: "x"}}}, "neither addresses nor keys"},
		{"nil list", httplimit.Options{Deny: []*httplimit.List{nil}}, "nil list"},
		{"bad name", httplimit.Options{Deny: []*httplimit.List{{Name: "a b", Keys: keys, Key: httplimit.Header("X")}}}, "list name"},
		{"keys without key", httplimit.Options{Deny: []*httplimit.List{{Name: "x", Keys: keys}}}, "unknown source"},
		{"keys by ip", httplimit.Options{Deny: []*httplimit.List{{Name: "x", Keys: keys, Key: httplimit.IP()}}}, "cannot be looked up by ip"},
		{"exempt with allow", httplimit.Options{Rules: []httplimit.Rule{{Name: "r", Action: httplimit.Exempt, Allow: []*httplimit.List{keyList("x", httplimit.Header("X"), "a")}}}}, "exempt rule takes no allow"},
		{"rule's bad list", httplimit.Options{Rules: []httplimit.Rule{{Name: "r", Limit: good, Allow: []*httplimit.List{{Name: "x"}}}}}, `rule "r": allow`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Store = store
			_, err := httplimit.New(tt.opts)
			if err == nil || !errors.Is(err, httplimit.ErrInvalidRule) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an ErrInvalidRule containing %q", err, tt.want)
			}
		})
	}
}

// BenchmarkLists decides GET /api/search requests as BenchmarkMiddleware
// does, without lists, and with a deny list of 1 or 100,000 networks and an
// allow list of 1 or 100,000 API keys on the per-ip rule, neither holding
// the clients: every request is looked up in both and decided in full.
func BenchmarkLists(b *testing.B) {
	nets := make([]netip.Prefix, 0, 100_000)
	keys := make([]string, 0, 100_000)
	for i := range 100_000 {
		if i%2 == 0 {
			nets = append(nets, netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(16 + i>>16), byte(i >> 8), byte(i)}), 32))
		} else {
			nets = append(nets, netip.MustParsePrefix(fmt.Sprintf("2001:db8:%x:%x::/64", i>>16, i&0xffff)))
		}
		keys = append(keys, "partner-"+strconv.Itoa(i))
	}
	ips, err := accesslist.NewIPSet(nets)
	if err != nil {
		b.Fatal(err)
	}
	one, err := accesslist.NewIPSet(nets[:1])
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		lists bool
		deny  *httplimit.List
		allow *httplimit.List
	}{
		{"none", false, nil, nil},
		// The cost of looking up at all, against which 100k shows the cost
		// of a list's size.
		{"1", true, &httplimit.List{Name: "abusers", Addrs: one}, &httplimit.List{Name: "partners", Key: httplimit.Header("X-API-Key"), Keys: accesslist.NewKeySet(keys[:1])}},
		{"100k", true, &httplimit.List{Name: "abusers", Addrs: ips}, &httplimit.List{Name: "partners", Key: httplimit.Header("X-API-Key"), Keys: accesslist.NewKeySet(keys)}},
		{"ip100k", true, &httplimit.List{Name: "abusers", Addrs: ips}, &httplimit.List{Name: "partners", Key: httplimit.Header("X-API-Key"), Keys: accesslist.NewKeySet(keys[:1])}},
		{"key100k", true, &httplimit.List{Name: "abusers", Addrs: one}, &httplimit.List{Name: "partners", Key: httplimit.Header("X-API-Key"), Keys: accesslist.NewKeySet(keys)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store := memstore.New(memstore.Options{})
			defer store.Close()
			rules := quickstartRules()
			opts := httplimit.Options{Store: store, Tiers: httplimit.Tiers{From: httplimit.Header("X-Plan")}}
			if bc.lists {
				for i := range rules {
					if rules[i].Name == "per-ip" {
						rules[i].Allow = []*httplimit.List{bc.allow}
					}
				}
				opts.Deny = []*httplimit.List{bc.deny}
			}
			opts.Rules = rules
			lim, err := httplimit.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			const clients = 10000
			reqs := make([]*http.Request, clients)
			for i := range reqs {
				r := httptest.NewRequest("GET", "/api/search?q=x", nil)
				r.RemoteAddr = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":40000"
				r.Header.Set("X-API-Key", "key-"+strconv.Itoa(i))
				r.Header.Set("X-Plan", "enterprise")
				reqs[i] = r
			}
			w := &discard{h: make(http.Header)}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%clients])
			}
		})
	}
}
