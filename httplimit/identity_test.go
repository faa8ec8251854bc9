package httplimit_test

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// tokenTable is an httplimit.Identity that knows some Authorization
// values; any other has no claims, as a forged token has none.
type tokenTable struct {
	calls  atomic.Int64
	tokens map[string]map[string]string
	client atomic.Value // the netip.Addr of the last call
}

func (tt *tokenTable) Claims(r *http.Request, client netip.Addr) map[string]string {
	tt.calls.Add(1)
	tt.client.Store(client)
	return tt.tokens[r.Header.Get("Authorization")]
}

func TestJWTKeyPartsAndTiers(t *testing.T) {
	id := &tokenTable{tokens: map[string]map[string]string{
		"Bearer alice":   {"sub": "alice", "plan": "premium", "org_id": "7"},
		"Bearer bob":     {"sub": "bob", "plan": "premium", "org_id": "7"},
		"Bearer carol":   {"sub": "carol"},
		"Bearer nothing": {"plan": "premium"},
	}}
	rules := []httplimit.Rule{
		{Name: "per-user", Key: []httplimit.KeyPart{httplimit.JWT("sub")}, Limit: limit(sluice.FixedWindow, 1, time.Hour),
			Tiers: map[string]sluice.Limit{"premium": limit(sluice.FixedWindow, 3, time.Hour)}},
		{Name: "per-org", Key: []httplimit.KeyPart{httplimit.JWT("org_id")}, Missing: httplimit.MissingSkip, Limit: limit(sluice.FixedWindow, 5, time.Hour)},
	}
	e := newEnv(t, httplimit.Options{Rules: rules, Identity: id, Tiers: httplimit.Tiers{From: httplimit.JWT("plan")}})
	alice := req{target: "/", remote: "192.0.2.1:1", header: map[string]string{"Authorization": "Bearer alice"}}
	eq(t, "premium token", strings.Join(intStrings(e.statuses(4, alice)), ","), "200,200,200,429")
	ev := e.obs.last(t)
	eq(t, "tier", ev.Rules[0].Tier, "premium")
	eq(t, "claims asked once per request", id.calls.Load(), int64(4))
	eq(t, "claims asked with the client's address", id.client.Load().(netip.Addr), netip.MustParseAddr("192.0.2.1"))

	// The org rule counts alice and bob together: 3 admitted, then 2 of bob's.
	bob := req{target: "/", remote: "192.0.2.1:1", header: map[string]string{"Authorization": "Bearer bob"}}
	eq(t, "bob shares the org's counter", strings.Join(intStrings(e.statuses(3, bob)), ","), "200,200,429")
	eq(t, "over the org limit", e.obs.last(t).Rules[1].Outcome, httplimit.OutcomeLimited)

	// No token, or one that does not verify: the default tier, keyed by IP;
	// the org rule, which skips requests without the claim, does not apply.
	forged := req{target: "/", remote: "192.0.2.1:1", header: map[string]string{"Authorization": "Bearer forged"}}
	eq(t, "forged token", strings.Join(intStrings(e.statuses(2, forged)), ","), "200,429")
	ev = e.obs.last(t)
	eq(t, "forged tier", ev.Rules[0].Tier, "free")
	eq(t, "org rule skipped", ev.Rules[1].Outcome, httplimit.OutcomeSkipped)
	eq(t, "no token shares the IP's counter", e.do(req{target: "/", remote: "192.0.2.1:9"}).StatusCode, 429)
	eq(t, "another IP has its own", e.do(req{target: "/", remote: "192.0.2.2:1"}).StatusCode, 200)

	// A valid token without a plan is in the default tier; a premium one
	// without sub is keyed by the client's IP, in its tier.
	carol := req{target: "/", remote: "192.0.2.3:1", header: map[string]string{"Authorization": "Bearer carol"}}
	eq(t, "no plan claim", strings.Join(intStrings(e.statuses(2, carol)), ","), "200,429")
	nothing := req{target: "/", remote: "192.0.2.3:1", header: map[string]string{"Authorization": "Bearer nothing"}}
	eq(t, "no sub: keyed by IP", strings.Join(intStrings(e.statuses(4, nothing)), ","), "200,200,200,429")
	eq(t, "no sub: tier", e.obs.last(t).Rules[0].Tier, "premium")
	eq(t, "no sub: the IP's counter", e.do(req{target: "/", remote: "192.0.2.3:2", header: map[string]string{"Authorization": "Bearer nothing"}}).StatusCode, 429)
}

// TestOverridesBeatTheTokensTier: a client's override, found by its
// subject, applies whatever plan its token names.
func TestOverridesBeatTheTokensTier(t *testing.T) {
	id := &tokenTable{tokens: map[string]map[string]string{
		"Bearer alice": {"sub": "alice", "plan": "free"},
		"Bearer bob":   {"sub": "bob", "plan": "premium"},
		"Bearer plan":  {"sub": "premium", "plan": "free"},
	}}
	rules := []httplimit.Rule{{Name: "api", Key: []httplimit.KeyPart{httplimit.JWT("sub")}, Limit: limit(sluice.FixedWindow, 1, time.Hour),
		Tiers: map[string]sluice.Limit{"premium": limit(sluice.FixedWindow, 3, time.Hour), "enterprise": limit(sluice.FixedWindow, 5, time.Hour)}}}
	ov := &overrideMap{m: map[string]*httplimit.ClientOverride{}}
	e := newEnv(t, httplimit.Options{Rules: rules, Identity: id, Overrides: ov,
		Tiers: httplimit.Tiers{From: httplimit.JWT("plan"), Client: httplimit.JWT("sub")}})
	eq(t, "client source", e.lim.ClientSource(), httplimit.JWT("sub"))
	eq(t, "tier source", e.lim.TierSource(), httplimit.JWT("plan"))
	var err error
	if ov.m["alice"], err = httplimit.NewClientOverride(e.store, "alice", httplimit.Override{Tier: "enterprise"}); err != nil {
		t.Fatal(err)
	}
	if ov.m["bob"], err = httplimit.NewClientOverride(e.store, "bob", httplimit.Override{Limits: map[string]sluice.Limit{"api": limit(sluice.FixedWindow, 2, time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if ov.m["premium"], err = httplimit.NewClientOverride(e.store, "premium", httplimit.Override{Tier: "enterprise"}); err != nil {
		t.Fatal(err)
	}
	alice := req{target: "/", header: map[string]string{"Authorization": "Bearer alice"}}
	eq(t, "alice's token says free, support made her enterprise", strings.Join(intStrings(e.statuses(6, alice)), ","), "200,200,200,200,200,429")
	eq(t, "tier", e.obs.last(t).Rules[0].Tier, "enterprise")
	bob := req{target: "/", header: map[string]string{"Authorization": "Bearer bob"}}
	eq(t, "bob's own limit", strings.Join(intStrings(e.statuses(3, bob)), ","), "200,200,429")
	eq(t, "tier", e.obs.last(t).Rules[0].Tier, httplimit.OverrideTier)
	// Overrides are looked up by the subject, never by the plan's value.
	plan := req{target: "/", header: map[string]string{"Authorization": "Bearer plan"}}
	eq(t, "a subject named premium", strings.Join(intStrings(e.statuses(6, plan)), ","), "200,200,200,200,200,429")
}

func TestJWTKeyPartOptions(t *testing.T) {
	k, err := httplimit.ParseKeyPart("jwt:org_id")
	if err != nil || k != httplimit.JWT("org_id") || k.String() != "jwt:org_id" {
		t.Fatalf("got %v, %v", k, err)
	}
	for _, bad := range []string{"jwt", "jwt:", "jwt:a\x01b", "jwt:" + strings.Repeat("x", 257)} {
		if _, err := httplimit.ParseKeyPart(bad); !errors.Is(err, httplimit.ErrInvalidRule) {
			t.Errorf("%q: got %v, want ErrInvalidRule", bad, err)
		}
	}
	rule := httplimit.Rule{Name: "r", Key: []httplimit.KeyPart{httplimit.JWT("sub")}, Limit: limit(sluice.FixedWindow, 1, time.Hour)}
	for name, opts := range map[string]httplimit.Options{
		"rule without identity": {Rules: []httplimit.Rule{rule}},
		"tier without identity": {Rules: []httplimit.Rule{{Name: "r", Limit: limit(sluice.FixedWindow, 1, time.Hour)}}, Tiers: httplimit.Tiers{From: httplimit.JWT("plan")}},
		"client without from":   {Rules: []httplimit.Rule{rule}, Identity: &tokenTable{}, Tiers: httplimit.Tiers{Client: httplimit.JWT("sub")}},
	} {
		opts.Store = newEnv(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "x", Limit: limit(sluice.FixedWindow, 1, time.Hour)}}}).store
		if _, err := httplimit.New(opts); !errors.Is(err, httplimit.ErrInvalidRule) {
			t.Errorf("%s: got %v, want ErrInvalidRule", name, err)
		}
	}
}
