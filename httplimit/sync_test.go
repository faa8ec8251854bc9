package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// Two gateways on one Redis, a global rule in lease mode next to a
// per-client rule in exact mode: every request is decided by both, and
// across the gateways the global rule admits exactly its limit.
func TestRuleSyncLeaseAcrossGateways(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	rules := []httplimit.Rule{
		{Name: "global", Key: []httplimit.KeyPart{httplimit.Global()}, Limit: limit(sluice.FixedWindow, 300, time.Minute), Sync: sluice.Sync{Mode: sluice.SyncLease}},
		{Name: "per-ip", Limit: limit(sluice.GCRA, 100000, time.Minute)},
	}
	var servers []*httptest.Server
	for range 2 {
		s, err := redisstore.New(redisstore.Options{URL: srv.URL(), Clock: clk, Timeout: 5 * time.Second, LeaseRate: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		lim, err := httplimit.New(httplimit.Options{Store: s, Rules: rules})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		h := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
		t.Cleanup(h.Close)
		servers = append(servers, h)
	}
	var ok, refused, other atomic.Int64
	var wg sync.WaitGroup
	for _, h := range servers {
		for range 4 {
			wg.Go(func() {
				for range 60 {
					resp, err := h.Client().Get(h.URL + "/")
					if err != nil {
						other.Add(1)
						continue
					}
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						ok.Add(1)
					case http.StatusTooManyRequests:
						refused.Add(1)
					default:
						other.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if other.Load() != 0 || ok.Load() != 300 || refused.Load() != 180 {
		t.Fatalf("got %d admitted, %d refused, %d other; want exactly 300 admitted and 180 refused", ok.Load(), refused.Load(), other.Load())
	}
}
