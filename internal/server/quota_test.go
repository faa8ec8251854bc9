package server_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

// Two gateways on one Redis with a global rule in lease mode: together
// they admit exactly its limit, most decisions made without calling Redis,
// as their metrics say.
func TestTwoGatewaysLeaseGlobalRule(t *testing.T) {
	srv := redistest.Start(t)
	opts := func() server.Options {
		return server.Options{Backend: "redis", Redis: redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 5 * time.Second, LeaseRate: 1}, Limiter: httplimit.Options{Rules: []httplimit.Rule{
			{Name: "global", Key: []httplimit.KeyPart{httplimit.Global()}, Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 200, Period: time.Hour}, Sync: sluice.Sync{Mode: sluice.SyncLease}},
		}}}
	}
	gws := []*running{start(t, opts()), start(t, opts())}
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for _, g := range gws {
		for range 3 {
			wg.Go(func() {
				for range 100 {
					if get(t, "GET", g.url+"/", nil).StatusCode == 200 {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	if admitted != 200 {
		t.Fatalf("admitted %d, want exactly the limit of 200", admitted)
	}
	local, calls := 0, 0
	for _, g := range gws {
		l, _ := strconv.Atoi(metric(t, g.admin, "sluice_quota_local_decisions_total"))
		c, _ := strconv.Atoi(metric(t, g.admin, "sluice_quota_redis_calls_total"))
		local, calls = local+l, calls+c
		if u := metric(t, g.admin, "sluice_quota_leased_unused"); u == "" {
			t.Errorf("no sluice_quota_leased_unused metric")
		}
	}
	if local < 100 || calls > local {
		t.Errorf("%d local decisions and %d Redis calls: leases did not pay", local, calls)
	}
}
