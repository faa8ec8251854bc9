package server_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/identity"
	"github.com/sluicehq/sluice/internal/server"
)

// A customer's month starts on the day its token says (tiers.anchor:
// jwt:billing_anchor): through a real gateway and upstream, a monthly
// quota denied for a token anchored 5 days ahead answers Retry-After up to
// that day, and one for a token without an anchor up to the rule's, 12
// days ahead. The claim reaches the rules only because the verifier keeps
// the claims that tiers.anchor names.
func TestGatewayAnchorFromToken(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now().UTC()
	day5, day12 := now.AddDate(0, 0, 5).Day(), now.AddDate(0, 0, 12).Day()
	month, err := calendar.Parse(fmt.Sprintf("month anchor=%02dT00:00 zone=UTC", day12))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := startGW(t, server.Options{
		Upstream: up.URL,
		Identity: &identity.Options{Keys: []identity.Key{{Public: pub}}, Algorithms: []string{"EdDSA"}, Issuer: "https://auth.example.com/", Audience: "api"},
		Limiter: httplimit.Options{
			Tiers: httplimit.Tiers{From: httplimit.JWT("plan"), Anchor: httplimit.JWT("billing_anchor")},
			Rules: []httplimit.Rule{{Name: "monthly", Key: []httplimit.KeyPart{httplimit.JWT("sub")},
				Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Calendar: month}}},
		},
	})
	token := func(sub, anchor string) map[string]string {
		t.Helper()
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			t.Fatal(err)
		}
		c := map[string]any{"iss": "https://auth.example.com/", "aud": "api", "sub": sub, "plan": "free",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
		if anchor != "" {
			c["billing_anchor"] = anchor
		}
		payload, _ := json.Marshal(c)
		jws, err := s.Sign(payload)
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := jws.CompactSerialize()
		return bearer(tok)
	}
	for _, tc := range []struct {
		sub, anchor string
		day         int
	}{{"alice", fmt.Sprintf("%02dT00:00", day5), day5}, {"bob", "", day12}} {
		h := token(tc.sub, tc.anchor)
		for i := range 2 {
			if code := get(t, "GET", g.url+"/x", h).StatusCode; code != 200 {
				t.Fatalf("%s: request %d got %d, want 200", tc.sub, i+1, code)
			}
		}
		before := time.Now()
		resp := get(t, "GET", g.url+"/x", h)
		after := time.Now()
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 429 || err != nil {
			t.Fatalf("%s: got %d, Retry-After %q; want 429 with Retry-After", tc.sub, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		_, end := month.WithAnchor(calendar.Anchor{Day: tc.day}).Bounds(before)
		lo, hi := end.Sub(after)-time.Second, end.Sub(before)+time.Second
		if got := time.Duration(ra) * time.Second; got < lo || got > hi {
			t.Errorf("%s (anchor %q): Retry-After %v, want %v to %v (the month renews %v)", tc.sub, tc.anchor, got, lo, hi, end)
		}
	}
}
