package rls

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/descriptor"
)

func h0(t *testing.T, s string) calendar.Anchor {
	t.Helper()
	a, err := calendar.ParseAnchor(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// calendarConfig charges every API key a monthly quota renewed on the 31st
// at midnight, Berlin time (the last day of a shorter month), and an
// hourly rate beside it, and holds a daily quota as one of several limits.
const calendarConfig = `
domain: api
descriptors:
  - key: api_key
    rate_limit:
      requests_per_unit: 3
      period: month
      calendar: {anchor: "31T00:00", timezone: Europe/Berlin}
  - key: plan
    rate_limit:
      limits:
        - {requests_per_unit: 100, unit: hour}
        - {requests_per_unit: 2, period: day, algorithm: sliding_window, calendar: {timezone: Europe/Berlin}}
`

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func resetOfStatus(s *rlsv3.RateLimitResponse_DescriptorStatus) time.Duration {
	return s.DurationUntilReset.AsDuration()
}

// TestCalendarQuota runs a monthly quota anchored on the 31st in a zone
// with daylight saving time over gRPC, on the memory store and on Redis
// with the store's fake clock: the period that started on 30 September
// (September has no 31st) at midnight summer time ends on 31 October at
// midnight winter time, duration_until_reset and the headers count to
// that end, the protocol shows the limit per MONTH, and the next period
// runs to 30 November.
func TestCalendarQuota(t *testing.T) {
	loc := berlin(t)
	for name, mk := range penaltyStores(t) {
		t.Run(name, func(t *testing.T) {
			st, clk := mk(t)
			now := time.Date(2026, 10, 30, 23, 0, 0, 0, loc) // winter time since 25 October
			clk.Set(now)
			h := start(t, Options{Store: st, Rules: newSet(t, calendarConfig), Headers: HeadersIETF | HeadersLegacy | HeadersRetryAfter})
			end := time.Date(2026, 10, 31, 0, 0, 0, 0, loc)
			if end.Sub(now) != time.Hour {
				t.Fatalf("test setup: %v to the end", end.Sub(now))
			}
			req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: request(desc("api_key", "k1")).Descriptors}
			for i := range 3 {
				resp := h.call(t, req)
				wantCodes(t, resp, ok, ok)
				s := resp.Statuses[0]
				if s.LimitRemaining != uint32(2-i) || resetOfStatus(s) != time.Hour {
					t.Fatalf("request %d: %d remaining, reset in %v; want %d and 1h", i, s.LimitRemaining, resetOfStatus(s), 2-i)
				}
				if l := s.CurrentLimit; l.RequestsPerUnit != 3 || l.Unit != rlsv3.RateLimitResponse_RateLimit_MONTH {
					t.Fatalf("current limit %v, want 3 per MONTH", l)
				}
			}
			resp := h.call(t, req)
			wantCodes(t, resp, over, over)
			if d := resetOfStatus(resp.Statuses[0]); d != time.Hour {
				t.Errorf("over: reset in %v, want 1h (the period's end)", d)
			}
			hm := headerMap(resp)
			for k, want := range map[string]string{
				"Retry-After":           "3600",
				"X-RateLimit-Reset":     strconv.FormatInt(end.Unix(), 10),
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Limit":     "3",
			} {
				if hm[k] != want {
					t.Errorf("%s: %q, want %q", k, hm[k], want)
				}
			}
			if v := hm["RateLimit"]; !strings.HasSuffix(v, ";r=0;t=3600") {
				t.Errorf("RateLimit: %q, want r=0;t=3600", v)
			}
			if v := hm["RateLimit-Policy"]; !strings.HasSuffix(v, ";q=3;w=2592000;sluice-period=month") {
				t.Errorf("RateLimit-Policy: %q, want q=3, the nominal month and sluice-period=month", v)
			}

			// The period's end renews the quota; the next runs to 30
			// November (30 days, no clock change).
			clk.Set(end.Add(time.Minute))
			resp = h.call(t, req)
			wantCodes(t, resp, ok, ok)
			next := time.Date(2026, 11, 30, 0, 0, 0, 0, loc)
			if s := resp.Statuses[0]; s.LimitRemaining != 2 || resetOfStatus(s) != next.Sub(end.Add(time.Minute)) {
				t.Errorf("next period: %d remaining, reset in %v; want 2 and %v", s.LimitRemaining, resetOfStatus(s), next.Sub(end.Add(time.Minute)))
			}

			// A calendar day among several limits: the daily quota binds,
			// a sliding window whose requests of today weigh until the end
			// of tomorrow.
			dayEnd := time.Date(2026, 11, 2, 0, 0, 0, 0, loc)
			preq := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: request(desc("plan", "p")).Descriptors}
			h.call(t, preq)
			resp = h.call(t, preq)
			if s := resp.Statuses[0]; resp.OverallCode != ok || s.LimitRemaining != 0 || resetOfStatus(s) != dayEnd.Sub(end.Add(time.Minute)) ||
				s.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_DAY {
				t.Errorf("daily quota: %v, %d remaining, reset in %v, limit %v; want OK, 0, %v, per DAY", resp.OverallCode, s.LimitRemaining, resetOfStatus(s), s.CurrentLimit, dayEnd.Sub(end.Add(time.Minute)))
			}
		})
	}
}

// TestCalendarAnchor: with service.anchor, a request's billing_anchor
// entry moves the periods of every calendar quota decided for it to that
// client's anchor; a value that does not parse, or a request without the
// entry, keeps the rule's anchor.
func TestCalendarAnchor(t *testing.T) {
	loc := berlin(t)
	for name, mk := range penaltyStores(t) {
		t.Run(name, func(t *testing.T) {
			st, clk := mk(t)
			now := time.Date(2026, 10, 30, 23, 0, 0, 0, loc)
			clk.Set(now)
			h := start(t, Options{Store: st, Rules: newSet(t, calendarConfig), Anchor: "billing_anchor"})
			anchored := time.Date(2026, 11, 15, 9, 0, 0, 0, loc).Sub(now) // from 15 October 09:00 summer time
			call := func(anchor string) *rlsv3.RateLimitResponse {
				t.Helper()
				ds := request(desc("api_key", "k2")).Descriptors
				if anchor != "" {
					ds = append(ds, desc("billing_anchor", anchor))
				}
				return h.call(t, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: ds})
			}
			resp := call("15T09:00")
			if d := resetOfStatus(resp.Statuses[0]); resp.OverallCode != ok || d != anchored {
				t.Fatalf("anchored: %v, reset in %v; want OK and %v", resp.OverallCode, d, anchored)
			}
			if len(resp.Statuses) != 2 || resp.Statuses[1].CurrentLimit != nil {
				t.Errorf("the anchor's own descriptor should match no rule: %v", resp.Statuses)
			}
			if d := resetOfStatus(call("").Statuses[0]); d != time.Hour {
				t.Errorf("no anchor: reset in %v, want 1h (the rule's anchor)", d)
			}
			if d := resetOfStatus(call("the 15th").Statuses[0]); d != time.Hour {
				t.Errorf("an anchor that does not parse: reset in %v, want 1h (the rule's anchor)", d)
			}
		})
	}
}

// TestCalendarAnchorBound: a rule keeps at most descriptor.MaxAnchors
// anchors; a request naming one more is decided under the rule's own.
func TestCalendarAnchorBound(t *testing.T) {
	set := newSet(t, calendarConfig)
	r := set.Match("api", []descriptor.Entry{{Key: "api_key", Value: "x"}}).Rule
	seen := map[*descriptor.Rule]bool{}
	n := 0
	for day := 1; day <= 28 && n < descriptor.MaxAnchors+10; day++ {
		for minute := 0; minute < 24*60 && n < descriptor.MaxAnchors+10; minute++ {
			a := fmt.Sprintf("%02dT%02d:%02d", day, minute/60, minute%60)
			h := h0(t, a)
			got := r.WithAnchor(h)
			if n < descriptor.MaxAnchors && got == r && a != "31T00:00" {
				t.Fatalf("anchor %d (%s) not applied", n, a)
			}
			if n >= descriptor.MaxAnchors && got != r {
				t.Fatalf("anchor %d (%s) kept beyond the bound", n, a)
			}
			if got.Policy.Name() != r.Policy.Name() {
				t.Fatalf("anchored policy %q, want the rule's name %q (its counters)", got.Policy.Name(), r.Policy.Name())
			}
			seen[got] = true
			n++
		}
	}
	if len(seen) != descriptor.MaxAnchors+1 {
		t.Errorf("%d distinct rules, want %d anchored and the rule's own", len(seen), descriptor.MaxAnchors)
	}
	// One already kept is still served.
	if got := r.WithAnchor(h0(t, "01T00:00")); got == r {
		t.Error("a kept anchor is no longer applied")
	}
}
