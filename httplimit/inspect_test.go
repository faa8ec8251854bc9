package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// overrideMap is an httplimit.Overrides over a map.
type overrideMap struct {
	mu sync.Mutex
	m  map[string]*httplimit.ClientOverride
}

func (o *overrideMap) Override(client string) *httplimit.ClientOverride {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[client]
}

func TestRuleKeyMatchesRequestKey(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "ip", Limit: limit(sluice.FixedWindow, 5, time.Hour)},
		{Name: "pair", Key: []httplimit.KeyPart{httplimit.IP(), httplimit.Header("X-User"), httplimit.Global(), httplimit.Host()},
			Limit: limit(sluice.FixedWindow, 5, time.Hour)},
	}})
	e.statuses(3, req{remote: "2001:db8:1:2::7:1234", header: map[string]string{"X-User": "ann"}, target: "http://API.example.com:8443/x"})
	ctx := context.Background()
	for _, c := range []struct {
		rule   string
		values []string
	}{
		{"ip", []string{"2001:db8:1:2::99"}}, // same /64
		{"pair", []string{"2001:db8:1:2::7", "ann", "api.example.com"}},
		{"pair", []string{"2001:db8:1:2::7", "ann", "API.example.com:8443"}},
	} {
		key, err := e.lim.RuleKey(c.rule, c.values)
		if err != nil {
			t.Fatalf("RuleKey(%s, %q): %v", c.rule, c.values, err)
		}
		st, err := e.lim.PeekKey(ctx, c.rule, key, nil)
		if err != nil || len(st) != 1 {
			t.Fatalf("PeekKey(%s): %v, %v", c.rule, st, err)
		}
		eq(t, c.rule+" remaining", st[0].Decision.Remaining, 2)
		eq(t, c.rule+" limit", st[0].Limit.Count, 5)
	}
	// Peeking charges nothing.
	key, _ := e.lim.RuleKey("ip", []string{"2001:db8:1:2::1"})
	st, _ := e.lim.PeekKey(ctx, "ip", key, nil)
	eq(t, "remaining after peeks", st[0].Decision.Remaining, 2)
	// Reset gives the quota back.
	if err := e.lim.ResetKey(ctx, "ip", key, nil); err != nil {
		t.Fatal(err)
	}
	st, _ = e.lim.PeekKey(ctx, "ip", key, nil)
	eq(t, "remaining after reset", st[0].Decision.Remaining, 5)

	for _, c := range []struct {
		rule   string
		values []string
		want   error
	}{
		{"nope", nil, httplimit.ErrUnknownRule},
		{"ip", nil, httplimit.ErrInvalidKey},
		{"ip", []string{"a", "b"}, httplimit.ErrInvalidKey},
		{"ip", []string{"not-an-ip"}, httplimit.ErrInvalidKey},
		{"pair", []string{"192.0.2.1", "", "h"}, httplimit.ErrInvalidKey},
	} {
		if _, err := e.lim.RuleKey(c.rule, c.values); !errors.Is(err, c.want) {
			t.Errorf("RuleKey(%s, %q): got %v, want %v", c.rule, c.values, err, c.want)
		}
	}
}

func TestPeekAndResetRequest(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "health", Match: httplimit.Match{Paths: []string{"/healthz"}}, Action: httplimit.Exempt},
		{Name: "a", Limit: limit(sluice.FixedWindow, 3, time.Hour)},
		{Name: "b", Match: httplimit.Match{Paths: []string{"/b"}}, Limit: limit(sluice.FixedWindow, 4, time.Hour)},
	}})
	q := req{target: "/b", remote: "192.0.2.1:1"}
	e.statuses(2, q)
	r := httptest.NewRequest("GET", "/b", nil)
	r.RemoteAddr = "192.0.2.1:9"
	ctx := context.Background()
	st, err := e.lim.PeekRequest(ctx, r)
	if err != nil || len(st) != 2 {
		t.Fatalf("PeekRequest: %v, %v", st, err)
	}
	eq(t, "rule a remaining", st[0].Decision.Remaining, 1)
	eq(t, "rule b remaining", st[1].Decision.Remaining, 2)
	rules, err := e.lim.ResetRequest(ctx, r, "")
	if err != nil || len(rules) != 2 {
		t.Fatalf("ResetRequest: %v, %v", rules, err)
	}
	st, _ = e.lim.PeekRequest(ctx, r)
	eq(t, "rule b remaining after reset", st[1].Decision.Remaining, 4)
	h := httptest.NewRequest("GET", "/healthz", nil)
	st, _ = e.lim.PeekRequest(ctx, h)
	if len(st) != 1 || !st[0].Exempt {
		t.Errorf("PeekRequest(/healthz) = %+v, want one exempt rule", st)
	}
}

func TestOverrides(t *testing.T) {
	store := memstore.New(memstore.Options{Clock: clock.NewFake(t0), SweepInterval: -1})
	defer store.Close()
	ov := &overrideMap{m: map[string]*httplimit.ClientOverride{}}
	e := newEnv(t, httplimit.Options{Store: store, Overrides: ov,
		Tiers: httplimit.Tiers{From: httplimit.Header("X-API-Key"), Keys: map[string]string{"k-premium": "premium", "k-free": "free"}},
		Rules: []httplimit.Rule{
			{Name: "api", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")}, Limit: limit(sluice.FixedWindow, 2, time.Hour),
				Tiers: map[string]sluice.Limit{"premium": limit(sluice.FixedWindow, 4, time.Hour)}},
		}})
	count := func(key string) int {
		n := 0
		for _, s := range e.statuses(10, req{target: "/", header: map[string]string{"X-API-Key": key}}) {
			if s == 200 {
				n++
			}
		}
		return n
	}
	eq(t, "free key before any override", count("k-free"), 2)
	// A tier override takes precedence over tiers.keys.
	co, err := httplimit.NewClientOverride(store, "k-free-up", httplimit.Override{Tier: "premium"})
	if err != nil {
		t.Fatal(err)
	}
	ov.m["k-free-up"] = co
	eq(t, "client moved to premium", count("k-free-up"), 4)
	eq(t, "its tier in the event", e.obs.last(t).Rules[0].Tier, "premium")
	// Its own limit takes precedence over any tier, in counters of its own.
	co, err = httplimit.NewClientOverride(store, "k-premium", httplimit.Override{Limits: map[string]sluice.Limit{"api": limit(sluice.FixedWindow, 7, time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	ov.m["k-premium"] = co
	eq(t, "client with its own limit", count("k-premium"), 7)
	last := e.obs.last(t).Rules[0]
	eq(t, "its tier in the event", last.Tier, httplimit.OverrideTier)
	key, _ := e.lim.RuleKey("api", []string{"k-premium"})
	st, err := e.lim.PeekKey(context.Background(), "api", key, co)
	if err != nil || len(st) != 3 {
		t.Fatalf("PeekKey with the override: %+v, %v; want default, premium and override", st, err)
	}
	eq(t, "override's limit", st[2].Limit.Count, 7)
	eq(t, "override's remaining", st[2].Decision.Remaining, 0)
	eq(t, "premium tier untouched", st[1].Decision.Remaining, 4)
	// Removing the override brings the tier back.
	delete(ov.m, "k-premium")
	eq(t, "client after its override is removed", count("k-premium"), 4)

	if _, err := httplimit.NewClientOverride(store, "x", httplimit.Override{Limits: map[string]sluice.Limit{"api": {}}}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("an invalid limit: got %v, want ErrInvalidLimit", err)
	}
	if _, err := httplimit.NewClientOverride(store, "x", httplimit.Override{Tier: "no spaces"}); !errors.Is(err, httplimit.ErrInvalidRule) {
		t.Errorf("an invalid tier: got %v, want ErrInvalidRule", err)
	}
	if a, b := httplimit.ClientPolicyName("api", "k1"), httplimit.ClientPolicyName("api", "k2"); a == b || len(a) != len("api@")+16 {
		t.Errorf("ClientPolicyName: %q and %q", a, b)
	}
}

// FuzzRuleKey holds RuleKey to the key the limiter computes for a request
// carrying the same values.
func FuzzRuleKey(f *testing.F) {
	store := memstore.New(memstore.Options{})
	f.Cleanup(func() { store.Close() })
	lim, err := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{
		{Name: "r", Key: []httplimit.KeyPart{httplimit.IP(), httplimit.Header("X-K"), httplimit.Global(), httplimit.Host()},
			Limit: limit(sluice.FixedWindow, 5, time.Hour)},
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("203.0.113.9", "key", "API.example.com:443")
	f.Add("2001:db8::1", "k:2", "[::1]:80")
	f.Add("::ffff:192.0.2.1", "x", "h")
	f.Fuzz(func(t *testing.T, ip, v, host string) {
		key, err := lim.RuleKey("r", []string{ip, v, host})
		if err != nil {
			return
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			t.Skip()
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = netip.AddrPortFrom(a, 1).String()
		r.Host = host
		r.Header.Set("X-K", v)
		st, err := lim.PeekRequest(context.Background(), r)
		if err != nil || len(st) != 1 {
			t.Fatalf("PeekRequest: %v, %v", st, err)
		}
		if st[0].Key != key {
			t.Errorf("RuleKey(%q, %q, %q) = %q, the request's key is %q", ip, v, host, key, st[0].Key)
		}
	})
}

// RuleKey builds a path key part as serve keys it: cleaned, and
// lower-cased unless CaseSensitivePaths, so that an operator who types the
// path as a client sent it finds the client's counter.
func TestRuleKeyPathAsServed(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	l, err := httplimit.New(httplimit.Options{Store: store, Rules: []httplimit.Rule{{
		Name: "per-path", Key: []httplimit.KeyPart{httplimit.Path()},
		Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1, Period: time.Hour},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/Api//X/", nil))
	key, err := l.RuleKey("per-path", []string{"/API/x"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.PeekKey(context.Background(), "per-path", key, nil)
	if err != nil || len(st) != 1 || st[0].Decision.Remaining != 0 {
		t.Errorf("PeekKey(RuleKey(/API/x)) after a request to /Api//X/: got %+v, %v; want the used counter (0 remaining)", st, err)
	}
}

func TestKeyText(t *testing.T) {
	long := strings.Repeat("x", httplimit.MaxValueLen+1)
	lim, err := httplimit.New(httplimit.Options{Store: memstore.New(memstore.Options{}), Rules: []httplimit.Rule{
		{Name: "ip", Key: []httplimit.KeyPart{httplimit.IP()}, Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second}},
		{Name: "hdr", Key: []httplimit.KeyPart{httplimit.Header("X-Key"), httplimit.Method(), httplimit.Global()}, Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rule   string
		values []string
		want   string
	}{
		{"ip", []string{"203.0.113.7"}, "203.0.113.7/32"},
		{"ip", []string{"2001:db8::1"}, "2001:db8::/64"},
		{"hdr", []string{"sk_live_1", "GET"}, "sk_live_1 GET"},
		{"hdr", []string{"a b", "POST"}, `"a b" POST`},
	}
	for _, tt := range tests {
		key, err := lim.RuleKey(tt.rule, tt.values)
		if err != nil {
			t.Fatalf("RuleKey(%s, %q): %v", tt.rule, tt.values, err)
		}
		if got := httplimit.KeyText(key); got != tt.want {
			t.Errorf("KeyText(%q) = %s, want %s", key, got, tt.want)
		}
	}
	key, err := lim.RuleKey("hdr", []string{long, "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if got := httplimit.KeyText(key); !strings.HasPrefix(got, "#") || strings.Contains(got, "xxx") || !strings.HasSuffix(got, " GET") {
		t.Errorf("KeyText of a long value = %s, want its digest and GET", got)
	}
	for _, bad := range []string{"h5:ab", "i203.0.113.7", "zzz", "m"} {
		if got := httplimit.KeyText(bad); got != strconv.Quote(bad) {
			t.Errorf("KeyText(%q) = %s, want it quoted", bad, got)
		}
	}
}

// KeyText takes any string without panicking, and shows a well-formed key
// of header values as those values.
func FuzzKeyText(f *testing.F) {
	f.Add("h5:hello", "x")
	f.Add("i203.0.113.7/32h1:a", "")
	f.Add("mi10.0.0.1/32", "y")
	f.Fuzz(func(t *testing.T, key, value string) {
		_ = httplimit.KeyText(key)
		if value == "" || len(value) > httplimit.MaxValueLen || strings.ContainsAny(value, " \"'\\") || strconv.Quote(value) != `"`+value+`"` {
			return
		}
		k := "h" + strconv.Itoa(len(value)) + ":" + value
		if got := httplimit.KeyText(k + k); got != value+" "+value {
			t.Errorf("KeyText(%q) = %q, want %q twice", k+k, got, value)
		}
	})
}
