package server_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the tests name zones; they must load without a zoneinfo database

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/httplimit"
)

// retryAfter returns a 429's Retry-After in seconds.
func retryAfter(t *testing.T, url, apiKey string) time.Duration {
	t.Helper()
	resp := get(t, "GET", url, map[string]string{"X-API-Key": apiKey})
	if resp.StatusCode != 429 {
		t.Fatalf("got %d, want 429", resp.StatusCode)
	}
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q: %v", resp.Header.Get("Retry-After"), err)
	}
	return time.Duration(s) * time.Second
}

// A monthly quota denies with Retry-After up to its anchor day, not 30
// days; a client's own anchor, set through the admin API, moves its
// renewal and keeps what it has used; key show gives the period.
func TestCalendarQuotaHeadersAndAnchor(t *testing.T) {
	now := time.Now().UTC()
	// Anchors on the days 5 and 12 days ahead: those dates exist, so the
	// periods containing now end on them, within 5 and 12 days.
	day5, day12 := now.AddDate(0, 0, 5).Day(), now.AddDate(0, 0, 12).Day()
	anchor := func(d int) *calendar.Calendar {
		c, err := calendar.Parse(fmt.Sprintf("month anchor=%d zone=Europe/Berlin", d))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cal := anchor(day5)
	opts := adminOptions()
	opts.Limiter = httplimit.Options{
		Headers: httplimit.HeadersIETF,
		Tiers:   httplimit.Tiers{From: httplimit.Header("X-API-Key")},
		Rules: []httplimit.Rule{{Name: "monthly", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")},
			Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Calendar: cal}}},
	}
	g, _ := startGW(t, opts)
	if n := allowed(t, g.url+"/x", "k1", 2); n != 2 {
		t.Fatalf("allowed %d of 2", n)
	}
	within := func(got time.Duration, c *calendar.Calendar, before, after time.Time) {
		t.Helper()
		_, end := c.Bounds(before)
		lo, hi := end.Sub(after)-time.Second, end.Sub(before)+time.Second
		if got < lo || got > hi {
			t.Errorf("Retry-After %v: want the time to the anchor, %v to %v (the period ends %v)", got, lo, hi, end)
		}
		if got > 13*24*time.Hour {
			t.Errorf("Retry-After %v: more than the 12 days to the anchor", got)
		}
	}
	before := time.Now()
	got := retryAfter(t, g.url+"/x", "k1")
	within(got, cal, before, time.Now())

	resp := get(t, "GET", g.url+"/x", map[string]string{"X-API-Key": "k2"})
	if p := resp.Header.Get("RateLimit-Policy"); !strings.Contains(p, `"monthly";q=2;w=2592000;sluice-period=month`) {
		t.Errorf("RateLimit-Policy %q: want the monthly quota with sluice-period=month", p)
	}

	// The client's own anchor: its quota renews on day12 instead, and the
	// 2 it used still count.
	code, m, _ := call(t, "PATCH", g.admin+"/admin/v1/clients/k1", fmt.Sprintf(`{"anchor": "%d"}`, day12))
	if code != 200 || m["anchor"] != strconv.Itoa(day12) {
		t.Fatalf("PATCH anchor: %d %v", code, m)
	}
	moved := anchor(day12)
	before = time.Now()
	got = retryAfter(t, g.url+"/x", "k1")
	within(got, moved, before, time.Now())

	code, m, _ = call(t, "POST", g.admin+"/admin/v1/keys/show", `{"rule": "monthly", "key": ["k1"], "client": "k1"}`)
	if code != 200 {
		t.Fatalf("show: %d %v", code, m)
	}
	used, _, _ := state(t, m, 0)
	st := m["limits"].([]any)[0].(map[string]any)["state"].(map[string]any)
	start, end := moved.Bounds(time.Now())
	if used != 2 || st["period_start"] != start.Format(time.RFC3339) || st["period_end"] != end.Format(time.RFC3339) {
		t.Errorf("show: used %v, period %v to %v; want 2 used, %v to %v", used, st["period_start"], st["period_end"], start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
}
