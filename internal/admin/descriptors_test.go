package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/memstore"
)

// TestDescriptorPenalty: descriptors/show reports a descriptor its rule's
// penalty blocks (blocked_seconds, allowed false, the penalty itself), and
// descriptors/reset lifts the block.
func TestDescriptorPenalty(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	store := memstore.New(memstore.Options{Clock: clk})
	t.Cleanup(func() { store.Close() })
	tree, err := descriptor.New(descriptor.Domain{Name: "api", Descriptors: []descriptor.Descriptor{
		{Key: "login", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 1, Unit: descriptor.Hour,
			Penalty: &sluice.Penalty{Blocks: []time.Duration{2 * time.Hour}, Forget: 24 * time.Hour}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := overrides.NewClients(overrides.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	dset, err := overrides.NewDescriptors(overrides.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := httplimit.New(httplimit.Options{Store: store, Overrides: set,
		Rules: []httplimit.Rule{{Name: "any", Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 5, Period: time.Minute}}}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(rls.Options{Store: store, Rules: tree, Overrides: dset})
	if err != nil {
		t.Fatal(err)
	}
	const token = "descriptor-penalty-token"
	srv := httptest.NewServer(admin.Handler(admin.Options{Overrides: set, Descriptors: dset,
		State: func() admin.State { return admin.State{Limiter: lim, Service: svc, Token: []byte(token)} }}))
	t.Cleanup(srv.Close)
	post := func(path string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{"domain":"api","entries":[{"key":"login","value":"alice"}]}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: status %d, %v", path, resp.StatusCode, err)
		}
		return m
	}
	take := func() bool {
		t.Helper()
		d, err := store.Take(context.Background(), tree.Match("api", []descriptor.Entry{{Key: "login", Value: "alice"}}).Rule.Policy, "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	if !take() || take() { // the second is an offence: blocked for 2 hours
		t.Fatal("want one login admitted, then denied")
	}
	clk.Advance(90 * time.Minute) // the hour's limit has room again; the block holds
	m := post("/admin/v1/descriptors/show")
	st, _ := m["state"].(map[string]any)
	if got := m["blocked_seconds"]; got != 1800.0 || st["allowed"] != false || st["retry_after_seconds"] != 1800.0 {
		t.Fatalf("show: blocked_seconds %v, state %v; want a block of 1800 s", got, st)
	}
	rule, _ := m["rule"].(map[string]any)
	if pen, _ := rule["penalty"].(map[string]any); pen == nil || pen["after"] != 1.0 || pen["forget"] != "24h0m0s" {
		t.Fatalf("show: rule %v, want its penalty", rule)
	}
	if r := post("/admin/v1/descriptors/reset"); r["reset"] != true {
		t.Fatalf("reset: %v", r)
	}
	m = post("/admin/v1/descriptors/show")
	if _, blocked := m["blocked_seconds"]; blocked || !take() {
		t.Fatalf("after reset: %v; want the block lifted and a login admitted", m)
	}
	// The next denial is an offence again, a first one after the reset.
	if take() {
		t.Fatal("want the second login denied")
	}
	if m := post("/admin/v1/descriptors/show"); m["blocked_seconds"] != 7200.0 {
		t.Fatalf("show: %v, want blocked for 7200 s", m)
	}
}

// TestDescriptorCalendarShow: descriptors/show reports a calendar quota's
// current period as period_start and period_end in its zone (a month
// anchored on the 31st, across a daylight-saving change), with the
// anchor its entries carry (rls.Options.Anchor) when the tree has a level
// for it.
func TestDescriptorCalendarShow(t *testing.T) {
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 10, 30, 23, 0, 0, 0, loc))
	store := memstore.New(memstore.Options{Clock: clk})
	t.Cleanup(func() { store.Close() })
	monthly, err := calendar.New(calendar.Spec{Unit: calendar.Month, Anchor: calendar.Anchor{Day: 31}, Zone: loc})
	if err != nil {
		t.Fatal(err)
	}
	quota := &descriptor.RateLimit{Limits: []sluice.Limit{{Algorithm: sluice.FixedWindow, Count: 10, Calendar: monthly}}}
	tree, err := descriptor.New(descriptor.Domain{Name: "api", Descriptors: []descriptor.Descriptor{
		{Key: "api_key", RateLimit: quota},
		{Key: "customer", Descriptors: []descriptor.Descriptor{{Key: "billing_anchor", RateLimit: quota}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	dset, err := overrides.NewDescriptors(overrides.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(rls.Options{Store: store, Rules: tree, Overrides: dset, Anchor: "billing_anchor"})
	if err != nil {
		t.Fatal(err)
	}
	const token = "descriptor-calendar-token"
	srv := httptest.NewServer(admin.Handler(admin.Options{Descriptors: dset,
		State: func() admin.State { return admin.State{Service: svc, Token: []byte(token)} }}))
	t.Cleanup(srv.Close)
	show := func(body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/admin/v1/descriptors/show", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		return m
	}
	for _, tc := range []struct{ body, start, end string }{
		{`{"domain":"api","entries":[{"key":"api_key","value":"k"}]}`, "2026-09-30T00:00:00+02:00", "2026-10-31T00:00:00+01:00"},
		{`{"domain":"api","entries":[{"key":"customer","value":"c"},{"key":"billing_anchor","value":"15T09:00"}]}`, "2026-10-15T09:00:00+02:00", "2026-11-15T09:00:00+01:00"},
	} {
		m := show(tc.body)
		st, _ := m["state"].(map[string]any)
		if st["period_start"] != tc.start || st["period_end"] != tc.end {
			t.Errorf("%s: state %v; want the period %s to %s", tc.body, st, tc.start, tc.end)
		}
		lims, _ := m["limits"].([]any)
		if l, _ := lims[0].(map[string]any); l["period"] != "month" {
			t.Errorf("%s: limits %v, want period month", tc.body, lims)
		}
	}
}
