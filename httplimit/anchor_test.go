package httplimit_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/httplimit"
)

// A request's billing anchor (Tiers.Anchor, here a header a trusted layer
// sets) moves the periods of its calendar quotas: a monthly quota anchored
// on the 1st by the rule renews on the anchor the request names, and
// Retry-After counts to that day; a request without an anchor, or with one
// that does not parse, keeps the rule's; the anchor keeps the counters.
func TestRequestAnchor(t *testing.T) {
	month, err := calendar.Parse("month anchor=01T00:00 zone=UTC")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, httplimit.Options{
		Tiers: httplimit.Tiers{Anchor: httplimit.Header("X-Anchor")},
		Rules: []httplimit.Rule{{Name: "monthly", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")},
			Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Calendar: month}}},
	})
	now := e.clk.Now().UTC() // t0: 23 November, 12:00
	first := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	day := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		key, anchor string
		renews      time.Time
	}{
		{"a", "28T00:00", day},
		{"b", "", first},
		{"c", "banana", first},
	} {
		q := req{target: "/x", header: map[string]string{"X-API-Key": tc.key}}
		if tc.anchor != "" {
			q.header["X-Anchor"] = tc.anchor
		}
		if got := e.statuses(3, q); got[0] != 200 || got[1] != 200 || got[2] != 429 {
			t.Fatalf("%s: statuses %v, want 200 200 429", tc.key, got)
		}
		ra, err := strconv.Atoi(e.do(q).Header.Get("Retry-After"))
		if err != nil {
			t.Fatal(err)
		}
		if want := tc.renews.Sub(now); time.Duration(ra)*time.Second < want || time.Duration(ra)*time.Second > want+time.Second {
			t.Errorf("%s (anchor %q): Retry-After %ds, want %v (the quota renews %v)", tc.key, tc.anchor, ra, want, tc.renews)
		}
	}
	// Client b names an anchor from now on: its periods move, and the 2
	// it used count in the new one.
	q := req{target: "/x", header: map[string]string{"X-API-Key": "b", "X-Anchor": "28"}}
	if got := e.do(q); got.StatusCode != 429 || got.Header.Get("Retry-After") != strconv.Itoa(int(day.Sub(now)/time.Second)) {
		t.Errorf("b, anchored: %d, Retry-After %q; want 429 up to %v", got.StatusCode, got.Header.Get("Retry-After"), day)
	}
	// At the anchor day, a's quota renews and b's too; c's does not.
	e.clk.Advance(day.Sub(now))
	for _, tc := range []struct {
		key, anchor string
		want        int
	}{{"a", "28T00:00", 200}, {"b", "28", 200}, {"c", "", 429}} {
		q := req{target: "/x", header: map[string]string{"X-API-Key": tc.key}}
		if tc.anchor != "" {
			q.header["X-Anchor"] = tc.anchor
		}
		if got := e.do(q).StatusCode; got != tc.want {
			t.Errorf("%s on the anchor day: %d, want %d", tc.key, got, tc.want)
		}
	}
}
