package rls

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// redisConfig's limits are exact over an hour (sliding_log), so that the
// counts below do not depend on when the test runs.
const redisConfig = `
domain: shared
descriptors:
  - key: global
    rate_limit: {requests_per_unit: 20, unit: hour, algorithm: sliding_log}
  - key: client
    rate_limit: {requests_per_unit: 15, unit: hour, algorithm: sliding_log}
`

func newRedisStore(t *testing.T, srv *redistest.Server, onError redisstore.Failure) *redisstore.Store {
	t.Helper()
	// A generous timeout: on a loaded machine Redis can take longer than the
	// default 50 ms, and these tests are about exactness, not latency. A
	// stopped Redis still fails at once (its socket refuses connections).
	st, err := redisstore.New(redisstore.Options{URL: srv.URL(), OnError: onError, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestRedisTwoServices: two services on one Redis enforce one limit exactly,
// and a rejected request charges none of its descriptors on either.
func TestRedisTwoServices(t *testing.T) {
	srv := redistest.Start(t)
	set := newSet(t, redisConfig)
	var hs [2]*harness
	for i := range hs {
		hs[i] = start(t, Options{Store: newRedisStore(t, srv, redisstore.Local), Rules: set})
	}
	var admitted [2]atomic.Int64 // per client
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			h := hs[g%2]
			client := []string{"a", "b"}[g/4]
			for range 10 {
				resp, err := h.client.ShouldRateLimit(context.Background(),
					&rlsv3.RateLimitRequest{Domain: "shared", Descriptors: request(desc("global", "all"), desc("client", client)).Descriptors})
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == ok {
					admitted[g/4].Add(1)
				}
			}
		})
	}
	wg.Wait()
	a, b := admitted[0].Load(), admitted[1].Load()
	if a+b != 20 || a > 15 || b > 15 {
		t.Fatalf("admitted %d for a and %d for b; want 20 in all, at most 15 each", a, b)
	}
	// Each client's counter holds exactly its admitted requests: the
	// rejected ones were charged nothing.
	for i, client := range []string{"a", "b"} {
		resp := hs[i].call(t, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: request(hits(desc("client", client), 0)).Descriptors})
		if got, want := int64(resp.Statuses[0].LimitRemaining), 15-admitted[i].Load(); got != want {
			t.Errorf("client %s: %d remaining, want %d", client, got, want)
		}
	}
	// A fresh client beside the used-up global limit: rejected, and its
	// status tells its whole quota, uncharged.
	resp := hs[0].call(t, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: request(desc("global", "all"), desc("client", "c")).Descriptors})
	wantCodes(t, resp, over, over, ok)
	if got := resp.Statuses[1].LimitRemaining; got != 15 {
		t.Errorf("client c beside a rejection: %d remaining, want 15", got)
	}
}

// TestRedisFailure stops Redis under each choice of OnStoreError and of the
// Redis store's OnError.
func TestRedisFailure(t *testing.T) {
	tests := []struct {
		name    string
		failure Failure
		onError redisstore.Failure
		want    []rlsv3.RateLimitResponse_Code // per request; nil for UNAVAILABLE
	}{
		{"unavailable", FailUnavailable, redisstore.Local, nil},
		{"on_error deny", FailOnError, redisstore.Deny, []rlsv3.RateLimitResponse_Code{over, over}},
		{"on_error allow", FailOnError, redisstore.Allow, []rlsv3.RateLimitResponse_Code{ok, ok, ok}},
		// The local fallback starts from the request Redis admitted.
		{"on_error local", FailOnError, redisstore.Local, []rlsv3.RateLimitResponse_Code{ok, over, over}},
	}
	const config = `
domain: shared
descriptors:
  - key: client
    rate_limit: {requests_per_unit: 2, unit: hour, algorithm: sliding_log}
`
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			h := start(t, Options{Store: newRedisStore(t, srv, tt.onError), Rules: newSet(t, config), OnStoreError: tt.failure})
			req := &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: request(desc("client", "a")).Descriptors}
			if resp := h.call(t, req); resp.OverallCode != ok || resp.DynamicMetadata != nil {
				t.Fatalf("with Redis up: %v, want OK without metadata", resp)
			}
			srv.Stop()
			if tt.want == nil {
				_, err := h.client.ShouldRateLimit(context.Background(), req)
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("got %v, want Unavailable", err)
				}
				if ev := h.obs.last(t); ev.Code != CodeError || ev.Descriptors[0].Outcome != OutcomeError {
					t.Errorf("event: code %s, outcome %s; want unavailable, error", ev.Code, ev.Descriptors[0].Outcome)
				}
				if code, _ := post(t, h.url, `{"domain":"shared","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`); code != 503 {
					t.Errorf("POST /json: %d, want 503", code)
				}
				return
			}
			for i, want := range tt.want {
				resp := h.call(t, req)
				if resp.OverallCode != want {
					t.Fatalf("request %d with Redis down: %v, want %v", i, resp.OverallCode, want)
				}
				if !resp.DynamicMetadata.GetFields()[MetadataDegraded].GetBoolValue() {
					t.Errorf("request %d: dynamic_metadata %v, want %s true", i, resp.DynamicMetadata, MetadataDegraded)
				}
				if ev := h.obs.last(t); !ev.Descriptors[0].Decision.Degraded {
					t.Errorf("request %d: the event's decision is not marked degraded", i)
				}
			}
		})
	}
}
