package rls

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

// testConfig has one rule of every kind the tree offers, in
// envoyproxy/ratelimit's YAML with Sluice's extensions.
const testConfig = `
domain: test
descriptors:
  - key: remote_address            # a default entry: one counter per value
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /login                  # an exact value
    rate_limit: {unit: minute, requests_per_unit: 2, name: login}
  - key: path
    value: /api/*                  # a wildcard: one counter per value
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /shared/*               # a wildcard sharing one counter
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /free                   # an allow-list entry: no limit
  - key: tier
    value: vip
    rate_limit: {unlimited: true}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user                      # nested entries
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: hour, requests_per_unit: 2, name: free_plan}
  - key: team
    rate_limit:
      unit: minute
      requests_per_unit: 10
      name: per_team
      replaces: [{name: login}]
  - key: multi                     # Sluice: several limits charged together
    rate_limit:
      limits:
        - {requests_per_unit: 2, unit: second, algorithm: gcra, burst: 2}
        - {requests_per_unit: 3, unit: hour}
`

// t0 is a minute boundary plus 10 s: fixed windows of a minute reset in 50 s.
var t0 = time.Unix(1_800_000_010, 0)

func newSet(t testing.TB, yamls ...string) *descriptor.Set {
	t.Helper()
	var ds []descriptor.Domain
	for i, y := range yamls {
		d, err := config.ParseDescriptors([]byte(y), "test"+string(rune('0'+i))+".yaml")
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		ds = append(ds, d)
	}
	set, err := descriptor.New(ds...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// recorder is an Observer that keeps copies of the events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(_ context.Context, e *Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *e
	c.Descriptors = append([]DescriptorEvent(nil), e.Descriptors...)
	r.events = append(r.events, c)
}

func (r *recorder) last(t *testing.T) Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		t.Fatal("no event observed")
	}
	return r.events[len(r.events)-1]
}

// harness is a service behind a real gRPC server and a real HTTP server on
// loopback, with a client from go-control-plane's generated code.
type harness struct {
	svc    *Service // the service of the moment
	cur    atomic.Pointer[Service]
	opts   Options
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	url    string // the HTTP server's base URL
	clock  *clock.Fake
	obs    *recorder
}

func start(t *testing.T, opts Options) *harness {
	t.Helper()
	h := &harness{obs: &recorder{}}
	if opts.Store == nil {
		h.clock = clock.NewFake(t0)
		st := memstore.New(memstore.Options{Clock: h.clock})
		t.Cleanup(func() { st.Close() })
		opts.Store = st
	}
	if opts.Rules == nil {
		opts.Rules = newSet(t, testConfig)
	}
	if opts.Observer == nil {
		opts.Observer = h.obs
	}
	svc, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.svc, h.opts = svc, opts
	h.cur.Store(svc)
	g, health := NewGRPCServer(Current(h.cur.Load))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	hs := httptest.NewServer(HTTPHandler(Current(h.cur.Load), health))
	t.Cleanup(hs.Close)
	h.url = hs.URL
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.conn = conn
	h.client = rlsv3.NewRateLimitServiceClient(conn)
	return h
}

// reload serves a new service with the harness's options and rules, on the
// same store, as a server does on a reload.
func (h *harness) reload(t *testing.T, rules Rules) {
	t.Helper()
	o := h.opts
	o.Rules = rules
	svc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h.svc = svc
	h.cur.Store(svc)
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func hits(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func request(ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "test", Descriptors: ds}
}

func (h *harness) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// codes returns the overall code and each descriptor's.
func codesOf(resp *rlsv3.RateLimitResponse) []rlsv3.RateLimitResponse_Code {
	out := []rlsv3.RateLimitResponse_Code{resp.OverallCode}
	for _, s := range resp.Statuses {
		out = append(out, s.Code)
	}
	return out
}

func wantCodes(t *testing.T, resp *rlsv3.RateLimitResponse, want ...rlsv3.RateLimitResponse_Code) {
	t.Helper()
	got := codesOf(resp)
	if len(got) != len(want) {
		t.Fatalf("got codes %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got codes %v, want %v", got, want)
		}
	}
}

// TestMatching sends one descriptor of every kind of rule through the
// service, until each limit is reached.
func TestMatching(t *testing.T) {
	tests := []struct {
		name  string
		descs [][]string // one descriptor per request, in order
		want  []rlsv3.RateLimitResponse_Code
	}{
		{"default entry per value", [][]string{
			{"remote_address", "1.1.1.1"}, {"remote_address", "1.1.1.1"}, {"remote_address", "1.1.1.1"},
			{"remote_address", "1.1.1.1"}, {"remote_address", "2.2.2.2"},
		}, []rlsv3.RateLimitResponse_Code{ok, ok, ok, over, ok}},
		{"exact value", [][]string{{"path", "/login"}, {"path", "/login"}, {"path", "/login"}},
			[]rlsv3.RateLimitResponse_Code{ok, ok, over}},
		{"wildcard per value", [][]string{{"path", "/api/a"}, {"path", "/api/a"}, {"path", "/api/a"}, {"path", "/api/b"}},
			[]rlsv3.RateLimitResponse_Code{ok, ok, over, ok}},
		{"wildcard shared", [][]string{{"path", "/shared/a"}, {"path", "/shared/b"}, {"path", "/shared/c"}},
			[]rlsv3.RateLimitResponse_Code{ok, ok, over}},
		{"allow-list entry", [][]string{{"path", "/free"}, {"path", "/free"}, {"path", "/free"}, {"path", "/free"}},
			[]rlsv3.RateLimitResponse_Code{ok, ok, ok, ok}},
		{"no rule", [][]string{{"unknown", "x"}, {"unknown", "x"}, {"path", "/other"}, {"path", "/other"}},
			[]rlsv3.RateLimitResponse_Code{ok, ok, ok, ok}},
		{"unlimited", [][]string{{"tier", "vip"}, {"tier", "vip"}, {"tier", "vip"}},
			[]rlsv3.RateLimitResponse_Code{ok, ok, ok}},
		{"deny all", [][]string{{"blocked", "x"}}, []rlsv3.RateLimitResponse_Code{over}},
		{"nested", [][]string{{"user", "u1", "plan", "free"}, {"user", "u1", "plan", "free"}, {"user", "u1", "plan", "free"}, {"user", "u2", "plan", "free"}},
			[]rlsv3.RateLimitResponse_Code{ok, ok, over, ok}},
		{"nested, too short or too long", [][]string{{"user", "u1"}, {"user", "u1"}, {"user", "u1"}, {"user", "u1", "plan", "free", "x", "y"}},
			[]rlsv3.RateLimitResponse_Code{ok, ok, ok, ok}},
		{"several limits", [][]string{{"multi", "k"}, {"multi", "k"}, {"multi", "k"}},
			[]rlsv3.RateLimitResponse_Code{ok, ok, over}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{})
			for i, kv := range tt.descs {
				resp := h.call(t, request(desc(kv...)))
				if resp.OverallCode != tt.want[i] || resp.Statuses[0].Code != tt.want[i] {
					t.Fatalf("request %d %v: got %v, want %v", i, kv, codesOf(resp), tt.want[i])
				}
			}
		})
	}
}

func TestStatus(t *testing.T) {
	h := start(t, Options{})
	resp := h.call(t, request(desc("path", "/login"), desc("tier", "vip"), desc("path", "/free"), desc("multi", "k")))
	wantCodes(t, resp, ok, ok, ok, ok, ok)
	login := resp.Statuses[0]
	if l := login.CurrentLimit; l == nil || l.Name != "login" || l.RequestsPerUnit != 2 || l.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("login current_limit: got %v, want login 2/MINUTE", l)
	}
	if login.LimitRemaining != 1 {
		t.Errorf("login limit_remaining: got %d, want 1", login.LimitRemaining)
	}
	if got := login.DurationUntilReset.AsDuration(); got != 50*time.Second {
		t.Errorf("login duration_until_reset: got %v, want 50s (the fixed window's end)", got)
	}
	if vip := resp.Statuses[1]; vip.CurrentLimit != nil || vip.LimitRemaining != math.MaxUint32 {
		t.Errorf("unlimited: got %v, want no current_limit and remaining MaxUint32", vip)
	}
	if free := resp.Statuses[2]; free.CurrentLimit != nil || free.DurationUntilReset != nil {
		t.Errorf("allow-listed: got %v, want no limit", free)
	}
	// Two limits: the binding one is the per-second GCRA (1 left, like the
	// hourly one, but back to full sooner... the fewest remaining wins).
	multi := resp.Statuses[3]
	if multi.CurrentLimit == nil || multi.LimitRemaining != 1 {
		t.Errorf("several limits: got %v, want 1 remaining", multi)
	}
	// Over the limit, duration_until_reset is the time until a retry passes.
	h.call(t, request(desc("path", "/login")))
	h.clock.Advance(20 * time.Second)
	resp = h.call(t, request(desc("path", "/login")))
	wantCodes(t, resp, over, over)
	if got := resp.Statuses[0].DurationUntilReset.AsDuration(); got != 30*time.Second {
		t.Errorf("over the limit: duration_until_reset %v, want 30s", got)
	}
	if resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("over the limit: limit_remaining %d, want 0", resp.Statuses[0].LimitRemaining)
	}
}

// TestBatch: a request rejected by one descriptor is charged to none.
func TestBatch(t *testing.T) {
	h := start(t, Options{})
	for range 2 {
		wantCodes(t, h.call(t, request(desc("remote_address", "a"), desc("path", "/login"))), ok, ok, ok)
	}
	resp := h.call(t, request(desc("remote_address", "a"), desc("path", "/login")))
	wantCodes(t, resp, over, ok, over)
	if got := resp.Statuses[0].LimitRemaining; got != 1 {
		t.Errorf("the admitted descriptor of a rejected request: remaining %d, want 1 (not charged)", got)
	}
	if ev := h.obs.last(t); ev.Code != CodeOverLimit || ev.Descriptors[0].Outcome != OutcomeSkipped || ev.Descriptors[1].Outcome != OutcomeLimited {
		t.Errorf("event: got %+v, want over_limit with skipped and limited", ev)
	}
	// The rejected request consumed nothing: one more passes on its own.
	wantCodes(t, h.call(t, request(desc("remote_address", "a"))), ok, ok)
	wantCodes(t, h.call(t, request(desc("remote_address", "a"))), over, over)

	// One counter named twice in a request is charged with both costs.
	resp = h.call(t, request(desc("remote_address", "b"), desc("remote_address", "b")))
	wantCodes(t, resp, ok, ok, ok)
	if resp.Statuses[0].LimitRemaining != 1 || resp.Statuses[1].LimitRemaining != 1 {
		t.Errorf("one counter twice: remaining %d and %d, want 1 and 1", resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining)
	}
	wantCodes(t, h.call(t, request(desc("remote_address", "b"), desc("remote_address", "b"))), over, over, over)
}

func TestHitsAddend(t *testing.T) {
	h := start(t, Options{})
	req := request(desc("remote_address", "a"))
	req.HitsAddend = 2
	if resp := h.call(t, req); resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("request hits_addend 2: remaining %d, want 1", resp.Statuses[0].LimitRemaining)
	}
	// The descriptor's hits_addend wins over the request's; 0 checks only.
	req = request(hits(desc("remote_address", "a"), 0))
	req.HitsAddend = 3
	for range 3 {
		resp := h.call(t, req)
		wantCodes(t, resp, ok, ok)
		if resp.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("hits_addend 0: remaining %d, want 1 (nothing charged)", resp.Statuses[0].LimitRemaining)
		}
	}
	// A cost beyond the limit's capacity is OVER_LIMIT, not an error, and
	// rejects the request's other descriptors' charges too.
	resp := h.call(t, request(hits(desc("remote_address", "b"), 4), desc("path", "/login")))
	wantCodes(t, resp, over, over, ok)
	if ev := h.obs.last(t); ev.Descriptors[1].Outcome != OutcomeSkipped {
		t.Errorf("login beside an impossible cost: outcome %s, want skipped", ev.Descriptors[1].Outcome)
	}
	wantCodes(t, h.call(t, request(hits(desc("remote_address", "b"), 3))), ok, ok)
	// A check of a limit that is used up rejects the request, charging
	// nothing.
	resp = h.call(t, request(hits(desc("remote_address", "b"), 0), desc("path", "/login")))
	wantCodes(t, resp, over, over, ok)
	if resp.Statuses[1].LimitRemaining != 2 {
		t.Errorf("login beside a failed check: remaining %d, want 2", resp.Statuses[1].LimitRemaining)
	}
}

func TestOverride(t *testing.T) {
	h := start(t, Options{})
	d := desc("remote_address", "a")
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	resp := h.call(t, request(d))
	wantCodes(t, resp, ok, ok)
	if l := resp.Statuses[0].CurrentLimit; l == nil || l.RequestsPerUnit != 1 || l.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("override: current_limit %v, want 1/HOUR", l)
	}
	if got := h.obs.last(t).Descriptors[0].Name; got != "test.override" {
		t.Errorf("override: metric name %q, want test.override (never the request's values)", got)
	}
	wantCodes(t, h.call(t, request(d)), over, over)
	// The configured limit of the same descriptor is untouched.
	wantCodes(t, h.call(t, request(desc("remote_address", "a"))), ok, ok)

	// Zero requests per unit deny every request.
	zero := desc("remote_address", "z")
	zero.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typev3.RateLimitUnit_SECOND}
	wantCodes(t, h.call(t, request(zero)), over, over)
	// A domain the configuration does not know matches nothing, own limit
	// or not.
	other := &rlsv3.RateLimitRequest{Domain: "other", Descriptors: request(d).Descriptors}
	if resp := h.call(t, other); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("own limit in an unknown domain: got %v, want OK with no limit", resp)
	}

	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit(42)}
	wantInvalid(t, h, request(d), "unit")
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(3)}
	wantInvalid(t, h, request(d), "unit_multiplier")
}

func TestReplaces(t *testing.T) {
	h := start(t, Options{})
	for range 4 { // past login's 2 a minute: it is replaced by per_team
		resp := h.call(t, request(desc("path", "/login"), desc("team", "t")))
		wantCodes(t, resp, ok, ok, ok)
		if resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("replaced login: current_limit %v, want none", resp.Statuses[0].CurrentLimit)
		}
	}
	if ev := h.obs.last(t); ev.Descriptors[0].Outcome != OutcomeReplaced || ev.Descriptors[1].Outcome != OutcomeAllowed {
		t.Errorf("outcomes: got %s, %s; want replaced, allowed", ev.Descriptors[0].Outcome, ev.Descriptors[1].Outcome)
	}
	wantCodes(t, h.call(t, request(desc("path", "/login"))), ok, ok) // login's own counter is untouched
}

func TestShadow(t *testing.T) {
	h := start(t, Options{})
	for i := range 3 {
		resp := h.call(t, request(desc("shadowed", "x"), desc("remote_address", "a")))
		wantCodes(t, resp, ok, ok, ok)
		want := OutcomeAllowed
		if i > 0 {
			want = OutcomeShadowLimited
		}
		if got := h.obs.last(t).Descriptors[0].Outcome; got != want {
			t.Fatalf("request %d: shadow outcome %s, want %s", i, got, want)
		}
		if i == 1 {
			if h := resp.ResponseHeadersToAdd; len(h) != 2 || strings.Contains(h[0].Value, "shadowed") || !strings.Contains(h[0].Value, "remote_address") {
				t.Errorf("headers show a shadow limit: %v", h)
			}
		}
	}
	// Shadow never rejects, and the enforced limit still does.
	resp := h.call(t, request(desc("shadowed", "x"), desc("remote_address", "a")))
	wantCodes(t, resp, over, ok, over)
}

// TestQuotaMode: a quota-mode descriptor (envoyproxy/ratelimit's
// quota_mode) is counted but never refuses; the response's dynamic
// metadata says that quota mode applied and which descriptors were over
// their quota, by index. An enforced descriptor beside it still refuses.
func TestQuotaMode(t *testing.T) {
	h := start(t, Options{Rules: newSet(t, `
domain: test
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`)})
	meta := func(resp *rlsv3.RateLimitResponse) (bool, []float64) {
		f := resp.GetDynamicMetadata().GetFields()
		var idx []float64
		for _, v := range f[MetadataQuotaModeViolations].GetListValue().GetValues() {
			idx = append(idx, v.GetNumberValue())
		}
		return f[MetadataQuotaModeEnabled].GetBoolValue(), idx
	}
	resp := h.call(t, request(desc("remote_address", "a"), desc("service", "service_1")))
	wantCodes(t, resp, ok, ok, ok)
	if on, v := meta(resp); !on || len(v) != 0 {
		t.Errorf("within the quota: metadata %v", resp.GetDynamicMetadata())
	}
	resp = h.call(t, request(desc("remote_address", "a"), desc("service", "service_1")))
	wantCodes(t, resp, ok, ok, ok)
	if on, v := meta(resp); !on || len(v) != 1 || v[0] != 1 {
		t.Errorf("over the quota: metadata %v, want quotaModeEnabled and quotaModeViolations [1]", resp.GetDynamicMetadata())
	}
	if got := h.obs.last(t).Descriptors[1].Outcome; got != OutcomeShadowLimited {
		t.Errorf("over the quota: outcome %s, want %s", got, OutcomeShadowLimited)
	}
	resp = h.call(t, request(desc("remote_address", "a"), desc("service", "service_1")))
	wantCodes(t, resp, over, over, ok)
	if on, v := meta(resp); !on || len(v) != 1 {
		t.Errorf("over both: metadata %v", resp.GetDynamicMetadata())
	}
	if resp := h.call(t, request(desc("remote_address", "b"))); resp.GetDynamicMetadata() != nil {
		t.Errorf("no quota-mode descriptor: metadata %v, want none", resp.GetDynamicMetadata())
	}
}

func headerMap(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

func TestHeaders(t *testing.T) {
	tests := []struct {
		name     string
		headers  Headers
		admitted map[string]string
		rejected map[string]string
	}{
		{"default", 0,
			map[string]string{"RateLimit-Policy": `"login";q=2;w=60`, "RateLimit": `"login";r=1;t=50`},
			map[string]string{"RateLimit-Policy": `"login";q=2;w=60`, "RateLimit": `"login";r=0;t=50`, "Retry-After": "50"}},
		{"legacy", HeadersLegacy,
			map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1800000060"},
			map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000060"}},
		{"all", HeadersIETF | HeadersLegacy | HeadersRetryAfter,
			map[string]string{"RateLimit-Policy": `"login";q=2;w=60`, "RateLimit": `"login";r=1;t=50`, "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1800000060"},
			map[string]string{"RateLimit-Policy": `"login";q=2;w=60`, "RateLimit": `"login";r=0;t=50`, "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000060", "Retry-After": "50"}},
		{"off", HeadersOff, map[string]string{}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{Headers: tt.headers})
			check := func(resp *rlsv3.RateLimitResponse, want map[string]string) {
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
			// The admitted request's headers describe the limit closest to
			// its end: login (1 left) rather than remote_address (2 left).
			check(h.call(t, request(desc("remote_address", "a"), desc("path", "/login"))), tt.admitted)
			h.call(t, request(desc("path", "/login")))
			check(h.call(t, request(desc("remote_address", "a"), desc("path", "/login"))), tt.rejected)
		})
	}
}

func wantInvalid(t *testing.T, h *harness, req *rlsv3.RateLimitRequest, msg string) {
	t.Helper()
	_, err := h.client.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), msg) {
		t.Errorf("got %v, want InvalidArgument mentioning %q", err, msg)
	}
}

func TestInvalid(t *testing.T) {
	h := start(t, Options{MaxDescriptors: 3, MaxEntries: 2, MaxValueBytes: 8, MaxHitsAddend: 100})
	long := strings.Repeat("x", 9)
	negative := desc("remote_address", "a")
	negative.IsNegativeHits = true
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		msg  string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: request(desc("a", "b")).Descriptors}, "empty domain"},
		{"long domain", &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", 257), Descriptors: request(desc("a", "b")).Descriptors}, "domain of 257 bytes"},
		{"no descriptors", request(), "no descriptors"},
		{"too many descriptors", request(desc("a", "b"), desc("a", "b"), desc("a", "b"), desc("a", "b")), "4 descriptors"},
		{"no entries", request(desc()), "no entries"},
		{"too many entries", request(desc("a", "b", "c", "d", "e", "f")), "3 entries"},
		{"empty key", request(desc("", "b")), "empty key"},
		{"long key", request(desc(long, "b")), "key of 9 bytes"},
		{"long value", request(desc("a", long)), "value of 9 bytes"},
		{"absurd descriptor hits", request(hits(desc("a", "b"), 101)), "hits_addend 101"},
		{"absurd request hits", &rlsv3.RateLimitRequest{Domain: "test", Descriptors: request(desc("a", "b")).Descriptors, HitsAddend: math.MaxUint32}, "hits_addend 4294967295"},
		{"negative hits", request(negative), "is_negative_hits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantInvalid(t, h, tt.req, tt.msg)
			if ev := h.obs.last(t); ev.Code != CodeInvalid {
				t.Errorf("event code %s, want invalid", ev.Code)
			}
		})
	}
}

// TestCurrent serves a service that a new configuration replaces, as a
// server swaps one per reload: the new rules apply at once, and a limit
// that keeps its name and definition keeps its count.
func TestCurrent(t *testing.T) {
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	first, err := New(Options{Store: st, Rules: newSet(t, testConfig)})
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[Service]
	cur.Store(first)
	d := Current(cur.Load)
	call := func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := d.Decide(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	call(request(desc("path", "/login")))
	next := strings.Replace(testConfig, "requests_per_unit: 3}", "requests_per_unit: 1}", 1) // remote_address: 3 → 1
	second, err := New(Options{Store: st, Rules: newSet(t, next)})
	if err != nil {
		t.Fatal(err)
	}
	cur.Store(second)
	wantCodes(t, call(request(desc("path", "/login"))), ok, ok)
	wantCodes(t, call(request(desc("path", "/login"))), over, over) // login's count survived
	wantCodes(t, call(request(desc("remote_address", "a"))), ok, ok)
	wantCodes(t, call(request(desc("remote_address", "a"))), over, over) // the new limit applies
}

func TestNewErrors(t *testing.T) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	set := newSet(t, testConfig)
	for _, o := range []Options{{Rules: set}, {Store: st}, {Store: st, Rules: set, OnStoreError: 7}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
}

var _ sluice.Store = (*memstore.Store)(nil)

func TestErrorsAreWrapped(t *testing.T) {
	h := start(t, Options{})
	_, err := h.svc.Decide(context.Background(), request())
	if !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("got %v, want ErrInvalidRequest", err)
	}
}
