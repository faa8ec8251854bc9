package rls

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

// compatConfig holds the rules of the tests that compare the service's
// answers with envoyproxy/ratelimit's. At t0 a minute's window ends in
// 50 s and a quarter hour's in 890 s.
const compatConfig = `
domain: compat
descriptors:
  - key: account                # envoyproxy/ratelimit's form
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: quarter                # 5 per 15 minutes
    rate_limit: {requests_per_unit: 5, period: 15m}
  - key: odd                    # 1 per 1.5 seconds
    rate_limit: {requests_per_unit: 1, period: 1500ms}
  - key: bucket                 # 20 a second, bursts of 40
    rate_limit: {requests_per_unit: 20, unit: second, algorithm: token_bucket, burst: 40}
  - key: blocked                # denies every request
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
  - key: enforced               # the same limit as shadow, enforced
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
`

func compatRequest(ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "compat", Descriptors: ds}
}

// TestCompatCheckAtLimit pins how a check-only descriptor (hits_addend 0)
// is decided at its limit, and why it differs from envoyproxy/ratelimit.
// The peer decides every descriptor by its counter after the request's
// hits are added, OVER_LIMIT only when that count is above the limit: a
// check (0 hits) at exactly the limit is OK with 0 remaining, and only a
// counter already past the limit refuses it. Its counter gets past the
// limit because it counts the hits of requests it refuses. Sluice counts
// nothing for a refused charge, so a counter never passes its limit: a
// check that answered OK at the limit would answer OK for ever, and the
// login recipe (check on the request, charge the failure when the stream
// is done) would let every attempt through. Sluice's check asks whether
// one more unit would pass: at the limit it is OVER_LIMIT. The recipe
// lets exactly the limit's number of failures through per window, where
// the peer lets one more through (its charge at the limit is refused by
// Sluice).
func TestCompatCheckAtLimit(t *testing.T) {
	h := start(t, Options{Rules: newSet(t, compatConfig)})
	check := compatRequest(hits(desc("account", "a"), 0))
	charge := compatRequest(desc("account", "a"))
	passed := 0
	for attempt := range 10 {
		resp := h.call(t, check)
		if resp.OverallCode != ok {
			continue
		}
		passed++
		if got, want := resp.Statuses[0].LimitRemaining, uint32(3-attempt); got != want {
			t.Errorf("check %d: limit_remaining %d, want %d", attempt, got, want)
		}
		h.call(t, charge) // the attempt failed: the stream's end charges it
	}
	if passed != 3 {
		t.Errorf("attempts past the check in one window: %d, want 3 (the limit)", passed)
	}
	resp := h.call(t, check)
	wantCodes(t, resp, over, over)
	if resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("check at the limit: limit_remaining %d, want 0", resp.Statuses[0].LimitRemaining)
	}
	// The next window lets the checks through again.
	h.clock.Advance(50 * time.Second)
	wantCodes(t, h.call(t, check), ok, ok)
}

// TestCompatShadowIsADryRun: a shadow-mode limit is decided as if it were
// enforced, except that it never refuses: a request it would refuse is
// admitted and, as an enforced limit would, charged nothing. So its
// shadow_limited outcomes are exactly the OVER_LIMIT answers that
// enforcing it would give, and turning shadow mode off changes no counter:
// the next answers are those the shadow decisions foretold.
// envoyproxy/ratelimit counts a request its shadow limit would refuse, as
// it counts every refused request when enforcing; Sluice's shadow mode
// mirrors Sluice's enforcement in the same way.
func TestCompatShadowIsADryRun(t *testing.T) {
	h := start(t, Options{Rules: newSet(t, compatConfig)})
	type answer struct {
		over      bool
		remaining uint32
	}
	shadowMode := true
	decide := func(key string, n uint64) answer {
		t.Helper()
		resp := h.call(t, compatRequest(hits(desc(key, "c"), n)))
		a := answer{remaining: resp.Statuses[0].LimitRemaining}
		switch {
		case key == "shadow" && shadowMode:
			if resp.OverallCode != ok {
				t.Fatalf("a shadow limit refused: %v", resp)
			}
			a.over = h.obs.last(t).Descriptors[0].Outcome == OutcomeShadowLimited
		default:
			a.over = resp.OverallCode == over
		}
		return a
	}
	costs := []uint64{1, 2, 1, 1, 2, 1, 3, 1, 1, 2}
	overs := 0
	for i, n := range costs {
		s, e := decide("shadow", n), decide("enforced", n)
		if s != e {
			t.Fatalf("step %d (cost %d): shadow %+v, enforced %+v; want the same", i, n, s, e)
		}
		if s.over {
			overs++
		}
		h.clock.Advance(7 * time.Second) // the sliding window frees units as it moves
	}
	if overs == 0 {
		t.Fatal("no step went over the limit: the test shows nothing")
	}
	// Shadow mode off: the same limit, now enforced, keeps its counter.
	off := strings.Replace(compatConfig, "shadow_mode: true", "shadow_mode: false", 1)
	h.reload(t, newSet(t, off))
	shadowMode = false
	for i, n := range costs[:4] {
		s, e := decide("enforced", n), decide("shadow", n)
		if s != e {
			t.Fatalf("after shadow mode, step %d (cost %d): formerly shadow %+v, enforced %+v; want the same", i, n, e, s)
		}
	}
}

// TestCompatCostBeyondLimit: a cost larger than the whole limit can never
// pass. The answer says so honestly: OVER_LIMIT, the limit's true
// remaining and time until it is full (nothing was charged), and no
// Retry-After, since waiting never helps.
func TestCompatCostBeyondLimit(t *testing.T) {
	h := start(t, Options{Rules: newSet(t, compatConfig), Headers: HeadersIETF | HeadersLegacy | HeadersRetryAfter})
	wantCodes(t, h.call(t, compatRequest(desc("account", "a"))), ok, ok)
	h.clock.Advance(time.Second)
	resp := h.call(t, compatRequest(hits(desc("account", "a"), 4)))
	wantCodes(t, resp, over, over)
	st := resp.Statuses[0]
	if st.LimitRemaining != 2 {
		t.Errorf("limit_remaining %d, want 2 (what the limit still has)", st.LimitRemaining)
	}
	if got := st.DurationUntilReset.AsDuration(); got != 49*time.Second {
		t.Errorf("duration_until_reset %v, want 49s (until the window ends)", got)
	}
	hdr := headerMap(resp)
	for k, want := range map[string]string{
		"RateLimit":             `"compat.account";r=2;t=49`,
		"X-RateLimit-Limit":     "3",
		"X-RateLimit-Remaining": "2",
		"X-RateLimit-Reset":     "1800000060",
		"Retry-After":           "",
	} {
		if hdr[k] != want {
			t.Errorf("%s: got %q, want %q", k, hdr[k], want)
		}
	}
	// Nothing was charged: the limit's two units are still there.
	resp = h.call(t, compatRequest(hits(desc("account", "a"), 2)))
	wantCodes(t, resp, ok, ok)
	if resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("after the impossible cost: remaining %d, want 0", resp.Statuses[0].LimitRemaining)
	}

	// Beside a limit a retry would pass, the request still never passes.
	h.call(t, compatRequest(desc("quarter", "q"))) // 4 left
	resp = h.call(t, compatRequest(desc("account", "a"), hits(desc("quarter", "q"), 6)))
	wantCodes(t, resp, over, over, over)
	if got := headerMap(resp)["Retry-After"]; got != "" {
		t.Errorf("beside a used-up limit: Retry-After %q, want none", got)
	}
	// A limit of zero requests never admits anything either.
	resp = h.call(t, compatRequest(desc("blocked", "b")))
	wantCodes(t, resp, over, over)
	if got := headerMap(resp)["Retry-After"]; got != "" {
		t.Errorf("zero requests per unit: Retry-After %q, want none", got)
	}
}

// TestCompatCurrentLimit: current_limit says the limit as it is, with
// unit_multiplier where the period is not one whole unit.
func TestCompatCurrentLimit(t *testing.T) {
	h := start(t, Options{Rules: newSet(t, compatConfig)})
	resp := h.call(t, compatRequest(desc("account", "a"), desc("quarter", "q"), desc("odd", "o")))
	for i, want := range []struct {
		rpu  uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
		mult uint32 // 0: none sent, the protocol's default of 1
	}{
		{3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0},
		{5, rlsv3.RateLimitResponse_RateLimit_MINUTE, 15},
		{2, rlsv3.RateLimitResponse_RateLimit_SECOND, 3},
	} {
		l := resp.Statuses[i].CurrentLimit
		if l.GetRequestsPerUnit() != want.rpu || l.GetUnit() != want.unit || l.GetUnitMultiplier().GetValue() != want.mult {
			t.Errorf("descriptor %d: current_limit %v, want %d per %d × %v", i, l, want.rpu, max(want.mult, 1), want.unit)
		}
		if want.mult == 0 && l.GetUnitMultiplier() != nil {
			t.Errorf("descriptor %d: unit_multiplier %v, want none", i, l.GetUnitMultiplier())
		}
	}
	if got := resp.Statuses[1].DurationUntilReset.AsDuration(); got != 890*time.Second {
		t.Errorf("5 per 15 minutes: duration_until_reset %v, want 890s", got)
	}
	code, out := post(t, h.url, `{"domain":"compat","descriptors":[{"entries":[{"key":"quarter","value":"j"}]}]}`)
	var jr jsonResponse
	if err := json.Unmarshal([]byte(out), &jr); err != nil || code != 200 || len(jr.Statuses) != 1 {
		t.Fatalf("/json: %d %s: %v", code, out, err)
	}
	if l := jr.Statuses[0].CurrentLimit; l.RequestsPerUnit != 5 || l.Unit != "MINUTE" || l.UnitMultiplier != 15 {
		t.Errorf("/json: current_limit %+v, want 5 per 15 MINUTE", l)
	}
}

// jsonResponse is the part of a /json answer the tests read, decoded with
// encoding/json so that they see the protobuf JSON mapping's own form.
type jsonResponse struct {
	Statuses []struct {
		CurrentLimit struct {
			RequestsPerUnit int64
			Unit            string
			UnitMultiplier  int64
		}
		DurationUntilReset string
	}
}

// TestCompatWholeSeconds: duration_until_reset is whole seconds, rounded
// up, over gRPC and /json alike, as envoyproxy/ratelimit answers (and as
// Envoy reads it: its own X-RateLimit-Reset takes the seconds only).
func TestCompatWholeSeconds(t *testing.T) {
	h := start(t, Options{Rules: newSet(t, compatConfig)})
	h.clock.Advance(250 * time.Millisecond) // 49.75 s to the window's end
	resp := h.call(t, compatRequest(desc("account", "a")))
	if d := resp.Statuses[0].DurationUntilReset; d.GetSeconds() != 50 || d.GetNanos() != 0 {
		t.Errorf("gRPC: duration_until_reset %v, want 50s", d.AsDuration())
	}
	code, out := post(t, h.url, `{"domain":"compat","descriptors":[{"entries":[{"key":"account","value":"a"}]}]}`)
	var jr jsonResponse
	if err := json.Unmarshal([]byte(out), &jr); err != nil || code != 200 || len(jr.Statuses) != 1 {
		t.Fatalf("/json: %d %s: %v", code, out, err)
	}
	if got := jr.Statuses[0].DurationUntilReset; got != "50s" {
		t.Errorf("/json: durationUntilReset %q, want \"50s\"", got)
	}
}

// TestCompatLimitIsCapacity: the legacy headers never show more remaining
// than their limit: a bucket's limit there is its burst, as the library's
// Decision.Limit says; the IETF policy keeps the quota per window, with
// sluice-burst.
func TestCompatLimitIsCapacity(t *testing.T) {
	h := start(t, Options{Rules: newSet(t, compatConfig), Headers: HeadersIETF | HeadersLegacy})
	hdr := headerMap(h.call(t, compatRequest(desc("bucket", "k"))))
	for k, want := range map[string]string{
		"X-RateLimit-Limit":     "40",
		"X-RateLimit-Remaining": "39",
		"RateLimit-Policy":      `"compat.bucket";q=20;w=1;sluice-burst=40`,
		"RateLimit":             `"compat.bucket";r=39;t=1`,
	} {
		if hdr[k] != want {
			t.Errorf("%s: got %q, want %q", k, hdr[k], want)
		}
	}
	// Refused by a cost beyond its burst, the bucket still says 40.
	hdr = headerMap(h.call(t, compatRequest(hits(desc("bucket", "k"), 41))))
	if hdr["X-RateLimit-Limit"] != "40" || hdr["X-RateLimit-Remaining"] != "39" {
		t.Errorf("a cost beyond the burst: legacy limit %q, remaining %q; want 40 and 39", hdr["X-RateLimit-Limit"], hdr["X-RateLimit-Remaining"])
	}
}

// TestCompatEnvoyHeaders: HeadersEnvoy adds the headers
// envoyproxy/ratelimit adds with LIMIT_RESPONSE_HEADERS_ENABLED: the
// limit, the units remaining and the seconds until the reset, under its
// default names or those its LIMIT_*_HEADER settings give.
func TestCompatEnvoyHeaders(t *testing.T) {
	check := func(t *testing.T, resp *rlsv3.RateLimitResponse, want map[string]string) {
		t.Helper()
		got := headerMap(resp)
		if len(got) != len(want) {
			t.Errorf("got headers %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: got %q, want %q", k, got[k], v)
			}
		}
	}
	t.Run("default names", func(t *testing.T) {
		h := start(t, Options{Rules: newSet(t, compatConfig), Headers: HeadersEnvoy})
		h.clock.Advance(250 * time.Millisecond) // 49.75 s to the window's end
		check(t, h.call(t, compatRequest(desc("account", "a"))),
			map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "50"})
		h.call(t, compatRequest(hits(desc("account", "a"), 2)))
		check(t, h.call(t, compatRequest(desc("account", "a"))),
			map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "50"})
		// A bucket's limit is its burst; a cost that never passes tells
		// when the bucket is full again.
		check(t, h.call(t, compatRequest(desc("bucket", "k"))),
			map[string]string{"RateLimit-Limit": "40", "RateLimit-Remaining": "39", "RateLimit-Reset": "1"})
		check(t, h.call(t, compatRequest(hits(desc("bucket", "k"), 41))),
			map[string]string{"RateLimit-Limit": "40", "RateLimit-Remaining": "39", "RateLimit-Reset": "1"})
	})
	t.Run("names of the peer's settings, beside Sluice's", func(t *testing.T) {
		h := start(t, Options{Rules: newSet(t, compatConfig), Headers: HeadersEnvoy | HeadersRetryAfter,
			EnvoyHeaderNames: EnvoyHeaderNames{Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining", Reset: "X-RateLimit-Reset"}})
		h.call(t, compatRequest(hits(desc("account", "a"), 3)))
		check(t, h.call(t, compatRequest(desc("account", "a"))),
			map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "50", "Retry-After": "50"})
	})
	t.Run("invalid name", func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		defer st.Close()
		_, err := New(Options{Store: st, Rules: newSet(t, compatConfig), EnvoyHeaderNames: EnvoyHeaderNames{Reset: "Rate Limit"}})
		if err == nil || !strings.Contains(err.Error(), `"Rate Limit"`) {
			t.Errorf("got %v, want an error naming the invalid header", err)
		}
	})
}

// The config file's default names of the envoy headers are the service's.
func TestEnvoyHeaderDefaults(t *testing.T) {
	want := config.EnvoyHeaders{Limit: DefaultEnvoyLimitHeader, Remaining: DefaultEnvoyRemainingHeader, Reset: DefaultEnvoyResetHeader}
	if config.DefaultEnvoyHeaders != want {
		t.Errorf("config.DefaultEnvoyHeaders %+v, want the service's %+v", config.DefaultEnvoyHeaders, want)
	}
}
