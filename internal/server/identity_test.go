package server_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/identity"
	"github.com/sluicehq/sluice/internal/server"
)

// issue signs a token for sub and plan with key, as an identity provider
// would, valid for an hour.
func issue(t *testing.T, key ed25519.PrivateKey, sub, plan string) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	payload, _ := json.Marshal(map[string]any{"iss": "https://auth.example.com/", "aud": "api", "sub": sub, "plan": plan,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// TestGatewayTiersFromVerifiedTokens runs the gateway in front of a real
// upstream: a premium token gets the premium limit, per subject; a forged
// token claiming premium gets the default tier, keyed by the client's IP
// like a request without a token; a reload with a new key trusts tokens it
// signs.
func TestGatewayTiersFromVerifiedTokens(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer up.Close()
	issuerPub, issuerKey, _ := ed25519.GenerateKey(rand.Reader)
	attackerPub, attackerKey, _ := ed25519.GenerateKey(rand.Reader)
	opts := func(trusted ed25519.PublicKey) server.Options {
		return server.Options{
			Upstream: up.URL,
			Identity: &identity.Options{Keys: []identity.Key{{Public: trusted}}, Algorithms: []string{"EdDSA"},
				Issuer: "https://auth.example.com/", Audience: "api", Leeway: 30 * time.Second},
			Limiter: httplimit.Options{
				Tiers: httplimit.Tiers{From: httplimit.JWT("plan"), Client: httplimit.JWT("sub")},
				Rules: []httplimit.Rule{{Name: "api", Key: []httplimit.KeyPart{httplimit.JWT("sub")}, Limit: fixed(2, time.Hour),
					Tiers: map[string]sluice.Limit{"premium": fixed(5, time.Hour)}}},
			},
			ForwardAuth: &server.ForwardAuthOptions{Listen: "127.0.0.1:0", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
		}
	}
	g, gw := startGW(t, opts(issuerPub))

	statuses := func(n int, header map[string]string) []int {
		t.Helper()
		var out []int
		for range n {
			out = append(out, get(t, "GET", g.url+"/x", header).StatusCode)
		}
		return out
	}
	premium := bearer(issue(t, issuerKey, "alice", "premium"))
	if got := statuses(6, premium); !equalInts(got, []int{200, 200, 200, 200, 200, 429}) {
		t.Errorf("premium token: got %v, want five 200s then 429", got)
	}
	if p := get(t, "GET", g.url+"/x", premium).Header.Get("RateLimit-Policy"); p != `"api";q=5;w=3600` {
		t.Errorf("premium policy: got %q", p)
	}
	forged := bearer(issue(t, attackerKey, "mallory", "premium"))
	if got := statuses(3, forged); !equalInts(got, []int{200, 200, 429}) {
		t.Errorf("forged token: got %v, want the default tier's two 200s then 429", got)
	}
	if got := statuses(1, nil); got[0] != 429 {
		t.Errorf("no token from the same address: got %d, want 429 (the forged token was counted by IP)", got[0])
	}
	if n := hits.Load(); n != 7 {
		t.Errorf("the upstream saw %d requests, want 7", n)
	}
	for result, want := range map[string]string{"valid": "7", "bad_signature": "3", "missing": "1", "expired": "0"} {
		if got := metric(t, g.admin, `sluice_identity_tokens_total{result="`+result+`"}`); got != want {
			t.Errorf("sluice_identity_tokens_total{result=%q} = %q, want %s", result, got, want)
		}
	}

	// Forward-auth takes the identity from the request the proxy describes.
	faAddr := gw.Addr(server.ListenerForwardAuth)
	fa := func(header map[string]string) int {
		t.Helper()
		h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/x", "X-Forwarded-For": "198.51.100.7"}
		for k, v := range header {
			h[k] = v
		}
		return get(t, "GET", "http://"+faAddr.String()+"/auth", h).StatusCode
	}
	bob := bearer(issue(t, issuerKey, "bob", "premium"))
	var got []int
	for range 6 {
		got = append(got, fa(bob))
	}
	if !equalInts(got, []int{200, 200, 200, 200, 200, 429}) {
		t.Errorf("forward-auth, premium token: got %v", got)
	}

	// The key rotates: after a reload, tokens of the new key verify and
	// those of the old one do not.
	if err := gw.Reload(func() (server.Options, error) {
		o := opts(attackerPub)
		o.Listen, o.Admin = "127.0.0.1:0", "127.0.0.1:0"
		return o, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := statuses(1, forged); got[0] != 200 {
		t.Errorf("after the reload, mallory's token: got %d, want 200 (its own premium counter)", got[0])
	}
	if got := statuses(1, bearer(issue(t, issuerKey, "carol", "premium"))); got[0] != 429 {
		t.Errorf("after the reload, a token of the old key: got %d, want 429 (anonymous, by IP)", got[0])
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestGatewayBoundsForgedTokens: a client behind the trusted proxy that
// keeps sending new forged tokens gets its signature checks bounded; its
// further new tokens, valid ones included, are not checked and count as
// throttled, while another client's new token verifies. The client is the
// one the forwarding headers name, not the proxy.
func TestGatewayBoundsForgedTokens(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	issuerPub, issuerKey, _ := ed25519.GenerateKey(rand.Reader)
	_, attackerKey, _ := ed25519.GenerateKey(rand.Reader)
	g, gw := startGW(t, server.Options{
		Upstream: up.URL,
		Identity: &identity.Options{Keys: []identity.Key{{Public: issuerPub}}, Algorithms: []string{"EdDSA"},
			Issuer: "https://auth.example.com/", Audience: "api", Leeway: 30 * time.Second, MaxBadSignatures: 1,
			Clock: clock.NewFake(time.Now())}, // the bound's clock stands still: no check is refilled
		Limiter: httplimit.Options{
			Tiers: httplimit.Tiers{From: httplimit.JWT("plan"), Client: httplimit.JWT("sub")},
			Rules: []httplimit.Rule{{Name: "api", Key: []httplimit.KeyPart{httplimit.JWT("sub")}, Limit: fixed(1000, time.Hour)}},
		},
		ForwardAuth: &server.ForwardAuthOptions{Listen: "127.0.0.1:0", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
	})
	faAddr := gw.Addr(server.ListenerForwardAuth)
	fa := func(client, tok string) {
		t.Helper()
		h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/x", "X-Forwarded-For": client, "Authorization": "Bearer " + tok}
		if code := get(t, "GET", "http://"+faAddr.String()+"/auth", h).StatusCode; code != 200 {
			t.Fatalf("forward-auth for %s: %d", client, code)
		}
	}
	for i := range 12 { // a burst of 10 checks at 1 a second, then 2 past it
		fa("198.51.100.7", issue(t, attackerKey, fmt.Sprint("forged-", i), "premium"))
	}
	fa("198.51.100.7", issue(t, issuerKey, "alice", "premium"))
	fa("198.51.100.8", issue(t, issuerKey, "bob", "premium"))
	for result, want := range map[string]string{"bad_signature": "10", "throttled": "3", "valid": "1"} {
		if got := metric(t, g.admin, `sluice_identity_tokens_total{result="`+result+`"}`); got != want {
			t.Errorf("sluice_identity_tokens_total{result=%q} = %q, want %s", result, got, want)
		}
	}
}
